"""The replicas' pods run as ``spec.serviceAccountName`` and pull with ``spec.imagePullSecrets`` (the image encoder
pool's pods too), and taking either out of the spec takes it off the Deployments.

The operator patches its Deployments with a strategic merge, which keeps a key the patch does not name and merges
``imagePullSecrets`` item by item on ``name``; and the API server mirrors ``serviceAccountName`` into the deprecated
``serviceAccount`` and reads the latter back when the former is gone (``Convert_v1_PodSpec_To_core_PodSpec``). So
leaving them out of the desired template removed nothing: the pods kept the old account and Secrets.
:func:`api_server` models both.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from modalscale.api.inferenceservice import parse_isvc
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, plan_isvc, stage_layout
from tests.factories import inference_service
from tests.unit.operator.test_isvc_stages import ENCODER_FILES, FRONT_FILES, ONE_PIECE_FILES, STAGES
from tests.unit.operator.test_isvc_template_repair import strategic_merge

NOW = dt.datetime(2026, 12, 8, 12, 0, tzinfo=dt.UTC)
CONFIG = PlanConfig(gateway_image="op:1", gateway_image_pull_secrets=("op-regcred",))
IDENTITY = {"serviceAccountName": "model-reader", "imagePullSecrets": [{"name": "ngc-mirror"}, {"name": "hub"}]}


def api_server(stored: dict[str, Any] | None, write: Any) -> dict[str, Any]:
    """A Deployment as the API server stores and returns it after ``write``: the strategic merge, then the v1
    conversion of the pod template's account (an empty ``serviceAccountName`` takes ``serviceAccount``; the
    returned object carries both)."""
    dep = copy.deepcopy(write.body) if write.action == "create" else strategic_merge(stored, write.body)
    if write.action == "create":
        dep["metadata"].update(generation=1, resourceVersion="1")
        n = dep["spec"]["replicas"]
        dep["status"] = {"observedGeneration": 1, "replicas": n, "readyReplicas": n, "updatedReplicas": n}
    pod = dep["spec"]["template"]["spec"]
    account = pod.get("serviceAccountName") or pod.get("serviceAccount")
    pod.pop("serviceAccountName", None)
    pod.pop("serviceAccount", None)
    if account:
        pod.update(serviceAccountName=account, serviceAccount=account)
    return dep


def other(stored: dict[str, Any] | None, write: Any) -> dict[str, Any]:
    """Any other child after ``write`` (a created Service gets a ClusterIP: the front calls the encoder pool's)."""
    if write.action != "create":
        return strategic_merge(stored, write.body, keys={})
    obj = copy.deepcopy(write.body)
    if obj["kind"] == "Service":
        obj["spec"]["clusterIP"] = "10.0.0.40"
    return obj


def body(staged: bool = False, **spec: Any) -> dict[str, Any]:
    return inference_service("vc", "ml", uid="u-1", generation=1, **({"stages": STAGES} if staged else {}),
                             **{"scaling": {"mode": "Fixed", "replicas": 2, "minReplicas": 1, "maxReplicas": 4},
                                **spec})


def run(b: dict[str, Any], obs: IsvcObserved, config: PlanConfig = CONFIG) -> tuple[Any, IsvcObserved]:
    """One full pass of ``b`` and the world after its writes (the gateway's Deployment ready)."""
    spec = parse_isvc(b)
    files = (FRONT_FILES if stage_layout(spec, obs).front_address else ONE_PIECE_FILES) if spec.stages else \
        ONE_PIECE_FILES
    plan = plan_isvc(spec, obs, files, config, NOW, encoder_files=ENCODER_FILES)
    obs = copy.deepcopy(obs)
    for w in plan.writes:
        if w.action == "delete":
            continue
        if w.name.endswith("-image-encoder") or w.name.endswith("-image-encoder-model-repo"):
            store = api_server if w.kind == "Deployment" else other
            obs.image_encoder[w.kind] = store(obs.image_encoder.get(w.kind), w)
        elif w.name.endswith("-gateway") or (w.name.endswith("-replicas") and w.kind != "Deployment"):
            obs.gateway_objects[w.kind] = (api_server if w.kind == "Deployment" else other)(
                obs.gateway_objects.get(w.kind), w)
        else:
            slot = w.kind.lower()
            setattr(obs, slot, (api_server if w.kind == "Deployment" else other)(getattr(obs, slot), w))
    return plan, obs


def settled(b: dict[str, Any], config: PlanConfig = CONFIG) -> IsvcObserved:
    obs = IsvcObserved()
    for _ in range(4):
        _, obs = run(b, obs, config)
    assert run(b, obs, config)[0].writes == []
    return obs


def deployments(obs: IsvcObserved) -> dict[str, dict[str, Any]]:
    deps = {"front": obs.deployment, "image-encoder": obs.image_encoder.get("Deployment"),
            "gateway": obs.gateway_objects.get("Deployment")}
    return {k: v["spec"]["template"]["spec"] for k, v in deps.items() if v is not None}


@pytest.mark.parametrize("staged", [False, True], ids=["one-piece", "staged"])
def test_the_replicas_and_the_encoder_pool_run_as_the_account_and_pull_with_the_secrets(staged: bool) -> None:
    pods = deployments(settled(body(staged, **IDENTITY)))
    assert set(pods) == ({"front", "image-encoder", "gateway"} if staged else {"front", "gateway"})
    for name in set(pods) - {"gateway"}:
        assert pods[name]["serviceAccountName"] == "model-reader"
        assert pods[name]["imagePullSecrets"] == [{"name": "ngc-mirror"}, {"name": "hub"}]
        assert pods[name]["automountServiceAccountToken"] is False  # identity webhooks project their own token
    # The gateway pods run the operator's image as their own account, with the operator's pull secrets.
    assert pods["gateway"]["serviceAccountName"] == "vc-gateway"
    assert pods["gateway"]["imagePullSecrets"] == [{"name": "op-regcred"}]


@pytest.mark.parametrize("staged", [False, True], ids=["one-piece", "staged"])
@pytest.mark.parametrize(("before", "after"), [
    (IDENTITY, {}),
    (IDENTITY, {"serviceAccountName": "other", "imagePullSecrets": [{"name": "hub"}]}),
    (IDENTITY, {"imagePullSecrets": [{"name": "new"}]}),
    ({}, IDENTITY),
], ids=["both-removed", "one-secret-removed-account-changed", "secrets-replaced", "both-added"])
def test_a_changed_account_or_secret_list_is_exactly_the_specs_on_every_pool_and_a_rerun_writes_nothing(
        staged: bool, before: dict[str, Any], after: dict[str, Any]) -> None:
    _, obs = run(body(staged, **after), settled(body(staged, **before)))
    for name, pod in deployments(obs).items():
        if name == "gateway":
            continue
        assert pod.get("serviceAccountName") == after.get("serviceAccountName"), name
        assert pod.get("serviceAccount") == after.get("serviceAccountName"), name
        assert pod.get("imagePullSecrets") == after.get("imagePullSecrets"), name
    assert run(body(staged, **after), obs)[0].writes == []


@pytest.mark.parametrize(("before", "after"), [(("op-regcred", "old"), ("op-regcred",)), (("old",), ())],
                         ids=["one-removed", "all-removed"])
def test_a_pull_secret_taken_out_of_the_operators_setting_leaves_the_gateway_pods(
        before: tuple[str, ...], after: tuple[str, ...]) -> None:
    obs = settled(body(), PlanConfig(gateway_image="op:1", gateway_image_pull_secrets=before))
    config = PlanConfig(gateway_image="op:1", gateway_image_pull_secrets=after)
    _, obs = run(body(), obs, config)
    assert deployments(obs)["gateway"].get("imagePullSecrets", []) == [{"name": n} for n in after]
    assert run(body(), obs, config)[0].writes == []
