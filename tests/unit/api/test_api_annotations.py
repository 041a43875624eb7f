"""The budget annotations' codec (one encoder, one decoder each) and the Spot capacity labels."""

from __future__ import annotations

import hashlib
import json

import pytest

from modalscale.api.annotations import (
    BudgetCap,
    InvalidAnnotation,
    SpotSwitch,
    budget_cap,
    cap_annotation_key,
    hold_on_unreadable_cap,
    invalid_budget_annotations,
    same_value,
    spot_annotation_key,
    spot_switches,
    unreadable_budget_caps,
)
from modalscale.api.capacity import SPOT_NODE_SELECTOR, SPOT_TOLERATION, node_capacity_tier, pod_tier

DIGEST = hashlib.sha256(b"ml/daily").hexdigest()[:10]


def test_keys_are_the_contract_prefixes_and_ten_hex_of_the_policy_hash() -> None:
    assert cap_annotation_key("ml", "daily") == "budget.modalscale.io/cap-cfac823678" == \
        f"budget.modalscale.io/cap-{DIGEST}"
    assert spot_annotation_key("ml", "daily") == f"budget.modalscale.io/spot-{DIGEST}"


@pytest.mark.parametrize("cap", [BudgetCap(0, "ml/daily", "ScaleToZero"), BudgetCap(3, "a/b", "CapReplicas"),
                                 BudgetCap(1, "x/y", "ScaleDown")], ids=["zero", "cap", "down"])
def test_cap_round_trips(cap: BudgetCap) -> None:
    assert BudgetCap.decode("k", cap.encode()) == cap


def test_cap_value_is_the_compact_contract_json() -> None:
    assert BudgetCap(2, "ml/daily", "CapReplicas").encode() == \
        '{"maxReplicas":2,"policy":"ml/daily","action":"CapReplicas"}'


@pytest.mark.parametrize("value, field", [
    ("not json", "is not JSON"), ("[1]", "expected a JSON object"),
    ('{"maxReplicas": -1, "policy": "a/b", "action": "CapReplicas"}', "maxReplicas"),
    ('{"maxReplicas": true, "policy": "a/b", "action": "CapReplicas"}', "maxReplicas"),
    ('{"maxReplicas": 1, "action": "CapReplicas"}', "'policy'"),
    ('{"maxReplicas": 1, "policy": "a/b", "action": "Nope"}', "'action'"),
], ids=["text", "list", "negative", "bool", "no-policy", "action"])
def test_cap_decode_names_the_key_and_the_field(value: str, field: str) -> None:
    with pytest.raises(InvalidAnnotation, match="annotation budget.modalscale.io/cap-x") as exc:
        BudgetCap.decode("budget.modalscale.io/cap-x", value)
    assert field in str(exc.value)


@pytest.mark.parametrize("switch", [SpotSwitch("ml/daily", 50), SpotSwitch("a/b", 200)], ids=["50", "200"])
def test_spot_round_trips(switch: SpotSwitch) -> None:
    assert SpotSwitch.decode("k", switch.encode()) == switch
    assert json.loads(switch.encode())["capacityType"] == "Spot"


@pytest.mark.parametrize("value, field", [
    ('{"policy": "a/b", "capacityType": "OnDemand", "thresholdPercent": 50}', "capacityType"),
    ('{"policy": "a/b", "capacityType": "Spot", "thresholdPercent": 0}', "thresholdPercent"),
    ('{"capacityType": "Spot", "thresholdPercent": 50}', "'policy'"),
], ids=["type", "percent", "policy"])
def test_spot_decode_names_the_field(value: str, field: str) -> None:
    with pytest.raises(InvalidAnnotation, match=field):
        SpotSwitch.decode("budget.modalscale.io/spot-x", value)


def test_budget_cap_is_the_tightest_decodable_cap_and_spot_switches_are_read_beside_it() -> None:
    ann = {cap_annotation_key("a", "p1"): BudgetCap(3, "a/p1", "CapReplicas").encode(),
           cap_annotation_key("b", "p2"): BudgetCap(1, "b/p2", "ScaleDown").encode(),
           cap_annotation_key("c", "p3"): BudgetCap(1, "c/p3", "ScaleDown").encode(),
           "budget.modalscale.io/cap-broken": "not json",
           spot_annotation_key("a", "p1"): SpotSwitch("a/p1", 50).encode(),
           "budget.modalscale.io/spot-broken": "{}", "team": "x"}
    assert budget_cap(ann) == (1, "b/p2, c/p3")
    assert budget_cap(None) == (None, None)
    assert spot_switches(ann) == (SpotSwitch("a/p1", 50),)
    assert spot_switches({}) == ()
    problems = invalid_budget_annotations(ann)
    assert len(problems) == 2 and all("broken" in p for p in problems)


def test_an_unreadable_cap_holds_the_count_and_a_readable_one_below_it_still_applies() -> None:
    broken = {"budget.modalscale.io/cap-broken": '{"maxReplicas": -1, "policy": "a/p1", "action": "CapReplicas"}'}
    readable = {cap_annotation_key("b", "p2"): BudgetCap(2, "b/p2", "ScaleDown").encode()}
    (message,) = unreadable_budget_caps({**broken, **readable, "team": "x"})
    assert "budget.modalscale.io/cap-broken" in message and "maxReplicas" in message
    assert unreadable_budget_caps(readable) == () and unreadable_budget_caps(None) == ()
    assert hold_on_unreadable_cap(broken, None, 5) == 5  # no scale-up past a cap that may be lower
    assert hold_on_unreadable_cap({**broken, **readable}, 2, 5) == 2  # the readable cap below it applies
    assert hold_on_unreadable_cap({**broken, **readable}, 2, 1) == 1  # and no scale-up to it either
    assert hold_on_unreadable_cap(readable, 2, 1) == 2 and hold_on_unreadable_cap({}, None, 3) is None
    # only cap annotations hold the count: a broken Spot or rejection annotation is another matter
    assert hold_on_unreadable_cap({"budget.modalscale.io/spot-broken": "{}"}, None, 3) is None


def test_same_value_compares_json_not_text() -> None:
    assert same_value('{"a":1,"b":2}', '{"b": 2, "a": 1}')
    assert same_value(None, None) and not same_value(None, "{}") and not same_value("x", "{}")


@pytest.mark.parametrize("stored", [
    '{"maxReplicas":1.0,"policy":"ml/daily","action":"CapReplicas"}',
    '{"maxReplicas":true,"policy":"ml/daily","action":"CapReplicas"}',
], ids=["float", "bool"])
def test_a_cap_value_the_decoder_refuses_is_never_the_same_as_the_one_the_policy_writes(stored: str) -> None:
    """JSON equality in Python takes ``1.0`` and ``true`` for ``1``, the decoder does not: a cap stored as
    ``{"maxReplicas": 1.0, ...}`` (a hand edit, another writer) is unreadable (the autoscaler holds,
    ``BudgetCapUnreadable``), yet the policy that owns the key took it for the value it wants and never rewrote it
    (docs/budgets.md: "The policy that owns the key rewrites it ... at its next evaluation"): held for the period."""
    wanted = BudgetCap(1, "ml/daily", "CapReplicas").encode()
    key = cap_annotation_key("ml", "daily")
    assert unreadable_budget_caps({key: stored})
    assert not same_value(stored, wanted)
    switch = SpotSwitch("ml/daily", 50).encode()
    assert not same_value(switch.replace("50", "50.0"), switch)


@pytest.mark.parametrize("labels, tier", [
    ({"karpenter.sh/capacity-type": "spot"}, "Spot"), ({"karpenter.sh/capacity-type": "on-demand"}, "OnDemand"),
    ({"karpenter.sh/capacity-type": "reserved"}, "OnDemand"), ({"eks.amazonaws.com/capacityType": "SPOT"}, "Spot"),
    ({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, "OnDemand"), ({"cloud.google.com/gke-spot": "true"}, "Spot"),
    ({"cloud.google.com/gke-preemptible": "true"}, "Spot"),
    ({"kubernetes.azure.com/scalesetpriority": "spot"}, "Spot"), ({"type": "kwok"}, None), (None, None),
], ids=["karpenter-spot", "karpenter-od", "reserved", "eks-spot", "eks-od", "gke-spot", "gke-pre", "aks", "none",
        "unread"])
def test_node_capacity_tier_from_well_known_labels(labels: dict[str, str] | None, tier: str | None) -> None:
    assert node_capacity_tier(labels) == tier


def test_pod_tier_prefers_the_node_then_what_the_pod_asked_for() -> None:
    spot_pod = {"spec": {"nodeSelector": dict(SPOT_NODE_SELECTOR), "tolerations": [SPOT_TOLERATION]}}
    assert pod_tier(spot_pod, None) == "Spot"  # nodes not readable: the scheduler honoured its selector
    assert pod_tier({"spec": {}}, {"karpenter.sh/capacity-type": "spot"}) == "Spot"
    assert pod_tier({"spec": {}}, {}) is None


def test_an_annotation_nested_deeper_than_the_json_parser_goes_is_undecodable_not_a_crash() -> None:
    """Found by an adversarial probe (6 Dec 2026): ``RecursionError`` left every reader of budget annotations."""
    from modalscale.api.annotations import (
        budget_cap,
        budgeted_tenants,
        cap_annotation_key,
        invalid_budget_annotations,
        same_value,
        tenants_annotation_key,
    )

    deep = "[" * 100_000 + "]" * 100_000
    cap, tenants = cap_annotation_key("ns", "b"), tenants_annotation_key("ns", "b")
    assert budget_cap({cap: deep}) == (None, None)
    assert budgeted_tenants({tenants: deep}) == frozenset()
    assert same_value(deep, deep) is False
    (message,) = invalid_budget_annotations({cap: deep})
    assert message.startswith(f"annotation {cap}: '[[[[") and "(200002 characters) is not JSON" in message
