"""Drift repair of the two PodDisruptionBudgets (the replicas' ``<name>``, the gateway's ``<name>-gateway``) gives
exactly the desired spec.

The operator patches its children with a strategic merge patch, which keeps every field the patch does not name. A
PDB whose budget was changed to ``minAvailable`` (by a user, or an older operator) then gets ``maxUnavailable`` added
beside it, and the API server refuses a PDB with both (``spec: Invalid value: minAvailable and maxUnavailable cannot
be both set``, ``ValidatePodDisruptionBudgetSpec``): the repair would fail on every pass. A selector with an extra
label or expression selects a subset of the replicas and is drift too. :func:`strategic_merge` is the API server's
merge for the PDB's fields (maps merge, ``null`` deletes, ``$patch: replace`` replaces a map, lists are atomic).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from modalscale.api.inferenceservice import parse_isvc
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, plan_isvc
from tests.unit.operator.test_isvc_gateway_plan import FILES, IMAGE, NOW, make_isvc, run


def strategic_merge(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``obj`` after the strategic merge ``patch`` (apimachinery's ``strategicpatch.mergeMap`` for maps without
    list merge keys: a PDB spec's ``matchExpressions`` has no patch strategy, so lists replace)."""
    if "$patch" in patch:
        assert patch["$patch"] == "replace", patch
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = copy.deepcopy(obj)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = strategic_merge(out.get(key) if isinstance(out.get(key), dict) else {}, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


REPLICAS = {"matchLabels": {"modalscale.io/inferenceservice": "vc"}}
GATEWAY = {"matchLabels": {"modalscale.io/gateway": "vc"}}
DRIFTS = {
    "minAvailable-instead": lambda sel: {"minAvailable": 1, "selector": sel},
    "minAvailable-and-another-selector": lambda sel: {"minAvailable": 2, "selector": {"matchLabels": {"app": "x"}}},
    "minAvailable-percent": lambda sel: {"minAvailable": "50%", "selector": sel},
    "maxUnavailable-percent": lambda sel: {"maxUnavailable": "50%", "selector": sel},
    "an-extra-selector-label": lambda sel: {"maxUnavailable": 1, "selector": {
        "matchLabels": {**sel["matchLabels"], "tier": "a"}}},
    "an-extra-selector-expression": lambda sel: {"maxUnavailable": 1, "selector": {
        **sel, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}},
}


def converged() -> IsvcObserved:
    """Both PDBs (and every other child) as stored after the gateway is up: a rerun plans nothing."""
    body = make_isvc(gateway={"enabled": True})
    _, obs = run(body)
    plan, obs = run(body, obs)
    assert plan.writes != []  # the NetworkPolicy and the Service switch once a gateway pod is ready
    plan, obs = run(body, obs)
    assert plan.writes == []
    return obs


def pdb_of(obs: IsvcObserved, name: str) -> dict[str, Any]:
    pdb = obs.poddisruptionbudget if name == "vc" else obs.gateway_objects["PodDisruptionBudget"]
    assert pdb is not None
    return pdb


def plan(obs: IsvcObserved) -> Any:
    return plan_isvc(parse_isvc(make_isvc(gateway={"enabled": True})), obs, FILES, PlanConfig(gateway_image=IMAGE),
                     NOW)


@pytest.mark.parametrize("drift", DRIFTS.values(), ids=DRIFTS.keys())
@pytest.mark.parametrize("name", ["vc", "vc-gateway"], ids=["replicas", "gateway"])
def test_a_changed_disruption_budget_is_patched_to_exactly_the_desired_spec_and_a_rerun_writes_nothing(
        name: str, drift: Any) -> None:
    obs = converged()
    want = copy.deepcopy(pdb_of(obs, name)["spec"])
    extra = {"unhealthyPodEvictionPolicy": "AlwaysAllow"} if name == "vc" else {}
    pdb_of(obs, name)["spec"] = {**drift(REPLICAS if name == "vc" else GATEWAY), **extra}
    (w,) = plan(obs).writes
    assert (w.kind, w.action, w.name) == ("PodDisruptionBudget", "patch", name)
    repaired = strategic_merge(pdb_of(obs, name), w.body)
    assert repaired["spec"] == want  # never minAvailable beside maxUnavailable, which the API server refuses
    assert repaired["metadata"]["ownerReferences"] == pdb_of(obs, name)["metadata"]["ownerReferences"]
    pdb_of(obs, name)["spec"] = repaired["spec"]
    assert plan(obs).writes == []


def test_the_replicas_budget_policy_changed_alone_is_repaired_without_touching_the_budget() -> None:
    obs = converged()
    pdb_of(obs, "vc")["spec"]["unhealthyPodEvictionPolicy"] = "IfHealthyBudget"
    (w,) = plan(obs).writes
    assert strategic_merge(pdb_of(obs, "vc"), w.body)["spec"] == {
        "maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow", "selector": REPLICAS}
