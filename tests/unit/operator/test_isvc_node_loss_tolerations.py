"""Replicas and gateway pods leave a lost node quickly (issue 21, scenario 2: node loss mid-burst).

Without a toleration of their own, pods get the DefaultTolerationSeconds admission plugin's 300 s for the
``node.kubernetes.io/unreachable`` and ``not-ready`` NoExecute taints: the replacements of the replicas on a lost node
start 5 minutes after the node is marked. The operator writes its own, shorter ones
(``Settings.node_loss_toleration_s``, ``MODALSCALE_NODE_LOSS_TOLERATION_SECONDS``), merged with
``spec.placement.tolerations``: a user toleration that already tolerates the taint (the plugin's own rule) wins.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, cast

import pytest

from modalscale.api.annotations import SpotSwitch
from modalscale.api.inferenceservice import parse_isvc
from modalscale.operator.deps import Deps
from modalscale.operator.isvc.objects import NODE_LOSS_TAINTS, node_loss_tolerations
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, plan_isvc, with_spot_placement
from modalscale.operator.isvc.reconcile import plan_config
from modalscale.operator.settings import ConfigError, Settings
from tests.unit.operator.test_isvc_gateway_plan import FILES, NOW, make_isvc

UNREACHABLE, NOT_READY = "node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"


def ours(key: str, seconds: int = 30) -> dict[str, Any]:
    return {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}


def pod_specs(body: dict[str, Any], config: PlanConfig | None = None) -> dict[str, dict[str, Any]]:
    """The pod specs of the replicas' Deployment (``vc``) and the gateway's (``vc-gateway``) of a first plan."""
    plan = plan_isvc(parse_isvc(body), IsvcObserved(), FILES, config or PlanConfig(), NOW)
    return {w.name: w.body["spec"]["template"]["spec"] for w in plan.writes if w.kind == "Deployment"}


def test_the_taints_are_the_node_lifecycle_controllers() -> None:
    assert NODE_LOSS_TAINTS == (UNREACHABLE, NOT_READY)


@pytest.mark.parametrize("resources", [{"cpu": "2", "memory": "8Gi"},
                                       {"cpu": "2", "memory": "8Gi", "gpu": {"count": 1, "type": "nvidia-l4"}}],
                         ids=["cpu", "gpu"])
def test_replica_and_gateway_pods_tolerate_a_lost_node_for_30_s_by_default(resources: dict[str, Any]) -> None:
    pods = pod_specs(make_isvc(resources=resources, gateway={"enabled": True}))
    assert set(pods) == {"vc", "vc-gateway"}
    gpu = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}] if "gpu" in resources else []
    assert pods["vc"]["tolerations"] == [*gpu, ours(UNREACHABLE), ours(NOT_READY)]
    assert pods["vc-gateway"]["tolerations"] == [ours(UNREACHABLE), ours(NOT_READY)]


def test_the_toleration_seconds_come_from_the_plan_config() -> None:
    pods = pod_specs(make_isvc(gateway={"enabled": True}), PlanConfig(node_loss_toleration_s=45))
    for pod in pods.values():
        assert pod["tolerations"] == [ours(UNREACHABLE, 45), ours(NOT_READY, 45)]


def test_user_tolerations_are_kept_first_and_ours_added() -> None:
    user = [{"key": "pool", "operator": "Equal", "value": "serving", "effect": "NoSchedule"}]
    pods = pod_specs(make_isvc(placement={"tolerations": user}, gateway={"enabled": True}))
    for pod in pods.values():
        assert pod["tolerations"] == [*user, ours(UNREACHABLE), ours(NOT_READY)]


@pytest.mark.parametrize(("user", "added"), [
    ({"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600}, [NOT_READY]),
    ({"key": NOT_READY, "operator": "Exists", "effect": "NoExecute"}, [UNREACHABLE]),
    ({"key": UNREACHABLE, "operator": "Exists"}, [NOT_READY]),  # no effect: every effect, NoExecute included
    ({"operator": "Exists"}, []),  # no key: every taint, for ever
    ({"key": UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"}, [UNREACHABLE, NOT_READY]),  # not eviction
], ids=["unreachable-600s", "not-ready-forever", "unreachable-any-effect", "everything", "unreachable-noschedule"])
def test_a_user_toleration_of_the_same_taint_wins(user: dict[str, Any], added: list[str]) -> None:
    """The rule of the DefaultTolerationSeconds plugin (plugin/pkg/admission/defaulttolerationseconds): a toleration
    with the taint's key (or none) and effect NoExecute (or none) already decides; adding ours beside it would cut it
    short (the taint manager evicts at the smallest tolerationSeconds of the matching tolerations)."""
    pods = pod_specs(make_isvc(placement={"tolerations": [user]}, gateway={"enabled": True}))
    for pod in pods.values():
        assert pod["tolerations"] == [user, *(ours(k) for k in added)]
    assert node_loss_tolerations([user], 30) == [user, *(ours(k) for k in added)]


def test_the_spot_switch_adds_its_toleration_beside_ours_and_its_removal_keeps_ours() -> None:
    body = make_isvc(gateway={"enabled": False})
    spot = with_spot_placement(parse_isvc(body), (SpotSwitch("ml/daily", 100),))
    first = plan_isvc(spot, IsvcObserved(), FILES, PlanConfig(), NOW)
    dep = next(w.body for w in first.writes if w.kind == "Deployment")
    tolerations = dep["spec"]["template"]["spec"]["tolerations"]
    assert tolerations[-2:] == [ours(UNREACHABLE), ours(NOT_READY)] and len(tolerations) == 3
    observed = IsvcObserved(status=first.status, deployment=copy.deepcopy(dep))
    back = plan_isvc(parse_isvc(body), observed, FILES, PlanConfig(), NOW)
    patch = next(w.body for w in back.writes if w.kind == "Deployment")
    assert patch["spec"]["template"]["spec"]["tolerations"] == [ours(UNREACHABLE), ours(NOT_READY)]


def test_the_setting_is_read_from_the_environment_with_a_30_s_default() -> None:
    assert Settings.from_env({}).node_loss_toleration_s == 30
    s = Settings.from_env({"MODALSCALE_NODE_LOSS_TOLERATION_SECONDS": "120"})
    assert s.node_loss_toleration_s == 120
    assert plan_config(cast(Deps, SimpleNamespace(settings=s))).node_loss_toleration_s == 120
    assert PlanConfig().node_loss_toleration_s == Settings().node_loss_toleration_s == 30


@pytest.mark.parametrize(("raw", "message"), [
    ("soon", "MODALSCALE_NODE_LOSS_TOLERATION_SECONDS='soon': not a whole number; use e.g. 30"),
    ("2.5", "MODALSCALE_NODE_LOSS_TOLERATION_SECONDS='2.5': not a whole number; use e.g. 30"),
    ("-1", "MODALSCALE_NODE_LOSS_TOLERATION_SECONDS='-1': out of range; use a value in [0, 3600]"),
    ("3601", "MODALSCALE_NODE_LOSS_TOLERATION_SECONDS='3601': out of range; use a value in [0, 3600]"),
], ids=["word", "fraction", "negative", "over-an-hour"])
def test_a_bad_toleration_setting_stops_the_operator_naming_the_fix(raw: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"MODALSCALE_NODE_LOSS_TOLERATION_SECONDS": raw})
    assert message in str(err.value)
