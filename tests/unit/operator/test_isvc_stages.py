"""The staged layout (issue 24, ``spec.stages``) in the pure planner: the image encoder pool's objects with owner
references and their own labels, resources and replicas; the front pool rendered for the encoder Service's ClusterIP;
the order of a switch on and off; per-stage status; budget caps over both pools (the costlier gives up replicas
first); a rerun that writes nothing; a planner that reads
nothing but its arguments. (Without ``spec.stages``: ``test_isvc_stages_off.py``.)"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import re
from decimal import Decimal
from typing import Any

import pytest

from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import DELETE, AutoscalerRecord, ScalerState, read_isvc_status, write_isvc_status
from modalscale.autoscaler.policy import Decision, Reason, ScalingMode
from modalscale.operator.isvc.objects import (
    GATEWAY_LABEL,
    GRPC_PORT,
    IMAGE_ENCODER_ADDRESS_ANNOTATION,
    IMAGE_ENCODER_LABEL,
    METRICS_PORT,
    REPLICAS_ANNOTATION,
    SELECTOR_LABEL,
    STAGE_FRONT,
    STAGE_IMAGE_ENCODER,
    STAGE_LABEL,
    image_encoder_address,
)
from modalscale.operator.isvc.plan import (
    IsvcObserved,
    PlanConfig,
    StageLayout,
    front_budget_cap,
    plan_isvc,
    stage_layout,
)
from modalscale.operator.isvc.reconcile import image_encoder_files, repository_files
from modalscale.runtime.repo_config import IMAGE_ENCODER_MODEL, Stage
from tests.factories import inference_service

NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)
ONE_PIECE_FILES = {"multimodal/config.pbtxt": 'name: "multimodal"\n'}
FRONT_FILES = {"multimodal/config.pbtxt": 'name: "multimodal"\nparameters: {key: "stage"}\n'}
"""Stand-ins for the one-piece and the front repository (``reconcile.repository_files`` renders the one
:func:`stage_layout` says)."""
ENCODER_FILES = {"image_encoder/config.pbtxt": 'name: "image_encoder"\n'}
CONFIG = PlanConfig(gateway_image="op:1", node_loss_toleration_s=30)
STAGES = {"imageEncoder": {"minReplicas": 2, "maxReplicas": 5,
                           "resources": {"cpu": "3", "memory": "4Gi", "gpu": {"count": 1, "type": "nvidia-l4"}},
                           "runtime": {"instanceCount": 4, "maxBatchSize": 32}}}


def body(stages: dict[str, Any] | None = STAGES, **spec: Any) -> dict[str, Any]:
    extra = {} if stages is None else {"stages": stages}
    return inference_service("vc", "ml", uid="u-1", generation=1, gateway={"enabled": False},
                             **{"scaling": {"mode": "Fixed", "replicas": 3, "minReplicas": 1, "maxReplicas": 6},
                                **extra, **spec})


def stored(created: dict[str, Any], ready: bool = True) -> dict[str, Any]:
    obj = copy.deepcopy(created)
    obj["metadata"].update(generation=1, resourceVersion="1")
    if obj["kind"] == "Deployment":
        n = obj["spec"]["replicas"]
        r = n if ready else 0
        obj["status"] = {"observedGeneration": 1, "replicas": n, "readyReplicas": r, "updatedReplicas": n}
    if obj["kind"] == "Service":
        obj["spec"]["clusterIP"] = "10.0.0.40" if obj["metadata"]["name"].endswith("-image-encoder") else "10.0.0.12"
    return obj


def merged(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A strategic merge patch as far as these tests need it: maps merged key by key, ``None`` deletes a key,
    ``$patch: replace`` replaces a map, anything else replaces."""
    out = copy.deepcopy(obj)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and value.get("$patch") == "replace":
            out[key] = {k: v for k, v in value.items() if k != "$patch"}
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def applied(obs: IsvcObserved, plan: Any, encoder_ready: bool = True) -> IsvcObserved:
    """``obs`` after the plan's writes."""
    obs = copy.deepcopy(obs)
    written = write_isvc_status(plan.status)  # as the next pass reads it back (a deleted block is absent)
    obs.status = read_isvc_status({"status": {k: v for k, v in written.items() if v is not None}})
    for w in plan.writes:
        encoder = w.name.endswith(("-image-encoder", "-image-encoder-model-repo"))  # any service name
        slot = w.kind if encoder else w.kind.lower()
        if w.action == "delete":
            obs.image_encoder[slot] = None
            continue
        have = obs.image_encoder.get(slot) if encoder else getattr(obs, slot)
        new = stored(w.body, ready=encoder_ready or not encoder) if w.action == "create" else merged(have, w.body)
        if encoder:
            obs.image_encoder[slot] = new
        else:
            setattr(obs, slot, new)
    return obs


def run(b: dict[str, Any], obs: IsvcObserved | None = None, *, scale: bool = False,
        encoder_ready: bool = True) -> tuple[Any, IsvcObserved]:
    """One pass as ``reconcile`` makes it (the front's repository rendered for the layout), or a scale pass."""
    obs = obs or IsvcObserved()
    spec = parse_isvc(b)
    files = None if scale else FRONT_FILES if stage_layout(spec, obs).front_address else ONE_PIECE_FILES
    plan = plan_isvc(spec, obs, files, CONFIG, NOW, encoder_files=ENCODER_FILES)
    return plan, applied(obs, plan, encoder_ready)


def made(plan: Any) -> list[tuple[str, str, str]]:
    return [(w.kind, w.action, w.name) for w in plan.writes]


def write(plan: Any, kind: str, name: str) -> dict[str, Any]:
    return next(w.body for w in plan.writes if (w.kind, w.name) == (kind, name))


def conditions(plan: Any) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in write_isvc_status(plan.status)["conditions"]}


def settled(b: dict[str, Any] | None = None) -> IsvcObserved:
    """A staged service after its passes settled (encoder pool ready, front staged)."""
    b = b or body()
    _, obs = run(b)
    _, obs = run(b, obs)
    return obs


# ---------------------------------------------------------------------------------------------- objects
def test_a_new_staged_service_creates_the_encoder_pool_first_and_holds_the_front_for_its_address() -> None:
    plan, obs = run(body())
    assert made(plan) == [("PodDisruptionBudget", "create", "vc"), ("Service", "create", "vc"),
                          ("ConfigMap", "create", "vc-image-encoder-model-repo"),
                          ("Deployment", "create", "vc-image-encoder"), ("Service", "create", "vc-image-encoder"),
                          ("PodDisruptionBudget", "create", "vc-image-encoder"),
                          ("NetworkPolicy", "create", "vc-image-encoder")]
    for w in plan.writes:
        (ref,) = w.body["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("InferenceService", "vc", "u-1", True)
    stages = write_isvc_status(plan.status)["stages"]
    assert stages[0]["name"] == "front" and "waiting for the encoder Service's ClusterIP" in stages[0]["message"]
    assert conditions(plan)["Ready"]["reason"] == "Creating"

    plan, obs = run(body(), obs)  # the Service has its ClusterIP now: the front is created, staged
    assert made(plan) == [("ConfigMap", "create", "vc-model-repo"), ("Deployment", "create", "vc")]
    template = write(plan, "Deployment", "vc")["spec"]["template"]
    assert template["metadata"]["labels"][STAGE_LABEL] == STAGE_FRONT
    assert template["metadata"]["annotations"][IMAGE_ENCODER_ADDRESS_ANNOTATION] == "10.0.0.40:8001"

    plan, obs = run(body(), obs)
    assert plan.writes == []  # a rerun with nothing changed writes nothing
    plan, obs = run(body(), obs)
    assert plan.writes == [] and write_isvc_status(plan.status, obs.status) == {}  # nor any status


def test_the_encoder_pool_has_its_own_labels_selector_resources_knobs_repository_and_probe() -> None:
    plan, _ = run(body())
    dep = write(plan, "Deployment", "vc-image-encoder")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert SELECTOR_LABEL not in pod_labels  # never a front replica: the front's Services and PDB select on it
    assert (pod_labels[IMAGE_ENCODER_LABEL], pod_labels[STAGE_LABEL]) == ("vc", STAGE_IMAGE_ENCODER)
    assert dep["metadata"]["labels"][STAGE_LABEL] == STAGE_IMAGE_ENCODER
    assert dep["spec"]["selector"] == {"matchLabels": {IMAGE_ENCODER_LABEL: "vc"}}
    assert dep["spec"]["replicas"] == 2  # minReplicas: not autoscaled yet
    assert "annotations" not in dep["metadata"]  # no replicas record: drift of its replicas is repaired
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["requests"] == {"cpu": "3", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert c["readinessProbe"]["exec"]["command"][-1] == f"--model={IMAGE_ENCODER_MODEL}"
    assert {"name": "OMP_NUM_THREADS", "value": "1"} in c["env"]
    (vol,) = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "model-repository"]
    assert vol["configMap"]["name"] == "vc-image-encoder-model-repo"
    assert write(plan, "ConfigMap", "vc-image-encoder-model-repo")["data"] == {
        "image_encoder__config.pbtxt": 'name: "image_encoder"\n'}
    svc = write(plan, "Service", "vc-image-encoder")
    assert svc["spec"]["selector"] == {IMAGE_ENCODER_LABEL: "vc"}
    assert [p["port"] for p in svc["spec"]["ports"]] == [8000, 8001, 8002]
    pdb = write(plan, "PodDisruptionBudget", "vc-image-encoder")
    assert pdb["spec"]["selector"] == {"matchLabels": {IMAGE_ENCODER_LABEL: "vc"}}
    assert pdb["spec"]["maxUnavailable"] == 1


def test_the_encoder_pool_takes_the_one_piece_resources_and_knobs_it_leaves_out() -> None:
    spec = parse_isvc(body({"imageEncoder": {}}, runtime={"instanceCount": 2, "maxBatchSize": 16,
                                                          "dynamicBatching": {"preferredBatchSizes": [4, 8]}}))
    assert spec.stages is not None
    enc = spec.stages.image_encoder
    assert (enc.min_replicas, enc.max_replicas) == (1, 10)
    assert enc.resources == spec.resources
    assert (enc.runtime.instance_count, enc.runtime.max_batch_size) == (2, 16)
    assert enc.runtime.dynamic_batching.preferred_batch_sizes == ()  # the front's request counts do not apply
    own = parse_isvc(body({"imageEncoder": {"resources": {"cpu": "500m"}}})).stages
    assert own is not None and (own.image_encoder.resources.cpu, own.image_encoder.resources.memory,
                                own.image_encoder.resources.gpu_count) == ("500m", "8Gi", 0)


def test_the_stage_names_are_the_runtimes() -> None:
    assert (STAGE_FRONT, STAGE_IMAGE_ENCODER) == (Stage.FRONT.value, Stage.IMAGE_ENCODER.value)


@pytest.mark.parametrize("ip, address", [(None, None), ("None", None), ("", None), ("10.0.0.40", "10.0.0.40:8001"),
                                         ("fd00::7", "[fd00::7]:8001")], ids=["none", "headless", "empty", "v4", "v6"])
def test_the_encoder_address_is_the_services_cluster_ip_and_grpc_port(ip: str | None, address: str | None) -> None:
    svc = None if ip is None else {"spec": {"clusterIP": ip}}
    assert image_encoder_address(svc) == address


# ---------------------------------------------------------------------------------------------- switching
def test_a_running_one_piece_front_switches_only_once_an_encoder_replica_is_ready() -> None:
    _, obs = run(body(None))
    _, obs = run(body(None), obs)
    plan, obs = run(body(), obs, encoder_ready=False)  # stages turned on: the pool is made, the front untouched
    assert {w.name for w in plan.writes} == {"vc-image-encoder", "vc-image-encoder-model-repo"}
    assert stage_layout(parse_isvc(body()), obs).front_address is None  # its pool has no ready replica
    plan, obs = run(body(), obs, encoder_ready=False)
    assert plan.writes == []
    assert "serving as one piece" in write_isvc_status(plan.status)["stages"][0]["message"]
    assert conditions(plan)["ImageEncoderReady"]["reason"] == "ImageEncoderUnavailable"
    assert conditions(plan)["Ready"]["status"] == "True"  # one piece: it still serves images itself

    assert obs.image_encoder["Deployment"] is not None
    obs.image_encoder["Deployment"]["status"]["readyReplicas"] = 1
    plan, obs = run(body(), obs)
    assert made(plan) == [("ConfigMap", "patch", "vc-model-repo"), ("Deployment", "patch", "vc")]
    meta = write(plan, "Deployment", "vc")["spec"]["template"]["metadata"]
    assert meta["labels"][STAGE_LABEL] == STAGE_FRONT  # a template change: the pods roll
    assert meta["annotations"][IMAGE_ENCODER_ADDRESS_ANNOTATION] == "10.0.0.40:8001"
    assert conditions(plan)["ImageEncoderReady"]["status"] == "True"


def test_removing_stages_rolls_the_front_back_first_and_deletes_the_pool_once_no_front_pod_calls_it() -> None:
    obs = settled()
    obs.pods = [{"metadata": {"name": "vc-1", "labels": {SELECTOR_LABEL: "vc", STAGE_LABEL: STAGE_FRONT}}}]
    plan, obs = run(body(None), obs)
    assert made(plan) == [("ConfigMap", "patch", "vc-model-repo"), ("Deployment", "patch", "vc")]
    meta = write(plan, "Deployment", "vc")["spec"]["template"]["metadata"]
    assert meta["labels"][STAGE_LABEL] is None and meta["annotations"][IMAGE_ENCODER_ADDRESS_ANNOTATION] is None
    assert write_isvc_status(plan.status)["stages"] is None  # DELETE: the block goes
    assert "ImageEncoderReady" not in conditions(plan)

    plan, obs = run(body(None), obs)  # the template is one piece again, but a staged pod still drains
    assert plan.writes == []
    obs.pods = [{"metadata": {"name": "vc-2", "labels": {SELECTOR_LABEL: "vc"}}}]
    plan, obs = run(body(None), obs)
    assert made(plan) == [("NetworkPolicy", "delete", "vc-image-encoder"),
                          ("PodDisruptionBudget", "delete", "vc-image-encoder"),
                          ("Service", "delete", "vc-image-encoder"), ("Deployment", "delete", "vc-image-encoder"),
                          ("ConfigMap", "delete", "vc-image-encoder-model-repo")]
    plan, obs = run(body(None), obs)
    assert plan.writes == [] and plan.status.stages is None


@pytest.mark.parametrize("stored_as", ["no-owner", "another-owner", "unmanaged"])
@pytest.mark.parametrize("kind", ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"])
def test_removing_stages_deletes_only_the_pool_objects_this_service_made(kind: str, stored_as: str) -> None:
    """Found by the isvc review (7 Dec 2026): without ``spec.stages`` every object of the pool's names was deleted
    unchecked, so a user's own ``vc-image-encoder`` Service (read by name with no watch cache), or the Deployment of
    another InferenceService named ``vc-image-encoder``, went with the pool. One that is not this service's child
    (its controller owner reference by uid and the managed-by label) stays, and a Warning Event names it once for the
    spec change (``ChildNotDeleted``; ``ForeignObject``, the ``ChildConflict`` condition's, for another
    InferenceService's: no child of this one at all); a rerun writes nothing."""
    obs = settled()
    obj = copy.deepcopy(obs.image_encoder[kind])
    assert obj is not None
    meta = obj["metadata"]
    if stored_as == "no-owner":
        meta.pop("ownerReferences", None)
    elif stored_as == "another-owner":
        meta["ownerReferences"] = [{**meta["ownerReferences"][0], "uid": "u-2", "name": "vc-image-encoder"}]
    else:
        meta["labels"].pop("app.kubernetes.io/managed-by")
    obs.image_encoder[kind] = obj
    obs.pods = [{"metadata": {"name": "vc-2", "labels": {SELECTOR_LABEL: "vc"}}}]  # no front pod calls the pool
    off = body(None)
    off["metadata"]["generation"] = 2
    plan, obs = run(off, obs)  # the front rolls back to one piece first; the pool's deletes wait for it
    name = "vc-image-encoder-model-repo" if kind == "ConfigMap" else "vc-image-encoder"
    reported = ("ChildNotDeleted", "ForeignObject")
    (event,) = [e for e in plan.events if e[1] in reported]
    assert event[:2] == ("Warning", reported[stored_as == "another-owner"]) and f"{kind} {name}" in event[2]
    plan, obs = run(off, obs)
    deleted = [(k, n) for k, a, n in made(plan) if a == "delete"]
    assert (kind, name) not in deleted and len(deleted) == 4
    assert [e for e in plan.events if e[1] in reported] == []
    plan, obs = run(off, obs)
    assert [w for w in plan.writes if w.name.startswith("vc-image-encoder")] == []
    assert [e for e in plan.events if e[1] in reported] == []


def _admits(rule: dict[str, Any], labels: dict[str, str]) -> bool:
    """True when one of the ingress rule's pod selectors selects a pod with ``labels``."""
    return any(all(labels.get(k) == v for k, v in peer["podSelector"]["matchLabels"].items())
               for peer in rule["from"])


def test_only_the_front_pods_reach_the_encoder_pool_and_only_the_scraper_its_metrics() -> None:
    """The pool decodes whatever image bytes reach it: its NetworkPolicy admits this service's front pods on the gRPC
    port the front calls (the address annotation's port), the scraper on the metrics port, and no one else."""
    obs = settled()
    policy = obs.image_encoder["NetworkPolicy"]
    assert policy is not None
    pool_pods = obs.image_encoder["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert all(pool_pods.get(k) == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items())
    serving, metrics = policy["spec"]["ingress"]
    front_pods = obs.deployment["spec"]["template"]["metadata"]["labels"]
    front_address = obs.deployment["spec"]["template"]["metadata"]["annotations"][IMAGE_ENCODER_ADDRESS_ANNOTATION]
    assert serving["ports"] == [{"protocol": "TCP", "port": GRPC_PORT}] and front_address.endswith(f":{GRPC_PORT}")
    assert _admits(serving, front_pods)
    for outsider in ({GATEWAY_LABEL: "vc"}, pool_pods, {SELECTOR_LABEL: "other"}, {}):
        assert not _admits(serving, outsider), outsider
    assert metrics["ports"] == [{"protocol": "TCP", "port": METRICS_PORT}]
    assert metrics["from"][0]["namespaceSelector"] == {} and _admits(metrics, dict(CONFIG.scraper_labels))
    assert not _admits(metrics, front_pods)


def test_an_edited_encoder_network_policy_is_repaired_alone() -> None:
    obs = settled()
    assert obs.image_encoder["NetworkPolicy"] is not None
    obs.image_encoder["NetworkPolicy"]["spec"]["ingress"] = [{}]  # someone opened the pool to everyone
    plan, obs = run(body(), obs)
    assert made(plan) == [("NetworkPolicy", "patch", "vc-image-encoder")]
    assert len(obs.image_encoder["NetworkPolicy"]["spec"]["ingress"]) == 2
    plan, _ = run(body(), obs)
    assert plan.writes == []


def test_a_new_encoder_address_rolls_the_front_onto_it() -> None:
    obs = settled()
    assert obs.image_encoder["Service"] is not None
    obs.image_encoder["Service"]["spec"]["clusterIP"] = "10.0.0.99"  # deleted and made again by someone
    plan, _ = run(body(), obs)
    meta = write(plan, "Deployment", "vc")["spec"]["template"]["metadata"]
    assert meta["annotations"][IMAGE_ENCODER_ADDRESS_ANNOTATION] == "10.0.0.99:8001"


# ---------------------------------------------------------------------------------------------- replicas and status
def test_status_shows_each_stages_replicas_and_in_fixed_mode_the_pool_is_not_autoscaled() -> None:
    obs = settled()
    plan, _ = run(body(), obs)
    front, encoder = write_isvc_status(plan.status)["stages"]
    assert front == {"name": "front", "replicas": 3, "readyReplicas": 3, "desiredReplicas": 3,
                     "reason": "FixedReplicas"}
    assert (encoder["name"], encoder["replicas"], encoder["readyReplicas"], encoder["desiredReplicas"],
            encoder["reason"], encoder["address"]) == ("image-encoder", 2, 2, 2, "NotAutoscaled", "10.0.0.40:8001")
    assert encoder["message"].startswith("Fixed mode: holds spec.stages.imageEncoder.minReplicas=2")
    assert "autoscaler" not in encoder
    c = conditions(plan)
    assert (c["Ready"]["status"], c["ImageEncoderReady"]["status"]) == ("True", "True")


def test_a_budget_cap_caps_the_encoder_pool_too_and_a_front_at_zero_takes_it_to_zero() -> None:
    obs = settled()
    obs.budget_cap_replicas, obs.budget_cap_policy = 1, "ml/daily"
    plan, obs = run(body(), obs)
    assert write(plan, "Deployment", "vc-image-encoder")["spec"]["replicas"] == 1
    assert write(plan, "Deployment", "vc")["spec"]["replicas"] == 1  # a cap below 2 holds 1 + 1
    encoder = write_isvc_status(plan.status)["stages"][1]
    assert (encoder["desiredReplicas"], encoder["reason"]) == (1, "CappedByBudget")
    assert encoder["message"].endswith("front 1 + image encoder 1 (above the cap: a cap never takes a running "
                                       "stage to 0)")
    obs.budget_cap_replicas = 0  # ScaleToZero
    plan, obs = run(body(), obs)
    assert write(plan, "Deployment", "vc-image-encoder")["spec"]["replicas"] == 0
    assert write_isvc_status(plan.status)["stages"][1]["reason"] == "FrontAtZero"
    assert conditions(plan)["ImageEncoderReady"]["reason"] == "ScaledToZero"


# ---------------------------------------------------------------------------------------------- the cap over both pools
FRONT_DEAR, ENCODER_DEAR = (Decimal("0.80"), Decimal("0.52")), (Decimal("0.31"), Decimal("0.52"))
"""USD per hour of a front replica and of an encoder replica: the front costlier, the encoder pool costlier."""


def capped(cap: int | None, prices: tuple[Decimal | None, Decimal | None], b: dict[str, Any] | None = None,
           obs: IsvcObserved | None = None) -> IsvcObserved:
    """A settled staged service (Fixed: front 3, encoder pool at its minReplicas 2) under a BudgetPolicy cap."""
    obs = copy.deepcopy(obs) if obs is not None else settled(b)
    obs.budget_cap_replicas, obs.budget_cap_policy = cap, "ml/daily"
    obs.replica_usd_per_hour, obs.image_encoder_usd_per_hour = prices
    return obs


def pools(obs: IsvcObserved) -> tuple[int, int]:
    """The replicas of the front's and the encoder pool's Deployments."""
    front, encoder = obs.deployment, obs.image_encoder["Deployment"]
    assert front is not None and encoder is not None
    return front["spec"]["replicas"], encoder["spec"]["replicas"]


@pytest.mark.parametrize(("cap", "prices", "want", "cut", "rule"), [
    # the costlier pool gives up replicas first, never below 1; only then the cheaper one
    (3, FRONT_DEAR, (1, 2), ("front",), "the front pool (0.8 USD/h a replica, the costlier; image encoder pool 0.52) "
                                       "gives up replicas first, down to 1: front 1 + image encoder 2"),
    (2, FRONT_DEAR, (1, 1), ("front", "image-encoder"), "the costlier; image encoder pool 0.52) gives up"),
    (4, ENCODER_DEAR, (3, 1), ("image-encoder",), "the image encoder pool (0.52 USD/h a replica, the costlier; front "
                                                  "pool 0.31) gives up replicas first, down to 1: front 3 + image "
                                                  "encoder 1"),
    (3, ENCODER_DEAR, (2, 1), ("front", "image-encoder"), "front 2 + image encoder 1"),
    # equal prices, or one not known: the pool with more replicas, a tie the encoder pool
    (3, (Decimal("0.5"), Decimal("0.5")), (2, 1), ("front", "image-encoder"),
     "both pools cost 0.5 USD/h a replica, so the one with more replicas gives them up first: front 2 + image "
     "encoder 1"),
    (4, (Decimal("0.5"), None), (2, 2), ("front",),
     "a pool's price is not known (front pool 0.5 USD/h), so the one with more replicas gives them up first"),
    (4, (None, None), (2, 2), ("front",), "a pool's price is not known, so the one with more replicas"),
    # at or above the sum: nothing changes
    (5, FRONT_DEAR, (3, 2), (), "front 3 + image encoder 2"),
    (9, ENCODER_DEAR, (3, 2), (), "front 3 + image encoder 2"),
], ids=["front-dearer", "front-dearer-then-encoder", "encoder-dearer", "encoder-dearer-then-front", "equal-prices",
        "a-price-unknown", "no-prices", "at-the-sum", "above-the-sum"])
def test_a_cap_bounds_both_pools_together_and_the_costlier_pool_gives_up_replicas_first(
        cap: int, prices: tuple[Decimal | None, Decimal | None], want: tuple[int, int], cut: tuple[str, ...],
        rule: str) -> None:
    plan, after = run(body(), capped(cap, prices))
    assert pools(after) == want
    front, encoder = write_isvc_status(plan.status)["stages"]
    assert (front["desiredReplicas"], encoder["desiredReplicas"]) == want == (plan.desired_replicas, want[1])
    reasons = {"front": "FixedReplicas", "image-encoder": "NotAutoscaled"}
    assert {s["name"]: s["reason"] for s in (front, encoder)} == {
        name: "CappedByBudget" if name in cut else reason for name, reason in reasons.items()}
    for stage in (front, encoder):
        if stage["name"] in cut:
            assert stage["message"].startswith(f"capped at {cap} replica(s) over both stages by BudgetPolicy "
                                               f"ml/daily: "), stage
            assert rule in stage["message"]
    budget = conditions(plan)["BudgetLimited"]
    assert (budget["status"], budget["reason"]) == ("True", "CappedByBudget")
    assert budget["message"].startswith(f"BudgetPolicy ml/daily caps replicas at {cap} over both stages: ")
    assert rule in budget["message"]
    # A rerun with the same observed state plans no write, nor any status change.
    again, _ = run(body(), after)
    assert again.writes == [] and write_isvc_status(again.status, after.status) == {}


UNREADABLE = ("annotation budget.modalscale.io/cap-0000000000: value is not JSON",)


@pytest.mark.parametrize(("b", "prices"), [
    (body(scaling={"mode": "Fixed", "replicas": 5, "minReplicas": 1, "maxReplicas": 6}), ENCODER_DEAR),
    (body(stages={**STAGES, "imageEncoder": {**STAGES["imageEncoder"], "minReplicas": 4}}), FRONT_DEAR),
    (body(None, scaling={"mode": "Fixed", "replicas": 5, "minReplicas": 1, "maxReplicas": 6}), FRONT_DEAR),
], ids=["front-asks-more", "pool-asks-more", "stages-removed-front-asks-more"])
def test_an_unreadable_cap_holds_each_pool_at_its_own_count_and_moves_no_replica_between_them(
        b: dict[str, Any], prices: tuple[Decimal | None, Decimal | None]) -> None:
    """While a cap annotation cannot be read, each pool stays at most at its own Deployment's count (front 3,
    encoder pool 2): no pool scales up, and no replica moves from the costlier pool to the other (a hold of their
    sum split by price took the pool 2 -> 1 to grow the front 3 -> 4, review of ab8f84c)."""
    obs = settled()
    obs.budget_cap_unreadable = UNREADABLE
    obs.replica_usd_per_hour, obs.image_encoder_usd_per_hour = prices
    plan, after = run(b, obs)
    if b["spec"].get("stages"):
        assert pools(after) == (3, 2)
        front, encoder = write_isvc_status(plan.status)["stages"]
        assert [s["name"] for s in (front, encoder) if s["reason"] == "BudgetCapUnreadable"] == [
            "image-encoder" if b["spec"]["stages"]["imageEncoder"]["minReplicas"] == 4 else "front"]
    else:
        assert after.deployment is not None and after.deployment["spec"]["replicas"] == 3
    budget = conditions(plan)["BudgetLimited"]
    assert (budget["status"], budget["reason"]) == ("True", "BudgetCapUnreadable")
    assert UNREADABLE[0] in budget["message"]


def test_a_front_at_zero_takes_the_pool_to_zero_under_any_cap() -> None:
    plan, after = run(body(scaling={"mode": "Fixed", "replicas": 0, "minReplicas": 0}), capped(3, ENCODER_DEAR))
    assert pools(after) == (0, 0)
    assert write_isvc_status(plan.status)["stages"][1]["reason"] == "FrontAtZero"
    plan, after = run(body(), capped(0, FRONT_DEAR))  # a ScaleToZero
    assert pools(after) == (0, 0)
    front, encoder = write_isvc_status(plan.status)["stages"]
    assert (front["reason"], encoder["reason"]) == ("CappedByBudget", "FrontAtZero")
    again, _ = run(body(), after)
    assert again.writes == [] and write_isvc_status(again.status, after.status) == {}


def test_without_stages_a_cap_is_the_services_alone_as_before() -> None:
    b = body(None)
    _, obs = run(b)
    obs.budget_cap_replicas, obs.budget_cap_policy = 2, "ml/daily"
    obs.replica_usd_per_hour = Decimal("0.8")
    plan, _ = run(b, obs)
    assert write(plan, "Deployment", "vc")["spec"]["replicas"] == 2
    assert conditions(plan)["BudgetLimited"]["message"] == "BudgetPolicy ml/daily caps replicas at 2"
    assert plan.status.stages is None


def test_the_fronts_autoscaler_decides_under_its_share_and_the_planner_keeps_that_decision() -> None:
    """Utilization mode, the front's replica costlier: the pool's autoscaler decided 4, the cap is 4. The front's
    share is 1 (``front_budget_cap``): the autoscaler's decision under it is what the single planner writes, in the
    scale pass and in every full pass after it, so no decision is undone and nothing churns."""
    b = body(scaling=UTILIZATION)
    obs = capped(4, FRONT_DEAR, obs=with_pool_decision(settled(b), 4))
    assert obs.deployment is not None
    obs.deployment["spec"]["replicas"] = 3  # the front's record before the cap
    obs.deployment["metadata"]["annotations"] = {REPLICAS_ANNOTATION: "3"}
    spec = parse_isvc(b)
    assert front_budget_cap(spec, obs.status, 4, *FRONT_DEAR) == 1
    assert front_budget_cap(spec, obs.status, 4, *ENCODER_DEAR) == 3  # the encoder pool gives up 3 first
    assert front_budget_cap(spec, obs.status, None, *FRONT_DEAR) is None
    assert front_budget_cap(parse_isvc(body(None)), obs.status, 4, *FRONT_DEAR) == 4  # one piece: the cap itself

    decision = Decision(1, True, Reason.CAPPED_BY_BUDGET, "ScaleUpForUtilization: ...; capped by budget at 1", {},
                        ScalerState(), ScalingMode.UTILIZATION)
    plan = plan_isvc(spec, obs, None, CONFIG, NOW, decision=decision)  # the autoscaler's scale pass
    assert [(w.name, w.body["spec"]["replicas"]) for w in plan.writes] == [("vc", 1), ("vc-image-encoder", 3)]
    front, encoder = write_isvc_status(plan.status)["stages"]
    assert (front["desiredReplicas"], front["reason"], encoder["desiredReplicas"], encoder["reason"]) == (
        1, "CappedByBudget", 3, "CappedByBudget")
    assert "the front pool (0.8 USD/h a replica, the costlier" in front["message"]
    # The next full passes read the decision back (the record, and the autoscaler's block, which the reconcile
    # does not write) and write nothing.
    block = AutoscalerRecord(mode="Utilization", valid=True, reason="CappedByBudget", message=decision.message)
    after = applied(obs, plan)
    after.status = dataclasses.replace(after.status, autoscaler=block)
    plan, after = run(b, after)
    assert pools(after) == (1, 3) and plan.writes == []
    assert write_isvc_status(plan.status)["stages"][0]["reason"] == "CappedByBudget"
    after.status = dataclasses.replace(after.status, autoscaler=block)
    again, _ = run(b, after)
    assert again.writes == [] and write_isvc_status(again.status, after.status) == {}


def test_a_scale_pass_writes_the_encoder_pools_replicas_with_the_fronts() -> None:
    obs = settled()
    obs.budget_cap_replicas, obs.budget_cap_policy = 0, "ml/daily"
    plan, _ = run(body(), obs, scale=True)
    assert made(plan) == [("Deployment", "patch", "vc"), ("Deployment", "patch", "vc-image-encoder")]
    assert plan.writes[1].body == {"spec": {"replicas": 0}}


def test_a_front_calling_an_encoder_pool_without_a_ready_replica_is_not_ready() -> None:
    obs = settled()
    assert obs.image_encoder["Deployment"] is not None
    obs.image_encoder["Deployment"]["status"]["readyReplicas"] = 0
    plan, _ = run(body(), obs)
    c = conditions(plan)
    assert (c["Ready"]["status"], c["Ready"]["reason"]) == ("False", "ImageEncoderUnavailable")
    assert ("Warning", "ImageEncoderUnavailable") in {(t, r) for t, r, _ in plan.events}


def test_cost_per_hour_adds_the_encoder_pods_at_their_own_price() -> None:
    from decimal import Decimal

    obs = settled()
    running = {"spec": {"nodeName": "n"}, "status": {"phase": "Running"}, "metadata": {"name": "p"}}
    obs.pods = [running] * 3
    obs.image_encoder_pods = [running] * 2
    obs.replica_usd_per_hour, obs.image_encoder_usd_per_hour = Decimal("1.5"), Decimal("0.25")
    plan, _ = run(body(), obs)
    assert plan.status.cost_usd_per_hour == Decimal("5.0000")


def test_the_planner_is_pure_it_changes_nothing_it_was_given_and_answers_the_same_twice() -> None:
    obs = settled()
    before = copy.deepcopy(obs)
    spec = parse_isvc(body())
    first = plan_isvc(spec, obs, FRONT_FILES, CONFIG, NOW, encoder_files=ENCODER_FILES)
    second = plan_isvc(spec, obs, FRONT_FILES, CONFIG, NOW, encoder_files=ENCODER_FILES)
    assert first.writes == []  # settled
    assert obs == before
    assert (first.writes, first.status, first.events) == (second.writes, second.status, second.events)


def test_stages_delete_is_written_only_when_a_block_is_stored() -> None:
    plan, _ = run(body(None))
    assert plan.status.stages is None
    obs = settled()
    plan, _ = run(body(None), obs)
    assert plan.status.stages is DELETE


# ---------------------------------------------------------------------------------------------- the pool's autoscaler
UTILIZATION = {"mode": "Utilization", "minReplicas": 1, "maxReplicas": 6, "targetUtilizationPercent": 70}


def with_pool_decision(obs: IsvcObserved, desired: int | None, reason: str = "ScaleUpForUtilization") -> IsvcObserved:
    """``obs`` with the pool's autoscaler block stored in ``status.stages[image-encoder]`` (as the daemon writes
    it) and the front's record at 3."""
    obs = copy.deepcopy(obs)
    stages = tuple(dataclasses.replace(s, autoscaler=AutoscalerRecord(
        mode="Utilization", valid=True, reason=reason, message=f"pool decided {desired}", desired_replicas=desired))
        if s.name == STAGE_IMAGE_ENCODER else s for s in obs.status.stages)  # type: ignore[union-attr]
    obs.status = dataclasses.replace(obs.status, stages=stages, desired_replicas=3)
    return obs


def test_an_autoscaled_pool_runs_its_autoscalers_count_and_the_reconcile_keeps_the_decision() -> None:
    b = body(scaling=UTILIZATION)
    obs = settled(b)
    encoder = write_isvc_status(obs.status)["stages"][1]
    assert (encoder["desiredReplicas"], encoder["reason"]) == (2, "MinReplicas")  # before the pool's first decision
    obs = with_pool_decision(obs, 4)
    plan, after = run(b, obs)
    assert write(plan, "Deployment", "vc-image-encoder")["spec"]["replicas"] == 4  # the single planner writes it
    encoder = write_isvc_status(plan.status)["stages"][1]
    assert (encoder["desiredReplicas"], encoder["reason"], encoder["message"]) == (
        4, "ScaleUpForUtilization", "pool decided 4")
    assert encoder["autoscaler"]["desiredReplicas"] == 4  # carried over: the list is written whole
    plan, _ = run(b, after)
    assert plan.writes == [] and after.image_encoder["Deployment"]["spec"]["replicas"] == 4  # type: ignore[index]


def test_a_scale_pass_writes_the_pools_new_count() -> None:
    b = body(scaling=UTILIZATION)
    obs = with_pool_decision(settled(b), 3)
    plan, _ = run(b, obs, scale=True)
    assert ("Deployment", "patch", "vc-image-encoder") in made(plan)
    assert write(plan, "Deployment", "vc-image-encoder") == {"spec": {"replicas": 3}}
    assert write_isvc_status(plan.status)["stages"][1]["autoscaler"]["desiredReplicas"] == 3


@pytest.mark.parametrize(("desired", "cap", "want", "reason"), [
    (9, None, 5, "BoundedByMax"),  # maxReplicas (5) lowered since the decision
    (1, None, 2, "BoundedByMin"),
    (4, 3, 1, "CappedByBudget"),  # the cap counts both pools: front 3 + pool 3 is 6, no prices: 2 + 1
    (4, 0, 0, "FrontAtZero"),  # a ScaleToZero cap takes the front to 0, so the pool goes too
], ids=["max", "min", "budget-cap", "front-at-zero"])
def test_the_pools_count_stays_within_its_bounds_under_the_budget_cap_and_follows_the_front_to_zero(
        desired: int, cap: int | None, want: int, reason: str) -> None:
    b = body(scaling=UTILIZATION)
    obs = with_pool_decision(settled(b), desired)
    obs.budget_cap_replicas, obs.budget_cap_policy = cap, "ml/daily"
    plan, after = run(b, obs)
    encoder = write_isvc_status(plan.status)["stages"][1]
    assert (encoder["desiredReplicas"], encoder["reason"]) == (want, reason)
    assert after.image_encoder["Deployment"]["spec"]["replicas"] == want  # type: ignore[index]


def test_in_fixed_mode_the_pool_runs_min_replicas_and_a_stored_decision_is_dropped() -> None:
    obs = with_pool_decision(settled(body(scaling=UTILIZATION)), 5)
    plan, _ = run(body(), obs)  # switched to Fixed
    encoder = write_isvc_status(plan.status)["stages"][1]
    assert (encoder["desiredReplicas"], encoder["reason"]) == (2, "NotAutoscaled") and "autoscaler" not in encoder


def test_stage_prices_prices_each_pool_and_leaves_an_unpriced_one_unknown() -> None:
    """What a scale pass and the front's autoscaler split the cap by: the catalog's (or OpenCost's) price of a front
    replica and of an encoder replica; None for a pool nothing prices (never 0)."""
    import types

    from modalscale.costmodel.catalog import PricingTier, UnknownPrice, load_catalog
    from modalscale.operator.isvc.reconcile import stage_prices

    catalog = load_catalog()

    def price_replica(res: Any, tier: PricingTier) -> Any:
        if res.cpu_cores == 3 and unpriced:  # the encoder pool's replica (STAGES)
            raise UnknownPrice(res.gpu_type, PricingTier(tier), [])
        return types.SimpleNamespace(usd_per_hour=catalog.price_replica(res, tier))

    deps: Any = types.SimpleNamespace(prices=types.SimpleNamespace(price_replica=price_replica))
    unpriced = False
    front, encoder = stage_prices(deps, parse_isvc(body()))
    assert front is not None and encoder is not None and encoder != front
    unpriced = True
    assert stage_prices(deps, parse_isvc(body())) == (front, None)
    assert stage_prices(deps, parse_isvc(body(None))) == (None, None)  # one piece: nothing priced


REQUEST_LIMITS = ("max_images_per_request", "max_image_pixels", "max_image_side_pixels", "max_text_bytes")
"""The model parameters that bound a request (``runtime.model.settings.ModelSettings``, read from the model config
only: no environment variable sets them)."""


def _limits(files: dict[str, str]) -> dict[str, dict[str, str]]:
    """``{config.pbtxt path: {limit: value}}`` of the models of a generated repository that carry the limits."""
    param = re.compile(r'key: "(\w+)"\n  value: \{ string_value: "([^"]*)" \}')
    out = {}
    for path, text in files.items():
        if path.endswith("config.pbtxt"):
            values = {k: v for k, v in param.findall(text) if k in REQUEST_LIMITS}
            if values:
                out[path] = values
    return out


@pytest.mark.parametrize("stages, runtime, resources", [
    (STAGES, {}, {}),
    ({"imageEncoder": {"runtime": {"instanceCount": 3, "intraOpThreads": 4, "maxBatchSize": 64,
                                   "maxQueueDelayMicroseconds": 100}, "resources": {"cpu": "6", "memory": "12Gi"}}},
     {"maxBatchSize": 16, "engine": "openvino", "precision": "INT8"}, {"cpu": "2", "memory": "4Gi"}),
], ids=["gpu-pool", "openvino-int8-own-knobs"])
def test_the_front_and_the_encoder_pool_are_generated_with_the_same_request_limits(
        stages: dict[str, Any], runtime: dict[str, Any], resources: dict[str, Any]) -> None:
    """A front checks a request's limits (``inputs.check_request``: ``TooManyImages``, text length) before it sends
    the images on, and each pool instance checks them again with its own settings (``parse_request``) and the
    per-image ones (pixels, side): were the pool's tighter, a request the front accepted would be refused (400) after
    the front's work; looser, the spec's limit would not hold. They cannot differ in what the operator generates:
    the limits are not InferenceService fields (``RuntimeConfig.from_typed`` leaves its defaults) and
    ``spec.stages.imageEncoder.runtime`` overrides only instanceCount, intraOpThreads, maxBatchSize and
    maxQueueDelayMicroseconds. This pins it, with every pool knob and its resources set apart from the front's."""
    spec = parse_isvc(body(stages, runtime=runtime, **({"resources": resources} if resources else {})))
    front = _limits(repository_files(spec, StageLayout(front_address="10.0.0.40:8001")))
    pool_files = image_encoder_files(spec)
    assert pool_files is not None
    pool = _limits(pool_files)
    assert front and list(pool) == [f"{IMAGE_ENCODER_MODEL}/config.pbtxt"], (front, pool)
    assert all(set(values) == set(REQUEST_LIMITS) for values in [*front.values(), *pool.values()])
    (pool_limits,) = pool.values()
    assert {path: pool_limits for path in front} == front
