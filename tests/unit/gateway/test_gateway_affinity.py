"""Consistent hashing with bounded loads (modalscale.gateway.affinity): the load bound holds at every placement,
a replica joining or leaving moves only its share of keys, and the choice is deterministic."""

from __future__ import annotations

import hashlib
import math
import random

import pytest

from modalscale.gateway.affinity import DEFAULT_C, affinity_key, capacity, choose, pick

KEYS = [hashlib.blake2b(i.to_bytes(4, "big"), digest_size=16).digest() for i in range(6000)]


def _zipf_keys(count: int, distinct: int, s: float, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return rng.choices(KEYS[:distinct], weights=[1 / (i + 1) ** s for i in range(distinct)], k=count)


@pytest.mark.parametrize("c", [1.0, DEFAULT_C, 2.0])
@pytest.mark.parametrize("replicas", [1, 3, 4, 7])
def test_while_requests_only_arrive_no_replica_exceeds_ceil_c_times_the_mean(replicas: int, c: float) -> None:
    """Zipf-drawn keys (a few hot images): after every placement each replica holds at most ceil(c * m / n) of
    the m requests (the paper's bound)."""
    loads = {f"replica-{i}": 0 for i in range(replicas)}
    for m, key in enumerate(_zipf_keys(1500, distinct=300, s=1.2, seed=replicas), start=1):
        loads[pick(key, loads, c)] += 1
        assert max(loads.values()) <= math.ceil(c * m / replicas)


@pytest.mark.parametrize("c", [1.0, DEFAULT_C, 2.0])
@pytest.mark.parametrize("replicas", [3, 4, 7])
def test_with_requests_finishing_the_replica_placed_on_stays_within_the_bound(replicas: int, c: float) -> None:
    """Requests also finish at random: the replica that takes a request is within ceil(c * m / n) of the m then in
    flight, and one above the bound (its peers' requests finished) is given nothing."""
    rng = random.Random(replicas)
    loads = {f"replica-{i}": 0 for i in range(replicas)}
    in_flight: list[str] = []
    for key in _zipf_keys(3000, distinct=300, s=1.2, seed=replicas):
        over = {name for name, load in loads.items() if load >= capacity(loads, c)}
        replica = pick(key, loads, c)
        assert replica not in over
        loads[replica] += 1
        in_flight.append(replica)
        assert loads[replica] <= math.ceil(c * len(in_flight) / replicas)
        while len(in_flight) > 8 * replicas or (in_flight and rng.random() < 0.3):
            loads[in_flight.pop(rng.randrange(len(in_flight)))] -= 1


def test_one_hot_key_spreads_only_as_far_as_the_bound_forces() -> None:
    loads = {f"r{i}": 0 for i in range(4)}
    for _ in range(100):
        loads[pick(KEYS[0], loads)] += 1
    assert max(loads.values()) <= math.ceil(DEFAULT_C * 100 / 4) == 32
    assert sorted(loads.values(), reverse=True)[0] >= 25  # the key's own replica is filled first


def _owners(replicas: list[str]) -> dict[bytes, str]:
    loads = dict.fromkeys(replicas, 0)
    return {key: pick(key, loads) for key in KEYS}


def test_adding_a_replica_moves_about_one_in_n_keys_and_only_to_the_new_one() -> None:
    before = _owners([f"pod-{i}" for i in range(5)])
    after = _owners([f"pod-{i}" for i in range(6)])
    moved = [key for key in KEYS if before[key] != after[key]]
    assert all(after[key] == "pod-5" for key in moved)
    assert 0.10 < len(moved) / len(KEYS) < 0.25  # 1/6 = 0.167


def test_removing_a_replica_moves_only_its_keys() -> None:
    before = _owners([f"pod-{i}" for i in range(5)])
    after = _owners([f"pod-{i}" for i in range(5) if i != 2])
    moved = {key for key in KEYS if before[key] != after[key]}
    assert moved == {key for key in KEYS if before[key] == "pod-2"}
    assert 0.12 < len(moved) / len(KEYS) < 0.30  # 1/5 = 0.2


def test_shares_are_near_even_with_no_load() -> None:
    counts: dict[str, int] = {}
    for owner in _owners([f"pod-{i}" for i in range(4)]).values():
        counts[owner] = counts.get(owner, 0) + 1
    assert len(counts) == 4
    assert max(counts.values()) < 1.3 * len(KEYS) / 4 and min(counts.values()) > 0.7 * len(KEYS) / 4


def test_choice_does_not_depend_on_the_order_of_the_loads_mapping() -> None:
    loads = {"b": 3, "a": 1, "d": 0, "c": 2}
    backwards = dict(reversed(list(loads.items())))
    assert [pick(key, loads) for key in KEYS[:500]] == [pick(key, backwards) for key in KEYS[:500]]


def test_key_goes_to_its_own_replica_until_that_one_is_at_capacity() -> None:
    loads = {"a": 0, "b": 0, "c": 0}
    home = choose(KEYS[7], loads)
    assert home.preferred
    loads[home.replica] = 10  # capacity is ceil(1.25 * 11 / 3) = 5
    assert capacity(loads) == 5
    moved = choose(KEYS[7], loads)
    assert moved.replica != home.replica and not moved.preferred


def test_without_a_key_the_least_loaded_replica_wins_and_ties_go_in_name_order() -> None:
    assert choose(None, {"a": 2, "b": 1, "c": 1}) == choose(None, {"c": 1, "b": 1, "a": 2})
    assert pick(None, {"a": 2, "b": 1, "c": 1}) == "b"
    loads = {"x": 0, "y": 0, "z": 0}
    order = []
    for _ in range(6):
        replica = pick(None, loads)
        loads[replica] += 1
        order.append(replica)
    assert order == ["x", "y", "z", "x", "y", "z"]
    assert not choose(None, loads).preferred


@pytest.mark.parametrize(("loads", "c", "match"), [
    ({}, DEFAULT_C, "no Ready replica"),
    ({"a": 1}, 0.9, "c must be >= 1"),
    ({"a": -1}, DEFAULT_C, "loads must be >= 0"),
])
def test_bad_arguments_are_refused(loads: dict[str, int], c: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        choose(KEYS[0], loads, c)


def test_affinity_key_is_the_first_images_digest() -> None:
    assert affinity_key([KEYS[1], KEYS[2]]) == KEYS[1]
    assert affinity_key(()) is None
