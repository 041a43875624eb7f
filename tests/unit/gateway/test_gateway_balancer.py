"""The balancer: the routable set from EndpointSlice conditions, outstanding counts, least-outstanding and affinity."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from modalscale.gateway.balancer import Balancer, Endpoint, least_outstanding, parse_static
from modalscale.gateway.endpoints import endpoints_from_slice, merge_slices

A, B, C = (Endpoint("10.0.0.1", 8000, 8001, name="a"), Endpoint("10.0.0.2", 8000, 8001, name="b"),
           Endpoint("10.0.0.3", 8000, 8001, name="c"))


def test_only_ready_and_not_terminating_endpoints_are_routable() -> None:
    b = Balancer(rng=random.Random(0))
    b.update([A, Endpoint("10.0.0.2", 8000, ready=False), Endpoint("10.0.0.3", 8000, terminating=True)])
    assert [ep.key for ep in b.endpoints] == ["10.0.0.1:8000"]
    assert {b.pick(None, 0.0).key for _ in range(50)} == {"10.0.0.1:8000"}  # type: ignore[union-attr]


def test_no_routable_endpoint_picks_none() -> None:
    b = Balancer()
    b.update([Endpoint("10.0.0.2", 8000, ready=False)])
    assert not b.has_ready()
    assert b.pick(None, 0.0) is None


def test_least_outstanding_goes_to_the_idle_replica() -> None:
    b = Balancer(rng=random.Random(1))
    b.update([A, B, C])
    for _ in range(3):
        b.acquire(A)
    b.acquire(B)
    assert b.pick(None, 0.0) == C
    b.acquire(C)
    assert b.pick(None, 0.0) in (B, C)  # 3, 1, 1 outstanding


def test_sequential_requests_spread_evenly_over_replicas() -> None:
    # Each request finishes before the next (one keep-alive client): random ties spread them all.
    b = Balancer(rng=random.Random(2))
    b.update([A, B])
    counts: Counter[str] = Counter()
    for _ in range(400):
        ep = b.pick(None, 0.0)
        assert ep is not None
        b.acquire(ep)
        counts[ep.key] += 1
        b.release(ep)
    assert min(counts.values()) >= 160, counts  # 200 expected; binomial sd 10


def test_concurrent_requests_alternate_over_replicas() -> None:
    b = Balancer(rng=random.Random(3))
    b.update([A, B, C])
    picked = []
    for _ in range(6):
        ep = b.pick(None, 0.0)
        assert ep is not None
        b.acquire(ep)
        picked.append(ep.key)
    assert Counter(picked) == {A.key: 2, B.key: 2, C.key: 2}


def test_terminating_endpoint_keeps_its_outstanding_count_until_released() -> None:
    b = Balancer()
    b.update([A, B])
    b.acquire(A)
    b.update([Endpoint("10.0.0.1", 8000, 8001, terminating=True), B])
    assert b.outstanding() == {A.key: 1}
    assert b.pick(None, 0.0) == B
    b.release(A)
    assert b.outstanding() == {}


def test_release_without_acquire_is_an_error() -> None:
    b = Balancer()
    with pytest.raises(ValueError, match="without a matching acquire"):
        b.release(A)


def test_exclude_skips_the_replica_a_retry_failed_on() -> None:
    b = Balancer(rng=random.Random(4))
    b.update([A, B])
    assert {b.pick(None, 0.0, exclude=(A.key,)) for _ in range(20)} == {B}
    assert b.pick(None, 0.0, exclude=(A.key, B.key)) is None


def test_ejected_replica_is_skipped_until_the_ejection_ends_unless_it_is_the_only_one() -> None:
    b = Balancer(rng=random.Random(5))
    b.update([A, B])
    b.eject(A, now_s=10.0, for_s=2.0)
    assert {b.pick(None, 11.0) for _ in range(20)} == {B}
    assert A in {b.pick(None, 12.5) for _ in range(40)}
    b.eject(A, now_s=20.0)
    assert b.pick(None, 20.5, exclude=(B.key,)) == A  # better a likely failure than a certain 503


def test_image_key_sticks_to_one_replica_while_loads_are_even() -> None:
    b = Balancer(rng=random.Random(6))
    b.update([A, B, C])
    key = b"\x01" * 16
    homes = {b.pick(key, 0.0) for _ in range(20)}
    assert len(homes) == 1
    other = {b.pick(bytes([i]) * 16, 0.0) for i in range(40)}
    assert len(other) == 3  # different images spread over all replicas


def test_image_key_spills_to_another_replica_when_its_home_is_overloaded() -> None:
    b = Balancer(load_factor=1.25, rng=random.Random(7))
    b.update([A, B, C])
    key = b"\x02" * 16
    home = b.pick(key, 0.0)
    assert home is not None
    for _ in range(8):
        b.acquire(home)
    assert b.pick(key, 0.0) != home


def test_load_factor_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="load_factor"):
        Balancer(load_factor=0.9)


def test_least_outstanding_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        least_outstanding({}, random.Random(0))


@pytest.mark.parametrize(("spec", "keys", "grpc"), [
    ("127.0.0.1:8000", ["127.0.0.1:8000"], [None]),
    ("a:8000:8001, b:9000:9001", ["a:8000", "b:9000"], ["a:8001", "b:9001"]),
    ("", [], []),
], ids=["http-only", "two-with-grpc", "empty"])
def test_parse_static(spec: str, keys: list[str], grpc: list[str | None]) -> None:
    eps = parse_static(spec)
    assert [e.key for e in eps] == keys and [e.grpc_target for e in eps] == grpc


@pytest.mark.parametrize("spec", ["host", "host:0", "host:70000", ":8000", "h:1:2:3", "h:x"])
def test_parse_static_names_the_bad_item(spec: str) -> None:
    with pytest.raises(ValueError, match="is not host:http_port"):
        parse_static(spec)


def _slice(endpoints: list[dict[str, object]], ports: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {"metadata": {"name": "s"}, "ports": ports if ports is not None else [
        {"name": "http", "port": 8000}, {"name": "grpc", "port": 8001}], "endpoints": endpoints}


def test_endpoint_slice_conditions_map_to_ready_and_terminating() -> None:
    raw = _slice([
        {"addresses": ["10.1.0.1"], "conditions": {"ready": True}, "targetRef": {"name": "p1"}},
        {"addresses": ["10.1.0.2"], "conditions": {"ready": False, "serving": True, "terminating": True}},
        {"addresses": ["10.1.0.3"]},  # absent conditions: ready, not terminating (EndpointSlice API)
    ])
    eps = endpoints_from_slice(raw)
    assert [(e.key, e.grpc_target, e.ready, e.terminating, e.name) for e in eps] == [
        ("10.1.0.1:8000", "10.1.0.1:8001", True, False, "p1"),
        ("10.1.0.2:8000", "10.1.0.2:8001", False, True, ""),
        ("10.1.0.3:8000", "10.1.0.3:8001", True, False, ""),
    ]
    b = Balancer()
    b.update(eps)
    assert [e.key for e in b.endpoints] == ["10.1.0.1:8000", "10.1.0.3:8000"]


def test_slice_without_an_http_port_yields_nothing() -> None:
    assert endpoints_from_slice(_slice([{"addresses": ["10.1.0.1"]}], ports=[{"name": "grpc", "port": 8001}])) == []


def test_merge_slices_orders_by_slice_then_address() -> None:
    one = _slice([{"addresses": ["10.1.0.9"]}])
    two = _slice([{"addresses": ["10.1.0.1"]}])
    assert [e.host for e in merge_slices({"b": one, "a": two})] == ["10.1.0.1", "10.1.0.9"]


def test_choose_says_whether_the_image_key_went_to_its_own_replica() -> None:
    b = Balancer(load_factor=1.25, rng=random.Random(8))
    b.update([A, B, C])
    key = b"\x03" * 16
    chosen = b.choose(key, 0.0)
    assert chosen is not None and chosen[1] is True
    for _ in range(8):
        b.acquire(chosen[0])
    spilled = b.choose(key, 0.0)
    assert spilled is not None and spilled[0] != chosen[0] and spilled[1] is False
    no_key = b.choose(None, 0.0)
    assert no_key is not None and no_key[1] is False


def test_an_idle_replica_beats_a_busy_home_replica() -> None:
    b = Balancer(load_factor=1.25, rng=random.Random(9))
    b.update([A, B])
    key = b"\x04" * 16
    home = b.pick(key, 0.0)
    assert home is not None
    b.acquire(home)  # one request in flight at the home; the bound ceil(1.25 * 2 / 2) = 2 would still admit it
    chosen = b.choose(key, 0.0)
    assert chosen is not None and chosen[0] != home and chosen[1] is False
    other = chosen[0]
    b.acquire(other)  # no replica idle now: the bounded-load ring decides again, and the home takes its image
    again = b.choose(key, 0.0)
    assert again is not None and again[0] == home and again[1] is True


def test_two_requests_in_flight_over_two_replicas_never_share_one_while_the_other_idles() -> None:
    """Closed loop of 2 clients, each sending a new unique image when its previous request finishes (the real-node
    run's shape): before the fix 49 % of picks put both in-flight requests on one replica."""
    b = Balancer(load_factor=1.25, rng=random.Random(10))
    b.update([A, B])
    rng = random.Random(11)
    in_flight = [b.pick(rng.randbytes(16), 0.0), b.pick(rng.randbytes(16), 0.0)]
    for ep in in_flight:
        assert ep is not None
        b.acquire(ep)
    shared = 0
    for _ in range(2000):
        i = rng.randrange(2)  # one of the two requests finishes; its client sends the next
        done = in_flight[i]
        assert done is not None
        b.release(done)
        nxt = b.pick(rng.randbytes(16), 0.0)
        assert nxt is not None
        b.acquire(nxt)
        in_flight[i] = nxt
        shared += in_flight[0] == in_flight[1]
    assert shared == 0


@pytest.mark.parametrize("order", ["stale first", "stale last"])
def test_a_pod_one_slice_lists_terminating_is_not_routable_while_a_stale_slice_still_lists_it_ready(
        order: str) -> None:
    # An endpoint moved between slices (a re-shard) is listed twice for a moment: the new slice with its current
    # conditions, the old one not yet rewritten. A pod never stops terminating, so a terminating copy is the truth;
    # a stale ready copy must not send it new requests ("a terminating replica gets no new request").
    stale = _slice([{"addresses": ["10.1.0.1"], "conditions": {"ready": True}, "targetRef": {"name": "p1"}}])
    current = _slice([{"addresses": ["10.1.0.1"], "conditions": {"ready": False, "serving": True,
                                                                 "terminating": True}, "targetRef": {"name": "p1"}},
                      {"addresses": ["10.1.0.2"], "conditions": {"ready": True}, "targetRef": {"name": "p2"}}])
    names = ("a", "b") if order == "stale first" else ("b", "a")
    b = Balancer(rng=random.Random(0))
    b.update(merge_slices({names[0]: stale, names[1]: current}))
    assert [e.key for e in b.endpoints] == ["10.1.0.2:8000"]
    assert {b.pick(None, 0.0).key for _ in range(50)} == {"10.1.0.2:8000"}  # type: ignore[union-attr]
    assert b.warming == ()  # nor is it a starting pod to probe


def test_a_pod_listed_twice_is_routable_when_one_copy_is_ready_and_none_terminating() -> None:
    # The other half of the merge: a pod that turned Ready in one slice while a stale copy still says not ready.
    b = Balancer(rng=random.Random(0))
    b.update([Endpoint("10.1.0.1", 8000, ready=False, name="p1"), Endpoint("10.1.0.1", 8000, name="p1")])
    assert [e.key for e in b.endpoints] == ["10.1.0.1:8000"]


def test_an_ipv6_pod_address_gives_a_url_and_a_grpc_target_that_name_its_host_and_port() -> None:
    # An EndpointSlice of addressType IPv6 (an IPv6 or dual-stack cluster) lists bare addresses; "http://" + key
    # is the URL every request and readiness check goes to, and grpc_target the channel's target.
    import yarl

    raw = {**_slice([{"addresses": ["fd00:10:244::5"], "conditions": {"ready": True}}]), "addressType": "IPv6"}
    (ep,) = endpoints_from_slice(raw)
    url = yarl.URL(f"http://{ep.key}/v2/health/ready")
    assert (url.host, url.port) == ("fd00:10:244::5", 8000)
    assert ep.grpc_target == "[fd00:10:244::5]:8001"
    assert Endpoint("10.0.0.1", 8000, 8001).key == "10.0.0.1:8000"  # IPv4 and names unchanged
    assert Endpoint("replica-0.local", 8000, 8001).grpc_target == "replica-0.local:8001"


def _family_slice(family: str, pods: list[tuple[str, str, dict[str, object]]]) -> dict[str, object]:
    """One EndpointSlice of ``addressType`` ``family`` listing ``(pod, address, conditions)``, as the EndpointSlice
    controller writes it (targetRef with the pod's uid)."""
    return {**_slice([{"addresses": [addr], "conditions": cond,
                       "targetRef": {"kind": "Pod", "name": pod, "uid": f"uid-{pod}"}} for pod, addr, cond in pods]),
            "addressType": family}


READY: dict[str, object] = {"ready": True}
DUAL_STACK = {  # names as the controller makes them: a random suffix, so the IPv6 slice may sort first
    "svc-replicas-4v2kq": _family_slice("IPv6", [("p1", "fd00::1", READY), ("p2", "fd00::2", READY)]),
    "svc-replicas-zx9bd": _family_slice("IPv4", [("p1", "10.1.0.1", READY), ("p2", "10.1.0.2", READY)]),
}


def test_a_dual_stack_service_lists_each_pod_once_at_its_ipv4_address() -> None:
    # A dual-stack replicas Service gets one EndpointSlice per address family, so every pod is listed twice. Counted
    # twice, a pod took a double share of least-outstanding picks (its in-flight count split over two keys), two
    # points of the affinity ring and two warming checks; one replica per pod, at one address whatever the slice
    # names.
    eps = merge_slices(DUAL_STACK)
    assert [(e.host, e.name) for e in eps] == [("10.1.0.1", "p1"), ("10.1.0.2", "p2")]
    b = Balancer(rng=random.Random(0))
    b.update(eps)
    assert [e.key for e in b.endpoints] == ["10.1.0.1:8000", "10.1.0.2:8000"]
    b.acquire(b.pick(None, 0.0))  # type: ignore[arg-type]
    second = b.pick(None, 0.0)
    assert second is not None and b.outstanding().get(second.key) is None  # the idle pod, not the busy one's twin
    swapped = {"a": DUAL_STACK["svc-replicas-zx9bd"], "b": DUAL_STACK["svc-replicas-4v2kq"]}
    assert merge_slices(swapped) == eps


def test_a_pod_whose_ipv4_slice_goes_keeps_one_entry_at_its_ipv6_address() -> None:
    # The Service's ipFamilies changed (IPv4 dropped): the pods stay, listed once at their IPv6 address; no stale
    # IPv4 entry stays routable.
    b = Balancer(rng=random.Random(0))
    b.update(merge_slices(DUAL_STACK))
    b.update(merge_slices({"svc-replicas-4v2kq": DUAL_STACK["svc-replicas-4v2kq"]}))
    assert [e.key for e in b.endpoints] == ["[fd00::1]:8000", "[fd00::2]:8000"]
    assert b.warming == ()


def test_a_pod_terminating_in_one_family_is_not_routable_while_the_other_family_still_lists_it_ready() -> None:
    # The controller rewrites the two families' slices one after the other: the pod's conditions are merged as one
    # pod's (terminating if any copy is), not read as two pods, one of them still ready.
    slices = {"a": _family_slice("IPv4", [("p1", "10.1.0.1", READY), ("p2", "10.1.0.2", READY)]),
              "b": _family_slice("IPv6", [("p1", "fd00::1", {"ready": False, "terminating": True}),
                                          ("p2", "fd00::2", READY)])}
    b = Balancer(rng=random.Random(0))
    b.update(merge_slices(slices))
    assert [e.key for e in b.endpoints] == ["10.1.0.2:8000"]


def test_an_endpoint_with_two_addresses_is_one_replica_at_its_first() -> None:
    # EndpointSlice API: an endpoint's addresses are fungible and clients may use only the first.
    raw = _slice([{"addresses": ["10.1.0.1", "10.1.0.7"], "targetRef": {"name": "p1"}}])
    assert [e.key for e in merge_slices({"s": raw})] == ["10.1.0.1:8000"]
