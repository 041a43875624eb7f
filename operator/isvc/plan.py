"""The pure planner of an InferenceService: observed world in, writes + status + Events out.

``plan_isvc(spec, observed, repo_files, config, now, decision=None)`` never reads the cluster or the clock. It
decides:
- which children to create or patch (only when the fields the operator owns differ: drift is repaired,
  what others added is left alone, and a second run with nothing changed plans zero writes), and the generated
  model repository ``<name>-model-repo`` to delete once the source is no longer BuiltIn; a scale pass
  (``repo_files`` None, the autoscaler's ``decision`` given) plans the Deployment's replicas only;
- the replicas to write, by the single scaling decision of the mode (Fixed: ``spec.scaling.replicas``;
  Predictive/Utilization: the autoscaler's ``decision`` when it hands one over, else its record
  ``status.desiredReplicas`` within the spec's bounds now, else ``minReplicas``), and whether someone else scaled
  the Deployment (``ScalingConflict``);
- ``status`` (observations only) with whole conditions, and Events for condition transitions;
- with ``spec.gateway.enabled``, the gateway's objects (``objects.gateway_children``: ServiceAccount, Role,
  RoleBinding, the Service ``<name>-replicas``, NetworkPolicy, PodDisruptionBudget, Deployment ``<name>-gateway``),
  and the Service ``<name>`` switched to the gateway pods (and the NetworkPolicy written) only once a gateway pod
  is ready, so clients never meet a Service without endpoints, nor a policy that refuses them while the Service
  still selects the replicas; ``status.gateway`` and ``GatewayReady``. Disabled, the plan is what it was before the
  gateway existed, plus deleting gateway objects left from an earlier enabled spec (the Service switches back first).
- with ``spec.stages`` (:func:`stage_layout`, :func:`image_encoder_replicas`), the image encoder pool's ConfigMap,
  Deployment, Service and PodDisruptionBudget ``<name>-image-encoder`` and the front pool calling it at its Service's
  ClusterIP; a new service's front waits for that address, a running one-piece front switches only once an
  encoder replica is ready, and a front switched back to one piece rolls out (no pod left calling the pool) before
  the pool is deleted; ``status.stages`` and ``ImageEncoderReady``. The pool's replicas: its own autoscaler's record
  in a Predictive or Utilization mode (``minReplicas`` in Fixed mode), within its bounds, 0 while the front is at 0.
  A BudgetPolicy cap bounds both pools together, the pool whose replica costs more giving up replicas first
  (:func:`staged_replicas`). Without it, every object as before stages.
- whose objects the children's names hold (:func:`child_ownership`): an object that is not this service's (a user's,
  another InferenceService's) is never created over, patched or deleted; the group of children it belongs to is held
  (:func:`child_conflicts`), and ``ChildConflict`` (``Ready`` where it holds the replicas or their Service) says which
  object, whose, and the fix.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from modalscale import __version__
from modalscale.api import conditions as R
from modalscale.api.annotations import (
    BUDGET_REJECT_PREFIX,
    BUDGET_SPOT_PREFIX,
    SpotSwitch,
    budget_cap,
    unreadable_budget_annotations,
    unreadable_budget_caps,
)
from modalscale.api.capacity import SPOT_NODE_SELECTOR, SPOT_TIER, SPOT_TOLERATION, pod_requires_spot
from modalscale.api.inferenceservice import GPU_RESOURCE, IsvcSpec, PlacementSpec
from modalscale.api.isvc_status import (
    DELETE,
    AutoscalerRecord,
    GatewayRecord,
    IsvcStatus,
    ScalingChange,
    StageRecord,
    parse_time,
)
from modalscale.api.quantities import parse_cpu_cores, same_quantity
from modalscale.api.status import ConditionStatus
from modalscale.autoscaler.policy import Decision, Reason, bound_replicas, split_staged_cap, staged_cap_rule
from modalscale.operator import conditions as cond
from modalscale.operator.isvc.objects import (
    IMAGE_ENCODER_ADDRESS_ANNOTATION,
    INSTANCE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MODEL_VOLUME,
    NODE_LOSS_TOLERATION_S,
    REPLICAS_ANNOTATION,
    STAGE_FRONT,
    STAGE_IMAGE_ENCODER,
    STAGE_LABEL,
    build_configmap,
    build_deployment,
    build_gateway_service,
    build_image_encoder_configmap,
    build_image_encoder_deployment,
    build_image_encoder_network_policy,
    build_image_encoder_pdb,
    build_image_encoder_service,
    build_pdb,
    build_service,
    configmap_name,
    front_pool,
    gateway_children,
    gateway_name,
    image_encoder_address,
    image_encoder_configmap_name,
    image_encoder_name,
    replicas_service_name,
    selector,
    service_url,
)

HISTORY_LIMIT = 20
"""Entries kept in ``status.scalingHistory``."""
IMAGE_WAIT_REASONS = {"ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "InvalidImageName",
                      "ImageInspectError", "ErrRegistryUnavailable", "SignatureValidationFailed"}
"""Kubelet waiting reasons of a container whose image cannot be had (pkg/kubelet/images/types.go):
``ErrImageNeverPull`` is what a real node gives a pod whose image was not imported (``imagePullPolicy: Never``/
``IfNotPresent`` with nothing to pull from)."""
FAILING_WAIT_REASONS = IMAGE_WAIT_REASONS | {"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError",
                                             "RunContainerError", "PreStartHookError", "PostStartHookError"}
"""Waiting reasons that stop a replica until something changes (``ContainerCreating`` and ``PodInitializing``
are progress, not problems)."""


DEFAULT_SCRAPER_LABELS: dict[str, str] = {"app.kubernetes.io/name": "prometheus"}
"""The label the Prometheus Operator puts on its Prometheus pods (``MODALSCALE_METRICS_SCRAPER_LABELS``)."""


@dataclass(frozen=True)
class PlanConfig:
    """Operator-wide knobs the planner needs."""

    conflict_hold_s: float = 60.0
    """How long ScalingConflict stays True after the last external change, in seconds."""
    gateway_image: str = f"modalscale/operator:{__version__}"
    """Image of the gateway pods: the operator's own (``MODALSCALE_GATEWAY_IMAGE``, set by the chart)."""
    gateway_image_pull_secrets: tuple[str, ...] = ()
    """Secrets the gateway pods pull their image with (``MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS``, set by the chart)."""
    scraper_labels: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_SCRAPER_LABELS))
    """Pod labels of the metrics scraper the NetworkPolicy admits to the replicas' metrics port."""
    node_loss_toleration_s: int | None = NODE_LOSS_TOLERATION_S
    """Seconds the replicas' and gateway pods stay bound to a node tainted unreachable or not-ready
    (``MODALSCALE_NODE_LOSS_TOLERATION_SECONDS``; :func:`modalscale.operator.isvc.objects.node_loss_tolerations`);
    None: none written (the cluster's defaults, 300 s)."""


GATEWAY_KINDS = ("ServiceAccount", "Role", "RoleBinding", "Service", "NetworkPolicy", "PodDisruptionBudget",
                 "Deployment")
"""Kinds of ``objects.gateway_children``, in creation order (one object each; deleted in reverse)."""
_GATEWAY_SPEC_KEYS = {"ServiceAccount": ("automountServiceAccountToken",), "Role": ("rules",),
                      "RoleBinding": ("roleRef", "subjects"), "Service": ("spec",), "NetworkPolicy": ("spec",),
                      "PodDisruptionBudget": ("spec",), "Deployment": ("spec",)}
IMAGE_ENCODER_KINDS = ("ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy")
"""Kinds of the image encoder pool's objects (``spec.stages``), in creation order (deleted in reverse)."""


@dataclass
class IsvcObserved:
    """What the operator read for one InferenceService (dicts as the API returns them, camelCase)."""

    status: IsvcStatus = field(default_factory=IsvcStatus)
    """The InferenceService's status as read (``read_isvc_status``)."""
    deployment: dict[str, Any] | None = None
    service: dict[str, Any] | None = None
    configmap: dict[str, Any] | None = None
    poddisruptionbudget: dict[str, Any] | None = None
    """The replicas' PodDisruptionBudget ``<name>`` (None: not found); named after its kind like the others."""
    pods: list[dict[str, Any]] = field(default_factory=list)
    user_configmap_keys: list[str] | None = None
    """Keys of the user's model ConfigMap; None when it does not exist (or the source is not ConfigMap)."""
    pvc_exists: bool | None = None
    foreign_autoscalers: list[str] = field(default_factory=list)
    """HorizontalPodAutoscalers whose scaleTargetRef is this InferenceService's Deployment."""
    budget_cap_replicas: int | None = None
    """Effective max replicas imposed by a BudgetPolicy (None: no cap); see :func:`budget_cap`."""
    budget_cap_policy: str | None = None
    """``ns/name[, ...]`` of the BudgetPolicies behind ``budget_cap_replicas`` (None: no cap)."""
    budget_cap_unreadable: tuple[str, ...] = ()
    """Messages of cap annotations that do not decode; while any does, each pool holds its Deployment's count at
    most (:func:`hold_unreadable_cap`)."""
    budget_annotations_unreadable: tuple[str, ...] = ()
    """Messages of Spot and tenant-rejection annotations that do not decode: the pods' placement holds as the
    Deployment has it (:func:`hold_spot_placement`) and the gateway keeps the tenants it last read under that key;
    ``BudgetLimited`` names them."""
    spot_policy: str | None = None
    """``ns/name`` of the BudgetPolicies whose SwitchToSpot holds the service on Spot capacity (None: on-demand)."""
    replica_usd_per_hour: Decimal | None = None
    """Price of one replica in USD per hour (None: not priced; ``costUSDPerHour`` is then left out)."""
    gateway_usd_per_pod_hour: Decimal | None = None
    """Price of one gateway pod in USD per hour (its CPU and memory requests at the catalog's on-demand prices);
    None: the gateway pods are left out of ``costUSDPerHour``."""
    gateway_objects: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    """The gateway's objects by kind (:data:`GATEWAY_KINDS`; the Service is ``<name>-replicas``) as read; None =
    not found. With the gateway disabled the Deployment and the ServiceAccount are read, and the others only when one
    of them is there (left-overs to delete)."""
    image_encoder: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    """The image encoder pool's objects by kind (:data:`IMAGE_ENCODER_KINDS`) as read; None = not found. Without
    ``spec.stages`` the ConfigMap and the Deployment are read, and the others only when one of them is there
    (left-overs to delete)."""
    image_encoder_pods: list[dict[str, Any]] = field(default_factory=list)
    """The encoder pool's pods (label ``modalscale.io/image-encoder=<name>``), with ``spec.stages``."""
    gateway_pods: list[dict[str, Any]] = field(default_factory=list)
    """The gateway's pods (label ``modalscale.io/gateway=<name>``), with ``spec.gateway.enabled``: why they are not
    ready goes into ``GatewayReady`` and ``Degraded``."""
    image_encoder_usd_per_hour: Decimal | None = None
    """Price of one encoder replica in USD per hour (its own resources); None: left out of ``costUSDPerHour``."""


def observe_budget_cap(obs: IsvcObserved, annotations: dict[str, str] | None) -> None:
    """Set ``obs``'s budget cap from the InferenceService's annotations (pure).

    ``budget_cap_replicas`` / ``budget_cap_policy``: the tightest decodable cap
    (:func:`modalscale.api.annotations.budget_cap`); ``budget_cap_unreadable``: the cap annotations that do not
    decode, which :func:`decide_replicas` answers by holding each pool at its Deployment's count
    (:func:`hold_unreadable_cap`); ``budget_annotations_unreadable``: the Spot and tenant-rejection annotations that
    do not decode (:func:`hold_spot_placement`).
    """
    obs.budget_cap_replicas, obs.budget_cap_policy = budget_cap(annotations)
    obs.budget_cap_unreadable = unreadable_budget_caps(annotations)
    obs.budget_annotations_unreadable = unreadable_budget_annotations(
        annotations, BUDGET_SPOT_PREFIX, BUDGET_REJECT_PREFIX)


def _spec_replicas(deployment: dict[str, Any] | None) -> int:
    return int(((deployment or {}).get("spec") or {}).get("replicas") or 0)


def hold_unreadable_cap(obs: IsvcObserved, front: tuple[int, str, str], pool: tuple[int, str, str] | None
                        ) -> tuple[tuple[int, str, str], tuple[int, str, str] | None]:
    """While a cap annotation does not decode (``obs.budget_cap_unreadable``), no pool goes above the replicas its
    Deployment holds now (a missing one holds 0): a cap that cannot be read may be lower, and no replica moves from
    one pool to the other on it. Counts at or below are kept (a spec's or a readable cap's scale-down still goes).
    ``front`` and ``pool`` are ``(replicas, reason, message)``; a held one gets reason ``BudgetCapUnreadable``."""
    if not obs.budget_cap_unreadable:
        return front, pool
    why = "a budget cap annotation cannot be read (BudgetLimited)"
    current = _spec_replicas(obs.deployment)
    if front[0] > current:
        front = (current, R.BUDGET_CAP_UNREADABLE, f"held at its current {current} replica(s), not {front[0]}: {why}")
    if pool is not None:
        current = _spec_replicas(obs.image_encoder.get("Deployment"))
        if pool[0] > current:
            pool = (current, R.BUDGET_CAP_UNREADABLE,
                    f"held at its current {current} replica(s), not {pool[0]}: {why}")
    return front, pool


@dataclass(frozen=True)
class Write:
    """One API write: create ``body``, patch it (a JSON merge patch for ConfigMaps, a strategic merge patch for
    the other kinds: ``apply.Writer``) or delete it."""

    kind: str
    action: str
    name: str
    body: dict[str, Any]


@dataclass
class IsvcPlan:
    writes: list[Write]
    status: IsvcStatus
    """The reconcile's part of the status (every field it owns; ``write_isvc_status`` makes the patch)."""
    events: list[tuple[str, str, str]]
    """(type Normal|Warning, reason, message) to post."""
    desired_replicas: int | None


class ModelReferenceError(Exception):
    """The model source names an object that does not exist; ``field`` is the spec path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def with_spot_placement(spec: IsvcSpec, switches: tuple[SpotSwitch, ...]) -> IsvcSpec:
    """``spec`` as its pods run while a ``SwitchToSpot`` holds it (``switches`` from the Spot annotations).

    With a switch: pricing tier ``Spot``, the Spot node selector and toleration
    (:mod:`modalscale.api.capacity`) added to ``spec.placement``. Without one: ``spec`` unchanged.
    """
    return _spot_placed(spec) if switches else spec


def _spot_placed(spec: IsvcSpec) -> IsvcSpec:
    tolerations = spec.placement.tolerations
    if SPOT_TOLERATION not in tolerations:
        tolerations = (*tolerations, dict(SPOT_TOLERATION))
    placement = PlacementSpec({**spec.placement.node_selector, **SPOT_NODE_SELECTOR}, tolerations)
    return replace(spec, placement=placement, pricing_tier=SPOT_TIER)


def hold_spot_placement(spec: IsvcSpec, obs: IsvcObserved, annotations: dict[str, str] | None) -> IsvcSpec:
    """``spec`` (already placed by :func:`with_spot_placement`) on Spot capacity also while a Spot annotation that
    does not decode is on the service, no decodable one is, and the pods run where a ``SwitchToSpot`` put them: the
    front Deployment's pod template (the image encoder pool's, while the front has none) has the Spot node selector
    and toleration the operator adds (pure).

    A value that cannot be read is no reason to move pods: dropping the Spot placement would roll every replica
    onto on-demand nodes (and adding it, onto Spot), so the placement the Deployment has holds until the
    BudgetPolicy that owns the annotation rewrites it (its next evaluation) or someone deletes it. A service with no
    Deployment yet starts on-demand; a spec that asks for the Spot node selector itself is left as it is.
    ``BudgetLimited`` names the annotation (``obs.budget_annotations_unreadable``).
    """
    if (spec.pricing_tier == SPOT_TIER or pod_requires_spot({"spec": {"nodeSelector": spec.placement.node_selector}})
            or not unreadable_budget_annotations(annotations, BUDGET_SPOT_PREFIX)):
        return spec
    return _spot_placed(spec) if _on_spot(_placed_deployment(obs)) else spec


def _placed_deployment(obs: IsvcObserved) -> dict[str, Any] | None:
    """The Deployment whose pods' placement a hold keeps: the front's, else the image encoder pool's."""
    return obs.deployment if obs.deployment is not None else obs.image_encoder.get("Deployment")


def _on_spot(deployment: dict[str, Any] | None) -> bool:
    """True when ``deployment``'s pod template has the Spot node selector and toleration :func:`with_spot_placement`
    adds."""
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    return pod_requires_spot(template) and SPOT_TOLERATION in ((template.get("spec") or {}).get("tolerations") or [])


def _spot_removal(desired: dict[str, Any], observed: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pod-template patch that takes the Spot node selector and toleration off a Deployment that has them
    while ``desired`` has not (a strategic merge keeps map keys a patch does not name: the key must be nulled;
    tolerations are replaced whole). None when nothing is to remove."""
    if observed is None:
        return None
    want = desired["spec"]["template"]["spec"]
    have = ((observed.get("spec") or {}).get("template") or {}).get("spec") or {}
    stale_selector = [k for k in SPOT_NODE_SELECTOR if k in (have.get("nodeSelector") or {})
                      and k not in (want.get("nodeSelector") or {})]
    stale_toleration = (SPOT_TOLERATION in (have.get("tolerations") or [])
                        and SPOT_TOLERATION not in (want.get("tolerations") or []))
    if not stale_selector and not stale_toleration:
        return None
    pod: dict[str, Any] = {}
    if stale_selector:
        pod["nodeSelector"] = {**(want.get("nodeSelector") or {}), **{k: None for k in stale_selector}}
    if stale_toleration:
        pod["tolerations"] = list(want.get("tolerations") or [])
    return {"spec": {"template": {"spec": pod}}}


LAYOUT_RESOURCES = {"requests": (GPU_RESOURCE,), "limits": (GPU_RESOURCE, "cpu")}
"""Resource keys the operator writes in one layout only: a GPU replica's ``nvidia.com/gpu`` request and limit, a CPU
replica's CPU limit (:func:`modalscale.operator.isvc.objects.build_deployment`)."""
PROBES = ("readinessProbe", "livenessProbe", "startupProbe")
PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
"""A probe's handler fields, of which the API server admits exactly one (``may not specify more than 1 handler
type``): the BuiltIn runtime's probes run ``exec``, another source's ``httpGet``."""


POD_ACCOUNT_KEYS = ("serviceAccountName", "serviceAccount")
"""A pod spec's account: ``serviceAccount`` is the deprecated twin the API server mirrors ``serviceAccountName`` into
and reads back when ``serviceAccountName`` is empty (``Convert_v1_PodSpec_To_core_PodSpec``), so removing the account
nulls both (nulling one left the pods on the old account)."""


def _pod_keys_removal(want: dict[str, Any], have: dict[str, Any]) -> dict[str, Any]:
    """The pod-spec patch that takes off what ``want`` (a desired pod spec) no longer has and ``have`` (the stored
    one) still has: each node-selector label (a strategic merge keeps map keys a patch does not name: a label taken
    out of ``spec.placement.nodeSelector``, the GPU product of a service gone to CPU), both account keys
    (:data:`POD_ACCOUNT_KEYS`) when ``want`` names none, and each stale ``imagePullSecrets`` item (``$patch:
    delete``; the strategic merge merges that list on ``name``), the list nulled when ``want`` has none. {} when
    nothing is to remove."""
    pod: dict[str, Any] = {}
    selector, wanted_labels = have.get("nodeSelector"), want.get("nodeSelector") or {}
    if isinstance(selector, dict) and (stale_labels := {k: None for k in selector if k not in wanted_labels}):
        pod["nodeSelector"] = stale_labels
    if not want.get("serviceAccountName") and any(have.get(k) for k in POD_ACCOUNT_KEYS):
        pod.update({k: None for k in POD_ACCOUNT_KEYS})
    wanted = {s.get("name") for s in want.get("imagePullSecrets") or []}
    stale = [s["name"] for s in have.get("imagePullSecrets") or [] if isinstance(s, dict) and "name" in s
             and s["name"] not in wanted]
    if stale:
        pod["imagePullSecrets"] = [{"name": n, "$patch": "delete"} for n in stale] if wanted else None
    return pod


def _stale_keys(want: dict[str, Any], have: Any, keys: tuple[str, ...] | None = None) -> dict[str, None]:
    """``{key: None}`` for each of ``keys`` (None: every key but ``name``) that ``have`` has and ``want`` has not."""
    if not isinstance(have, dict):
        return {}
    return {k: None for k in (keys if keys is not None else tuple(have)) if k != "name" and k in have
            and k not in want}


def _stale_removal(desired: dict[str, Any], observed: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pod-template patch that nulls what the operator wrote for an earlier spec and ``desired`` no longer has.

    A strategic merge keeps map keys a patch does not name and merges list items by their key, and
    :func:`is_derivative` does not see them. So it nulls: the resource keys of the other layout
    (:data:`LAYOUT_RESOURCES`) and every node-selector label ``desired`` lacks, the GPU product's too (a service
    whose ``resources.gpu.count`` went from 1 to 0 would keep requesting a GPU on a GPU node, one from 0 to 1 keep its
    CPU limit); the old model source of a desired volume, the old handler of each probe (:data:`PROBE_HANDLERS`), the
    BuiltIn runtime's ``lifecycle`` and a PVC source's ``subPath`` (a ``model.source`` change would otherwise merge
    two volume sources or two probe handlers into one, which the API server refuses); the model volume and its mount
    (:data:`MODEL_VOLUME`) once a URI source has none (they stayed: the old ConfigMap, claim or image mounted at
    /models for nothing, and a pod whose ConfigMap was deleted since never started); and the account and pull Secrets
    ``spec.serviceAccountName`` and ``spec.imagePullSecrets`` no longer name (:func:`_pod_keys_removal`). None when
    nothing is to remove."""
    if observed is None:
        return None
    want = desired["spec"]["template"]["spec"]
    have = ((observed.get("spec") or {}).get("template") or {}).get("spec") or {}
    old = {c.get("name"): c for c in have.get("containers") or [] if isinstance(c, dict)}
    containers = []
    for c in want["containers"]:
        was = old.get(c["name"]) or {}
        had, has = was.get("resources") or {}, c.get("resources") or {}
        item: dict[str, Any] = {}
        resources = {part: stale for part, keys in LAYOUT_RESOURCES.items()
                     if (stale := _stale_keys(has.get(part) or {}, had.get(part), keys))}
        if resources:
            item["resources"] = resources
        for probe in PROBES:
            if probe in c and (stale := _stale_keys(c[probe], was.get(probe), PROBE_HANDLERS)):
                item[probe] = stale
        item.update(_stale_keys(c, was, ("lifecycle",)))
        mounts = {m.get("mountPath"): m for m in was.get("volumeMounts") or [] if isinstance(m, dict)}
        stale_mounts = [{"name": m["name"], "mountPath": m["mountPath"], **stale} for m in c.get("volumeMounts") or []
                        if (stale := _stale_keys(m, mounts.get(m["mountPath"]), ("subPath",)))]
        wanted_mounts = {m["mountPath"] for m in c.get("volumeMounts") or []}
        stale_mounts += [{"name": MODEL_VOLUME, "mountPath": path, "$patch": "delete"} for path, m in mounts.items()
                         if m.get("name") == MODEL_VOLUME and path not in wanted_mounts]  # named: see _merged
        if stale_mounts:
            item["volumeMounts"] = stale_mounts
        if item:
            containers.append({"name": c["name"], **item})
    pod: dict[str, Any] = {"containers": containers} if containers else {}
    volumes = {v.get("name"): v for v in have.get("volumes") or [] if isinstance(v, dict)}
    stale_volumes = [{"name": v["name"], **stale} for v in want.get("volumes") or []
                     if (stale := _stale_keys(v, volumes.get(v["name"])))]
    if MODEL_VOLUME in volumes and not any(v["name"] == MODEL_VOLUME for v in want.get("volumes") or []):
        stale_volumes.append({"name": MODEL_VOLUME, "$patch": "delete"})
    if stale_volumes:
        pod["volumes"] = stale_volumes
    pod.update(_pod_keys_removal(want, have))
    return {"spec": {"template": {"spec": pod}}} if pod else None


def running_replicas(pods: list[dict[str, Any]]) -> int:
    """Pods that hold their resources: bound to a node, not terminating, not Succeeded/Failed."""
    return sum(1 for p in pods
               if (p.get("spec") or {}).get("nodeName")
               and not (p.get("metadata") or {}).get("deletionTimestamp")
               and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


# ---------------------------------------------------------------------------------------------- drift
def is_derivative(desired: Any, observed: Any, path: tuple[str, ...] = ()) -> bool:
    """True when every field set in ``desired`` has the same value in ``observed`` (apimachinery's
    ``equality.Semantic.DeepDerivative``): fields the apiserver defaulted or others added are ignored.

    Lists of named objects (containers, ports, volumes, env) match by ``name``; quantities under
    ``requests``/``limits`` compare by value (``"2000m"`` equals ``"2"``).
    """
    if isinstance(desired, dict):
        if not isinstance(observed, dict):
            return False
        return all(is_derivative(v, observed.get(k), (*path, k)) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(observed, list):
            return False
        if desired and all(isinstance(d, dict) and "name" in d for d in desired):
            by_name = {o.get("name"): o for o in observed if isinstance(o, dict)}
            return all(is_derivative(d, by_name.get(d["name"]), path) for d in desired)
        return len(desired) == len(observed) and all(
            is_derivative(d, o, path) for d, o in zip(desired, observed, strict=True))
    if path and len(path) >= 2 and path[-2] in ("requests", "limits"):
        return same_quantity(desired, observed)
    return bool(desired == observed)


def _owned_meta_ok(desired: dict[str, Any], observed: dict[str, Any]) -> bool:
    dm, om = desired["metadata"], observed.get("metadata") or {}
    if not is_derivative(dm.get("labels", {}), om.get("labels") or {}):
        return False
    if not is_derivative({k: v for k, v in (dm.get("annotations") or {}).items() if k != REPLICAS_ANNOTATION},
                         om.get("annotations") or {}):
        return False
    uids = {r.get("uid") for r in om.get("ownerReferences") or []}
    return all(r["uid"] in uids for r in dm.get("ownerReferences", []))


def _child_write(kind: str, desired: dict[str, Any], observed: dict[str, Any] | None,
                 spec_keys: tuple[str, ...]) -> Write | None:
    name = desired["metadata"]["name"]
    if observed is None:
        return Write(kind, "create", name, desired)
    same = _owned_meta_ok(desired, observed) and all(
        is_derivative(desired.get(k), observed.get(k), (k,)) for k in spec_keys)
    if same:
        return None
    return Write(kind, "patch", name, {**_meta_patch(desired), **{k: desired[k] for k in spec_keys}})


def _meta_patch(desired: dict[str, Any]) -> dict[str, Any]:
    """The ``metadata`` part of a drift repair: the owned labels, owner references and annotations."""
    patch = {"metadata": {k: desired["metadata"][k] for k in ("labels", "ownerReferences")}}
    if desired["metadata"].get("annotations"):
        patch["metadata"]["annotations"] = {
            k: v for k, v in desired["metadata"]["annotations"].items() if k != REPLICAS_ANNOTATION}
    return patch


PDB_EXACT_FIELDS = ("minAvailable", "maxUnavailable", "selector")
"""PodDisruptionBudget spec fields the operator owns whole: the budget (either field) and the selector."""


def _pdb_write(desired: dict[str, Any], observed: dict[str, Any] | None) -> Write | None:
    """Create or repair a PodDisruptionBudget (the replicas' or the gateway's) so that it ends up with exactly
    ``desired``'s budget and selector.

    A strategic merge patch keeps the fields it does not name: a PDB changed to ``minAvailable`` would get
    ``maxUnavailable`` beside it, which the API server refuses (``minAvailable and maxUnavailable cannot be both
    set``, policy/v1 validation), and extra selector labels or expressions would stay. So :data:`PDB_EXACT_FIELDS`
    are compared for equality (not :func:`is_derivative`), the budget field ``desired`` leaves out is nulled and
    the selector is replaced whole (``$patch: replace``). Other spec fields (``unhealthyPodEvictionPolicy``) are
    repaired like any child's. None when nothing differs.
    """
    w = _child_write("PodDisruptionBudget", desired, observed, ("spec",))
    if observed is None or (w is not None and w.action == "create"):
        return w
    want, have = desired["spec"], observed.get("spec") or {}
    if w is None and all(want.get(k) == have.get(k) for k in PDB_EXACT_FIELDS):
        return None
    spec = {**want, **{k: None for k in PDB_EXACT_FIELDS if k not in want},
            "selector": {"$patch": "replace", **want["selector"]}}
    return Write("PodDisruptionBudget", "patch", desired["metadata"]["name"], {**_meta_patch(desired), "spec": spec})


# ---------------------------------------------------------------------------------------------- replicas
@dataclass(frozen=True)
class ReplicaDecision:
    desired: int
    write: int | None
    """Replicas to write to the Deployment now; None = leave ``spec.replicas`` alone."""
    conflict: cond.Condition | None
    """A ScalingConflict=True condition detected now (None: no new conflict)."""
    reason: str
    message: str
    image_encoder: tuple[int, str, str] | None = None
    """With ``spec.stages``: the image encoder pool's replicas, reason and message (:func:`staged_replicas`)."""


def decide_replicas(spec: IsvcSpec, obs: IsvcObserved, decision: Decision | None = None) -> ReplicaDecision:
    """The single replica decision (pure). See the module docstring for the rules.

    Args:
        decision: A valid autoscaler decision taken on this object just now (already within the bounds and
            under the budget cap of the same read: :func:`modalscale.autoscaler.policy.bound_replicas`; a staged
            service's front under its share of the cap, :func:`front_budget_cap`); None = follow
            ``status.desiredReplicas``, the record of the last one.
    """
    sc = spec.scaling
    if sc.mode == "Fixed":
        desired, why = bound_replicas(int(sc.replicas or 0), None, None, obs.budget_cap_replicas)
        reason, message = Reason.FIXED_REPLICAS.value, f"Fixed mode: spec.scaling.replicas={int(sc.replicas or 0)}"
    elif decision is not None:
        desired, why = decision.desired_replicas, None
        reason, message = decision.reason.value, decision.message[:1024] or decision.reason.value
    else:
        scaler = obs.status.desired_replicas
        decided = scaler is not None and obs.deployment is not None
        base = scaler if scaler is not None and decided else sc.min_replicas
        desired, why = bound_replicas(base, sc.min_replicas, sc.max_replicas, obs.budget_cap_replicas)
        auto = obs.status.autoscaler
        if decided and auto is not None and auto.reason:
            reason, message = auto.reason, auto.message or auto.reason
        else:
            reason = R.AUTOSCALER_DECISION if decided else R.MIN_REPLICAS
            within = bound_replicas(base, sc.min_replicas, sc.max_replicas, None)[0]  # before the cap
            message = f"{sc.mode} mode: holding {within} replica(s) within [{sc.min_replicas}, {sc.max_replicas}]"
    if why == Reason.CAPPED_BY_BUDGET:
        reason = R.CAPPED_BY_BUDGET
        message = f"capped at {desired} replica(s) by BudgetPolicy {obs.budget_cap_policy}"
    if spec.stages is not None:  # the cap counts both pools
        front, pool = hold_unreadable_cap(obs, *staged_replicas(spec, obs, (desired, reason, message)))
        return replace(_front_write(spec, obs, *front), image_encoder=pool)
    (desired, reason, message), _ = hold_unreadable_cap(obs, (desired, reason, message), None)
    return _front_write(spec, obs, desired, reason, message)


def _front_write(spec: IsvcSpec, obs: IsvcObserved, desired: int, reason: str, message: str) -> ReplicaDecision:
    """The write of the front's (the one-piece service's) ``desired`` replicas to its Deployment: none while it
    holds them already, the restore of an external scale (``ScalingConflict``), none beside a foreign HPA."""
    dep = obs.deployment
    if dep is None:
        return ReplicaDecision(desired, desired, None, reason, message)
    current = _spec_replicas(dep)
    last_raw = ((dep.get("metadata") or {}).get("annotations") or {}).get(REPLICAS_ANNOTATION)
    last = int(last_raw) if last_raw is not None and str(last_raw).isdigit() else None
    if obs.foreign_autoscalers:
        names = ", ".join(sorted(obs.foreign_autoscalers))
        c = cond.Condition(R.SCALING_CONFLICT, cond.TRUE, R.FOREIGN_AUTOSCALER,
                           f"HorizontalPodAutoscaler {names} targets Deployment {spec.name}; modalscale is the "
                           f"one writer of its replicas and does not fight it: delete the HPA (replicas held "
                           f"at {current})")
        return ReplicaDecision(desired, None, c, reason, message)
    if last is not None and current != last:
        c = cond.Condition(R.SCALING_CONFLICT, cond.TRUE, R.EXTERNAL_SCALE,
                           f"Deployment {spec.name} was scaled to {current} by someone else; restored {desired} "
                           f"({message}). Scale the InferenceService instead (Fixed mode) or change its bounds")
        return ReplicaDecision(desired, desired, c, reason, message)
    if current != desired or last is None:
        return ReplicaDecision(desired, desired, None, reason, message)
    return ReplicaDecision(desired, None, None, reason, message)


# ---------------------------------------------------------------------------------------------- pods
TERMINATION_MESSAGE_CHARS = 300
"""Characters of a container's last termination message kept in a condition (the kubelet keeps up to 4096 bytes)."""


def _termination_text(terminated: dict[str, Any]) -> str:
    """``": message"`` of a container termination (whitespace folded, at most ``TERMINATION_MESSAGE_CHARS``), or
    ``""`` when it has none."""
    text = " ".join(str(terminated.get("message") or "").split())[:TERMINATION_MESSAGE_CHARS]
    return f": {text}" if text else ""


def _last_exit(cs: dict[str, Any]) -> str:
    """``"; last exit code N (Reason): message"`` of a container's last termination, or ``""`` when none is known."""
    last = (cs.get("lastState") or {}).get("terminated") or {}
    if not last:
        return ""
    return f"; last exit code {last.get('exitCode')} ({last.get('reason') or 'Error'})" + _termination_text(last)


def _pod_problem(pod: dict[str, Any], who: str = "pod") -> tuple[str, str] | None:
    """(reason, message) of one failing pod (``who``: how the message names it), or None: unschedulable (the
    scheduler's message), a container waiting on a reason that stops it (its image, a crash loop: with its last exit
    code, reason and termination message), a container that exited non-zero, or the pod Failed. A terminating pod is
    not failing."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    name = pod["metadata"]["name"]
    st = pod.get("status") or {}
    for c in st.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return R.UNSCHEDULABLE, f"{who} {name} cannot be scheduled: {c.get('message', '')}"
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FAILING_WAIT_REASONS:
            kind = R.IMAGE_PULL if waiting["reason"] in IMAGE_WAIT_REASONS else R.CRASH_LOOP
            return kind, (f"{who} {name} container {cs.get('name')}: {waiting['reason']}: "
                          f"{waiting.get('message', '')}".rstrip(": ") + _last_exit(cs))
        terminated = (cs.get("state") or {}).get("terminated") or {}
        if terminated and terminated.get("exitCode", 0) != 0:
            return R.CRASH_LOOP, (f"{who} {name} container {cs.get('name')} exited with code "
                                  f"{terminated.get('exitCode')} ({terminated.get('reason', 'Error')})"
                                  + _termination_text(terminated))
    if st.get("phase") == "Failed":
        return R.PODS_FAILING, f"{who} {name} failed: {st.get('reason', '')} {st.get('message', '')}".strip()
    return None


def _pod_problems(pods: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(reason, message) of the first failing pod (:func:`_pod_problem`), or None. Terminating pods are ignored."""
    return next((p for p in map(_pod_problem, pods) if p is not None), None)


GATEWAY_FIXES = {
    R.UNSCHEDULABLE: ("the gateway pods run real containers (spec.gateway.resources) on a node that "
                      "spec.placement allows; KWOK nodes run no containers, so on a KWOK-only cluster set "
                      "spec.gateway.enabled: false"),
    R.IMAGE_PULL: ("the node cannot get the operator's image (MODALSCALE_GATEWAY_IMAGE, the chart's image; pull "
                   "Secrets: the chart's imagePullSecrets); on the local cluster: modalscale images import operator"),
    R.CRASH_LOOP: "kubectl logs --previous on the pod shows why the gateway exits",
}
"""What to do about the gateway pods' failure of each reason (appended to ``GatewayReady``'s message)."""


def _gateway_problems(obs: IsvcObserved) -> tuple[str, str, int] | None:
    """(reason, message, failing pods) of the gateway's pods: the first failing one (its Deployment's
    ``ReplicaFailure`` when it cannot create them), with how many fail; None when none does."""
    problems = [p for p in (_pod_problem(pod, "gateway pod") for pod in obs.gateway_pods) if p is not None]
    if problems:
        return problems[0][0], problems[0][1], len(problems)
    failed = _deployment_problem(obs.gateway_objects.get("Deployment"))
    return (failed[0], failed[1], 0) if failed else None


def _deployment_problem(deployment: dict[str, Any] | None) -> tuple[str, str] | None:
    """(``FailedCreate``, message) when the Deployment reports ``ReplicaFailure=True`` (its ReplicaSet cannot create
    pods: then there are no pods for :func:`_pod_problems` to find), else None."""
    for c in ((deployment or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "ReplicaFailure" and c.get("status") == "True":
            name = ((deployment or {}).get("metadata") or {}).get("name", "")
            return R.FAILED_CREATE, (f"Deployment {name} cannot create pods: {c.get('reason', '')}: "
                                     f"{c.get('message', '')}").rstrip(": ")
    return None


# ---------------------------------------------------------------------------------------------- plan
def plan_isvc(spec: IsvcSpec, obs: IsvcObserved, repo_files: dict[str, str] | None, config: PlanConfig,
              now: dt.datetime, decision: Decision | None = None,
              encoder_files: dict[str, str] | None = None) -> IsvcPlan:
    """Plan one reconcile of an InferenceService.

    Args:
        spec: The parsed spec.
        obs: What was read from the cluster.
        repo_files: The generated model repository (BuiltIn source; empty otherwise). None = a scale pass: the
            children are not re-rendered, so only the Deployment's replicas are planned (drift is repaired by the
            next full pass: change handler or resync timer).
        config: Operator-wide knobs.
        now: Timezone-aware UTC.
        decision: The autoscaler's valid decision, handed over directly (see :func:`decide_replicas`).
        encoder_files: With ``spec.stages``, the image encoder pool's generated repository (``repo_files`` is then the
            front's, or the one-piece one while :func:`stage_layout` says so: the caller renders it for that layout).
    Returns:
        Writes (children to create/patch, replicas), the whole desired status, Events for transitions. An object of
        a child's name that is not this service's (:func:`child_conflicts`) is planned as absent, and no write goes
        to it nor to the rest of its group (:attr:`ChildConflict.group`).
    Raises:
        ModelReferenceError: The model's ConfigMap or PVC does not exist; nothing is written then.
    """
    obs, conflicts = child_conflicts(spec, obs)
    groups = _child_groups(spec)
    held = {c.group for c in conflicts if c.wanted}
    taken = {(c.kind, c.name) for c in conflicts}
    plan = _plan(spec, obs, repo_files, config, now, decision, encoder_files, conflicts)
    plan.writes = [w for w in plan.writes if (w.kind, w.name) not in taken and groups.get((w.kind, w.name)) not in held]
    return plan


def _plan(spec: IsvcSpec, obs: IsvcObserved, repo_files: dict[str, str] | None, config: PlanConfig,
          now: dt.datetime, decision: Decision | None, encoder_files: dict[str, str] | None,
          conflicts: list[ChildConflict]) -> IsvcPlan:
    """:func:`plan_isvc` on ``obs`` without the foreign objects (``conflicts``), before its writes are held."""
    m = spec.model
    if m.source == "ConfigMap" and obs.user_configmap_keys is None:
        raise ModelReferenceError("spec.model.configMap.name",
                                  f"ConfigMap {m.config_map} not found in namespace {spec.namespace}; create it "
                                  f"(keys are repository paths with __ for /) or fix the name")
    if m.source == "PVC" and not obs.pvc_exists:
        raise ModelReferenceError("spec.model.pvc.claimName",
                                  f"PersistentVolumeClaim {m.pvc_claim} not found in namespace {spec.namespace}")

    replicas = decide_replicas(spec, obs, decision)
    encoder = replicas.image_encoder[0] if replicas.image_encoder is not None else 0
    if repo_files is None:
        writes = [_replicas_write(spec, replicas.write, None)] if (
            obs.deployment is not None and replicas.write is not None) else []
        writes += _image_encoder_writes(spec, obs, None, config, encoder)
        status, events = _status(spec, obs, replicas, config, now, conflicts)
        return IsvcPlan(writes=writes, status=status, events=events, desired_replicas=replicas.desired)
    layout = stage_layout(spec, obs)
    writes = []
    if m.source == "BuiltIn" and not layout.hold_front:
        w = _child_write("ConfigMap", build_configmap(spec, repo_files), obs.configmap, ("data",))
        if w:
            writes.append(w)
    writes += _front_deployment_writes(spec, obs, repo_files, replicas, config, layout)
    w = _model_configmap_removal(spec, obs)
    if w:
        writes.append(w)
    w = _pdb_write(build_pdb(spec), obs.poddisruptionbudget)
    if w:
        writes.append(w)
    gateway_serving = spec.gateway.enabled and _ready_pods(obs.gateway_objects.get("Deployment")) > 0
    w = _service_write(build_gateway_service(spec) if gateway_serving else build_service(spec), obs.service)
    if w:
        writes.append(w)
    writes += _gateway_writes(spec, obs, config, gateway_serving)
    writes += _image_encoder_writes(spec, obs, encoder_files or {}, config, encoder)

    status, events = _status(spec, obs, replicas, config, now, conflicts)
    oversubscribed = cpu_oversubscription(spec)
    if oversubscribed and obs.status.observed_generation != spec.generation:  # once per spec generation
        events.append(("Warning", R.CPU_OVERSUBSCRIBED, oversubscribed))
    if obs.status.observed_generation != spec.generation:  # once per spec generation, as the last
        events += [("Warning", R.CHILD_NOT_DELETED, why) for k, n, o in _leftovers(spec, obs)
                   if (why := delete_refusal(spec, k, n, o)) is not None]
    return IsvcPlan(writes=writes, status=status, events=events, desired_replicas=replicas.desired)


OWN, ADOPTABLE, FOREIGN = "own", "adoptable", "foreign"
"""The verdicts of :func:`child_ownership`."""


def child_ownership(uid: str, instance: str, observed: dict[str, Any]) -> tuple[str, str | None]:
    """Whose ``observed`` (an object at one of the names of the children of the InferenceService ``instance``, uid
    ``uid``) is, and why it is not this service's (pure): the one rule of every write and delete of a child.

    - :data:`OWN`: its controller owner reference is this InferenceService (by uid), as every child the operator
      makes has had since its first version;
    - :data:`ADOPTABLE`: no controller owner reference, but the operator's labels ``app.kubernetes.io/managed-by:
      modalscale-operator`` and ``app.kubernetes.io/instance: <name>``: an orphaned child (``kubectl delete
      --cascade=orphan`` takes the owner references off and leaves the labels; someone stripped it), which a write
      takes back (its patch puts the owner reference on);
    - :data:`FOREIGN`: anything else (a user's object, another InferenceService's child: another uid): never created
      over, patched or deleted, as controller-runtime's ``SetControllerReference`` refuses an object another owner
      controls and Helm 3 one without its ownership metadata. ``why`` (None unless foreign) says which.
    """
    meta = observed.get("metadata") or {}
    owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    if owner is not None:
        if owner.get("uid") == uid:
            return OWN, None
        return FOREIGN, (f"its controller is {owner.get('kind')} {owner.get('name')} (uid {owner.get('uid')}), not "
                         f"this InferenceService (uid {uid})")
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(INSTANCE_LABEL) == instance:
        return ADOPTABLE, None
    return FOREIGN, (f"it has no controller owner reference and not both labels {MANAGED_BY_LABEL}: {MANAGED_BY} "
                     f"and {INSTANCE_LABEL}: {instance}")


def desired_ownership(desired: dict[str, Any], observed: dict[str, Any]) -> tuple[str, str | None]:
    """:func:`child_ownership` of ``observed`` for the service the child ``desired`` is built for (its controller
    owner reference's uid and its instance label): what the Writer checks of an object a create found there."""
    meta = desired.get("metadata") or {}
    uid = next((r.get("uid") for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    return child_ownership(str(uid), str((meta.get("labels") or {}).get(INSTANCE_LABEL)), observed)


class ForeignChild(Exception):
    """A create found an object of the child's name that is not this service's (``apply.Writer``): the reconcile
    plans again with it observed (:func:`observed_with`), so the plan holds its group and says so."""

    def __init__(self, kind: str, name: str, observed: dict[str, Any], why: str | None) -> None:
        super().__init__(f"{kind} {name} is not this InferenceService's: {why}")
        self.kind, self.name, self.observed = kind, name, observed


@dataclass(frozen=True)
class ChildConflict:
    """An object of a child's name that is not this service's (:func:`child_ownership` says :data:`FOREIGN`)."""

    kind: str
    name: str
    why: str
    group: str
    """The children written together (:func:`_child_slots`): a wanted child's conflict holds every write of its
    group."""
    wanted: bool
    """The spec wants this child (False: a left-over's name, the plan would only have deleted its own)."""

    def message(self) -> str:
        """What the condition says: the object, whose it is, what holds, and the fix."""
        fix = (f"rename or delete the existing {self.kind} {self.name}, or give this InferenceService another name")
        if self.wanted:
            return (f"{self.kind} {self.name} is not this InferenceService's: {self.why}. The operator neither writes "
                    f"nor deletes it, and {_HELD[self.group].format(name=self.name)}: {fix}.")
        return (f"{self.kind} {self.name} is not this InferenceService's: {self.why}. Nothing of this service needs "
                f"that name now and the operator leaves it (it deletes only its own objects); it needs the name once "
                f"{_NEEDED[self.group]}: {fix}.")


_HELD = {"replicas": "the replicas' Deployment and its generated model repository are held (neither created nor "
                     "changed)",
         "service": "clients of the Service {name} do not reach this service",
         "pdb": "the replicas have no PodDisruptionBudget of their own",
         "gateway": "the gateway's objects are held (none created or changed)",
         "image-encoder": "the image encoder pool's objects are held (none created or changed)"}
_NEEDED = {"replicas": "spec.model.source is BuiltIn", "gateway": "spec.gateway.enabled is true",
           "image-encoder": "spec.stages is set"}


def _child_slots(spec: IsvcSpec) -> list[tuple[str, str, str, bool, str]]:
    """``(kind, name, group, wanted, where)`` of every name a child of ``spec`` may hold (wanted: the spec makes it;
    else only a left-over of an earlier spec is deleted there); ``where``: the :class:`IsvcObserved` field, or
    ``gateway_objects``/``image_encoder`` keyed by kind. The generated model repository's name is no child's while
    ``spec.model.configMap.name`` names it (the user's model)."""
    slots = [("Deployment", spec.name, "replicas", True, "deployment"),
             ("Service", spec.name, "service", True, "service"),
             ("PodDisruptionBudget", spec.name, "pdb", True, "poddisruptionbudget")]
    m = spec.model
    if not (m.source == "ConfigMap" and m.config_map == configmap_name(spec)):
        slots.append(("ConfigMap", configmap_name(spec), "replicas", m.source == "BuiltIn", "configmap"))
    names = _gateway_names(spec)
    slots += [(k, names[k], "gateway", spec.gateway.enabled, "gateway_objects") for k in GATEWAY_KINDS]
    names = _image_encoder_names(spec)
    slots += [(k, names[k], "image-encoder", spec.stages is not None, "image_encoder") for k in IMAGE_ENCODER_KINDS]
    return slots


def _child_groups(spec: IsvcSpec) -> dict[tuple[str, str], str]:
    return {(k, n): g for k, n, g, _, _ in _child_slots(spec)}


_BY_KIND = ("gateway_objects", "image_encoder")
"""The :class:`IsvcObserved` fields that hold a group's objects by kind."""


def _slot_object(obs: IsvcObserved, kind: str, where: str) -> dict[str, Any] | None:
    value: Any = getattr(obs, where)
    found: dict[str, Any] | None = value.get(kind) if where in _BY_KIND else value
    return found


def _with_slot(obs: IsvcObserved, kind: str, where: str, found: dict[str, Any] | None) -> IsvcObserved:
    """A copy of ``obs`` with ``found`` in the slot ``where`` (``kind``'s, for a group's)."""
    out = replace(obs, gateway_objects=dict(obs.gateway_objects), image_encoder=dict(obs.image_encoder))
    if where in _BY_KIND:
        getattr(out, where)[kind] = found
    else:
        setattr(out, where, found)
    return out


def child_conflicts(spec: IsvcSpec, obs: IsvcObserved) -> tuple[IsvcObserved, list[ChildConflict]]:
    """``obs`` with every object of a child's name that is not this service's (:func:`child_ownership`) taken out,
    as if absent (a copy; ``obs`` is left as it is), and those objects as :class:`ChildConflict` (pure). Planned on
    that copy, nothing of the plan reads a foreign object as its own: not a user's Deployment's ready replicas, nor a
    user's Service's ClusterIP as the encoder pool's address, nor another service's Deployment ``<name>-gateway``
    as this service's gateway."""
    conflicts, clean = [], obs
    for kind, name, group, wanted, where in _child_slots(spec):
        observed = _slot_object(obs, kind, where)
        if observed is None:
            continue
        verdict, why = child_ownership(spec.uid, spec.name, observed)
        if verdict == FOREIGN:
            conflicts.append(ChildConflict(kind, name, why or "", group, wanted))
            clean = _with_slot(clean, kind, where, None)
    return clean, conflicts


def observed_with(spec: IsvcSpec, obs: IsvcObserved, kind: str, name: str, found: dict[str, Any]) -> IsvcObserved:
    """``obs`` (a copy) with ``found`` observed as the object ``kind``/``name`` (pure): what a create met there
    (:class:`ForeignChild`), unseen by the watch caches, which hold only objects with the operator's label.

    Raises:
        ValueError: ``kind``/``name`` is none of ``spec``'s child names.
    """
    where = next((w for k, n, _, _, w in _child_slots(spec) if (k, n) == (kind, name)), None)
    if where is None:
        raise ValueError(f"{kind} {name} is no child name of InferenceService {spec.name}")
    return _with_slot(obs, kind, where, found)


def delete_refusal(spec: IsvcSpec, kind: str, name: str, observed: dict[str, Any]) -> str | None:
    """Why the operator may not delete ``observed`` (None: it may): the one guard of every delete the plan makes.

    The operator deletes only what it read and made for this service: an object whose controller owner reference
    is this InferenceService (by uid) and that carries ``app.kubernetes.io/managed-by: modalscale-operator``. An
    object that is not this service's at all (:func:`child_ownership`) never reaches here: :func:`child_conflicts`
    takes it out first and ``ChildConflict`` reports it. What is left here is an orphan with the operator's labels
    (no controller owner reference: it is adopted back only where the spec wants it) or a child whose managed-by
    label was taken off. The message names the object and why it stays (the ``ChildNotDeleted`` Event)."""
    verdict, foreign = child_ownership(spec.uid, spec.name, observed)
    label = ((observed.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL)
    if verdict == FOREIGN:
        why = foreign or ""
    elif verdict == ADOPTABLE:
        why = "it has no controller owner reference"
    elif label != MANAGED_BY:
        why = f"it lacks the label {MANAGED_BY_LABEL}: {MANAGED_BY}" + (f" (it has {label!r})" if label else "")
    else:
        return None
    return (f"{kind} {name} not deleted: {why}; the operator deletes only the objects it made for this "
            f"InferenceService. Delete it yourself if nothing else needs it")


def _deletes(spec: IsvcSpec, objects: dict[str, dict[str, Any] | None], names: dict[str, str],
             order: Iterable[str]) -> list[Write]:
    """Deletes of the objects of ``order`` that were read and pass :func:`delete_refusal` (one not read, or not
    this service's own, is left)."""
    return [Write(k, "delete", names[k], {}) for k in order
            if (o := objects.get(k)) is not None and delete_refusal(spec, k, names[k], o) is None]


def _gateway_names(spec: IsvcSpec) -> dict[str, str]:
    names = {k: gateway_name(spec) for k in GATEWAY_KINDS}
    names["Service"] = names["NetworkPolicy"] = replicas_service_name(spec)
    return names


def _image_encoder_names(spec: IsvcSpec) -> dict[str, str]:
    names = {k: image_encoder_name(spec) for k in IMAGE_ENCODER_KINDS}
    names["ConfigMap"] = image_encoder_configmap_name(spec)
    return names


def _leftovers(spec: IsvcSpec, obs: IsvcObserved) -> list[tuple[str, str, dict[str, Any]]]:
    """``(kind, name, object)`` of each child read that the spec no longer wants: the gateway's objects once it is
    disabled, the encoder pool's without ``spec.stages``, the generated model repository once the source is no
    longer BuiltIn (whether or not its delete waits: a front pod calling the pool, the rollout off the repository)."""
    found: list[tuple[str, str, dict[str, Any] | None]] = []
    if not spec.gateway.enabled:
        names = _gateway_names(spec)
        found += [(k, names[k], obs.gateway_objects.get(k)) for k in GATEWAY_KINDS]
    if spec.stages is None:
        names = _image_encoder_names(spec)
        found += [(k, names[k], obs.image_encoder.get(k)) for k in IMAGE_ENCODER_KINDS]
    if _model_configmap_unwanted(spec, obs):
        found.append(("ConfigMap", configmap_name(spec), obs.configmap))
    return [(k, n, o) for k, n, o in found if o is not None]


def rollout_status(deployment: dict[str, Any]) -> tuple[str, str] | None:
    """Why the Deployment's rollout is not complete, by ``kubectl rollout status``'s rule (k8s.io/kubectl
    pkg/polymorphichelpers/rollout_status.go, ``DeploymentStatusViewer.Status``), in its order, as ``(reason,
    message)``; None when complete.

    - ``status.observedGeneration < metadata.generation``: the controller has not seen the spec yet (RollingOut);
    - the Deployment's own ``Progressing`` condition says ``ProgressDeadlineExceeded`` (an error there; its old pods
      stay): that reason, with the controller's message;
    - ``updatedReplicas < spec.replicas``: "N out of M new replica(s) have been updated";
    - ``replicas > updatedReplicas``: "N old replica(s) are pending termination";
    - ``availableReplicas < updatedReplicas``: "N of M updated replica(s) are available".
    """
    meta, want, st = (deployment.get(k) or {} for k in ("metadata", "spec", "status"))
    generation, seen = int(meta.get("generation") or 0), int(st.get("observedGeneration") or 0)
    if seen < generation:
        return R.ROLLING_OUT, (f"waiting for the Deployment controller to observe generation {generation} "
                               f"(it has observed {seen})")
    for c in st.get("conditions") or []:
        if c.get("type") == R.PROGRESSING and c.get("reason") == R.DEPLOYMENT_PROGRESS_DEADLINE_EXCEEDED:
            return R.DEPLOYMENT_PROGRESS_DEADLINE_EXCEEDED, (
                f"the rollout exceeded its progress deadline ({want.get('progressDeadlineSeconds', 600)} s): "
                f"{c.get('message', '')}".rstrip(": "))
    updated, replicas = int(st.get("updatedReplicas") or 0), int(st.get("replicas") or 0)
    available = int(st.get("availableReplicas") or 0)
    if want.get("replicas") is not None and updated < int(want["replicas"]):
        return R.ROLLING_OUT, f"{updated} out of {int(want['replicas'])} new replica(s) have been updated"
    if replicas > updated:
        return R.ROLLING_OUT, f"{replicas - updated} old replica(s) are pending termination"
    if available < updated:
        return R.ROLLING_OUT, f"{available} of {updated} updated replica(s) are available"
    return None


def rollout_complete(deployment: dict[str, Any]) -> bool:
    """The Deployment's rollout is complete by ``kubectl rollout status``'s rule (:func:`rollout_status` says
    nothing is left). A rollout past its progress deadline (``ProgressDeadlineExceeded``) is not complete: its old
    pods stay."""
    return rollout_status(deployment) is None


def _model_configmap_unwanted(spec: IsvcSpec, obs: IsvcObserved) -> bool:
    """The generated model repository is read and no longer wanted: the source left BuiltIn and the spec does not
    name it as its model ConfigMap."""
    return obs.configmap is not None and spec.model.source != "BuiltIn" and not (
        spec.model.source == "ConfigMap" and spec.model.config_map == configmap_name(spec))


def _model_configmap_removal(spec: IsvcSpec, obs: IsvcObserved) -> Write | None:
    """Delete the generated model repository ``<name>-model-repo`` once ``spec.model.source`` is no longer BuiltIn:
    the operator's child it no longer wants (left, it held the old repository until the InferenceService was
    deleted). Not in the pass that patches the Deployment off it, nor before that patch's rollout is complete
    (:func:`rollout_complete`): the old ReplicaSet's pods mount it until then, and one it recreates meanwhile would
    wait in ContainerCreating; the first pass that reads the new template fully rolled out deletes it. Only this
    service's own child goes (:func:`delete_refusal`: a user's ConfigMap of that name, read without the watch cache,
    stays), and never the one the spec names as its model (``spec.model.configMap.name: <name>-model-repo``)."""
    if not _model_configmap_unwanted(spec, obs):
        return None
    dep = obs.deployment
    if dep is not None:
        volumes = (((dep.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or []
        if any(((v or {}).get("configMap") or {}).get("name") == configmap_name(spec) for v in volumes) or (
                not rollout_complete(dep)):
            return None
    w = _deletes(spec, {"ConfigMap": obs.configmap}, {"ConfigMap": configmap_name(spec)}, ("ConfigMap",))
    return w[0] if w else None


def _front_deployment_writes(spec: IsvcSpec, obs: IsvcObserved, repo_files: dict[str, str],
                             replicas: ReplicaDecision, config: PlanConfig, layout: StageLayout) -> list[Write]:
    """The Deployment ``<name>``'s write: create it (not while ``layout.hold_front``), or repair its drift, take a
    Spot placement or a stage (:func:`_stage_removal`) off its pods, and set its replicas."""
    replicas_for_body = replicas.write if replicas.write is not None else int(
        ((obs.deployment or {}).get("spec") or {}).get("replicas") or replicas.desired)
    dep = build_deployment(spec, replicas_for_body, repo_files, obs.user_configmap_keys, config.node_loss_toleration_s,
                           front_pool(spec, layout.front_address))
    dep_spec_no_replicas = {k: v for k, v in dep["spec"].items() if k != "replicas"}
    dep_cmp = {**dep, "spec": dep_spec_no_replicas}
    w = _child_write("Deployment", dep_cmp, obs.deployment, ("spec",))
    w = _merge_template(w, spec.name, _spot_removal(dep, obs.deployment))
    w = _merge_template(w, spec.name, _stage_removal(dep, obs.deployment))
    w = _merge_template(w, spec.name, _stale_removal(dep, obs.deployment))
    if obs.deployment is None:
        return [] if layout.hold_front else [Write("Deployment", "create", spec.name, dep)]
    if replicas.write is not None:
        return [_replicas_write(spec, replicas.write, w)]
    return [w] if w else []


def _service_write(desired: dict[str, Any], observed: dict[str, Any] | None) -> Write | None:
    """The write of a Service: create, or patch only the parts of its spec the operator owns (clusterIP etc. stay
    the apiserver's). The selector must be equal, not only contained: a strategic merge keeps the keys a patch does
    not name, so a switch between the replicas' and the gateway's selector replaces the map (``$patch: replace``)."""
    w = _child_write("Service", desired, observed, ("spec",))
    want = desired["spec"]["selector"]
    have = ((observed or {}).get("spec") or {}).get("selector") or {}
    replace_selector = observed is not None and have != want
    if w is None and not replace_selector:
        return None
    if w is not None and w.action == "create":
        return w
    body = w.body if w is not None else {"metadata": {k: desired["metadata"][k] for k in ("labels", "ownerReferences")},
                                         "spec": desired["spec"]}
    spec = {k: body["spec"][k] for k in ("type", "selector", "ports")}
    if replace_selector and set(have) - set(want):
        spec["selector"] = {"$patch": "replace", **want}
    return Write("Service", "patch", desired["metadata"]["name"], {**body, "spec": spec})


def _ready_pods(deployment: dict[str, Any] | None) -> int:
    return int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)


def _gateway_writes(spec: IsvcSpec, obs: IsvcObserved, config: PlanConfig, serving: bool) -> list[Write]:
    """The gateway's object writes: create/repair each of ``objects.gateway_children`` when enabled (the
    NetworkPolicy only while ``serving``: the Service ``<name>`` selects the gateway; deleted while it does not), or
    delete what an earlier enabled spec left when disabled."""
    if not spec.gateway.enabled:
        return _deletes(spec, obs.gateway_objects, _gateway_names(spec), reversed(GATEWAY_KINDS))
    writes = []
    for desired in gateway_children(spec, config.gateway_image, config.scraper_labels, config.node_loss_toleration_s,
                                    config.gateway_image_pull_secrets):
        kind = desired["kind"]
        observed = obs.gateway_objects.get(kind)
        if kind == "NetworkPolicy" and not serving:
            # It admits only the gateway to the replicas: once the Service falls back to them, it would refuse its
            # every client wherever the network plugin enforces it. It exists exactly while the gateway serves.
            if observed is not None:
                writes += _deletes(spec, {kind: observed}, _gateway_names(spec), (kind,))
            continue
        w = (_service_write(desired, observed) if kind == "Service"
             else _pdb_write(desired, observed) if kind == "PodDisruptionBudget"
             else _child_write(kind, desired, observed, _GATEWAY_SPEC_KEYS[kind]))
        if kind == "Deployment" and observed is not None:
            w = _merge_template(w, gateway_name(spec), _gateway_pod_removal(desired, observed))
        if w:
            writes.append(w)
    return writes


def _gateway_pod_removal(desired: dict[str, Any], observed: dict[str, Any]) -> dict[str, Any] | None:
    """The pod-template patch that takes off the gateway's Deployment the node-selector labels ``spec.placement`` and
    the pull Secrets the operator's ``MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS`` no longer name
    (:func:`_pod_keys_removal`; its account is always its own)."""
    want = desired["spec"]["template"]["spec"]
    have = ((observed.get("spec") or {}).get("template") or {}).get("spec") or {}
    pod = _pod_keys_removal(want, have)
    return {"spec": {"template": {"spec": pod}}} if pod else None


def _gateway_status(spec: IsvcSpec, obs: IsvcObserved) -> tuple[GatewayRecord, cond.Condition]:
    """``status.gateway`` and the ``GatewayReady`` condition (gateway enabled)."""
    dep = obs.gateway_objects.get("Deployment")
    dst = (dep or {}).get("status") or {}
    ready, want = _ready_pods(dep), spec.gateway.replicas
    block = GatewayRecord(int(dst.get("replicas") or 0), ready,
                          service_url(spec).replace(f"//{spec.name}.", f"//{replicas_service_name(spec)}.", 1))
    if dep is None:
        c = cond.Condition(R.GATEWAY_READY, cond.FALSE, R.CREATING, f"creating the Deployment {gateway_name(spec)}")
    elif ready > 0:
        c = cond.Condition(R.GATEWAY_READY, cond.TRUE, R.AVAILABLE,
                           f"{ready}/{want} gateway pod(s) ready; the Service {spec.name} reaches the gateway")
    elif (problem := _gateway_problems(obs)) is not None:
        fix = GATEWAY_FIXES.get(problem[0])
        c = cond.Condition(R.GATEWAY_READY, cond.FALSE, problem[0],
                           (f"0/{want} gateway pod(s) ready; the Service {spec.name} still reaches the replicas "
                            f"directly; {problem[1]}"[:800] + (f"; fix: {fix}" if fix else ""))[:1024])
    else:
        c = cond.Condition(R.GATEWAY_READY, cond.FALSE, R.GATEWAY_UNAVAILABLE,
                           f"0/{want} gateway pod(s) ready; the Service {spec.name} still reaches the replicas "
                           f"directly")
    return block, c


# ---------------------------------------------------------------------------------------------- the staged layout
@dataclass(frozen=True)
class StageLayout:
    """How the replicas ``<name>`` run this pass (:func:`stage_layout`)."""

    front_address: str | None = None
    """The encoder pool's ``host:port`` the front is rendered with (stage FRONT); None: one piece (stage ALL)."""
    hold_front: bool = False
    """A new staged service: the front's ConfigMap and Deployment are not created until the encoder Service has its
    ClusterIP (its address is in the front's repository)."""


def _front_address(deployment: dict[str, Any] | None) -> str | None:
    """The encoder address an observed front Deployment's pods were rendered with (None: one piece, or none)."""
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    return ((template.get("metadata") or {}).get("annotations") or {}).get(IMAGE_ENCODER_ADDRESS_ANNOTATION)


def stage_layout(spec: IsvcSpec, obs: IsvcObserved) -> StageLayout:
    """Decide whether the replicas ``<name>`` run as one piece or as the staged layout's front pool (pure).

    Without ``spec.stages``: one piece. With it: the front pool calling the encoder Service's observed ClusterIP
    (:func:`modalscale.operator.isvc.objects.image_encoder_address`) once the Service has one; until then a new
    service's front waits (``hold_front``) and a running front stays as it is. A running one-piece front switches
    only once an encoder replica is ready, so image requests never meet a pool that cannot answer them.
    """
    if spec.stages is None:
        return StageLayout()
    address = image_encoder_address(obs.image_encoder.get("Service"))
    observed = _front_address(obs.deployment)
    if address is None:
        return StageLayout(observed, hold_front=obs.deployment is None)
    if obs.deployment is None or observed is not None or _ready_pods(obs.image_encoder.get("Deployment")) > 0:
        return StageLayout(address)
    return StageLayout()


def image_encoder_replicas(spec: IsvcSpec, status: IsvcStatus) -> tuple[int, str, str]:
    """The encoder pool's own replicas with their reason and message, before any budget cap (pure; ``spec.stages``
    set).

    In Fixed mode ``minReplicas`` (``NotAutoscaled``); in a Predictive or Utilization mode the pool's own
    autoscaler's last valid count (``status.stages[image-encoder].autoscaler.desiredReplicas``, with its reason and
    message; ``minReplicas`` until its first decision, ``MinReplicas``), within the spec's bounds now. The cap and
    the front at 0: :func:`staged_replicas`.

    Raises:
        ValueError: ``spec.stages`` is None.
    """
    enc = spec.stages.image_encoder if spec.stages is not None else None
    if enc is None:
        raise ValueError("image_encoder_replicas needs spec.stages")
    lo, hi = enc.min_replicas, enc.max_replicas
    auto = _pool_autoscaler(spec, status)
    if spec.scaling.mode == "Fixed":
        base, reason, message = lo, R.NOT_AUTOSCALED, (f"Fixed mode: holds spec.stages.imageEncoder.minReplicas="
                                                        f"{lo} (the pool is autoscaled in Predictive and Utilization "
                                                        f"mode)")
    elif auto is None or auto.desired_replicas is None:
        base, reason, message = lo, R.MIN_REPLICAS, (f"{spec.scaling.mode} mode: holds spec.stages.imageEncoder."
                                                    f"minReplicas={lo} until the pool's autoscaler decides")
    else:
        base = auto.desired_replicas
        reason = auto.reason or R.AUTOSCALER_DECISION
        message = auto.message or reason
    desired, why = bound_replicas(base, lo, hi, None)
    if why is not None:  # the spec's bounds changed since the decision
        return desired, why.value, f"the autoscaler's {base} replica(s) held within [{lo}, {hi}] of the spec now"
    return desired, reason, message


def staged_replicas(spec: IsvcSpec, obs: IsvcObserved, front: tuple[int, str, str]
                    ) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """The front pool's and the image encoder pool's replicas with their reasons and messages (pure;
    ``spec.stages`` set).

    Args:
        front: The front's count, reason and message as :func:`decide_replicas` decided them for the one-piece
            rules (within its bounds, at most the cap).
    Returns:
        ``(front, pool)``. The pool's own count (:func:`image_encoder_replicas`); 0 while the front is at 0
        (``FrontAtZero``: scaled to zero, Fixed 0, a ``ScaleToZero``). Under a BudgetPolicy cap the cap counts both
        pools (:func:`modalscale.autoscaler.policy.split_staged_cap`: the pool whose replica costs more, by
        ``obs.replica_usd_per_hour`` and ``obs.image_encoder_usd_per_hour``, gives up replicas first, never below
        1 while the front runs); a pool it cut, or a front already capped (an autoscaler decision under its share,
        :func:`front_budget_cap`), gets ``CappedByBudget`` with a message naming the rule, the prices and the
        counts.
    """
    pool = image_encoder_replicas(spec, obs.status)
    cap = obs.budget_cap_replicas
    if front[0] == 0:
        return front, (0, R.FRONT_AT_ZERO, "the front pool is at 0 replicas, so the image encoder pool is too")
    if cap is None:
        return front, pool
    prices = (obs.replica_usd_per_hour, obs.image_encoder_usd_per_hour)
    split = split_staged_cap(front[0], min(pool[0], cap), cap, *prices)
    text = (f"capped at {cap} replica(s) over both stages by BudgetPolicy {obs.budget_cap_policy}: "
            f"{staged_cap_rule(split.front, split.image_encoder, cap, *prices)}")[:1024]
    if split.front < front[0] or front[1] == R.CAPPED_BY_BUDGET:
        front = (split.front, R.CAPPED_BY_BUDGET, text)
    if split.image_encoder < pool[0]:
        pool = (split.image_encoder, R.CAPPED_BY_BUDGET, text)
    return front, pool


def front_budget_cap(spec: IsvcSpec, status: IsvcStatus, cap: int | None, front_usd_per_hour: Decimal | None,
                     image_encoder_usd_per_hour: Decimal | None) -> int | None:
    """The budget cap the front's autoscaler decides under (pure): ``cap`` itself for a one-piece service (or no
    cap); for a staged one the front's share of the cap over both pools with the image encoder pool's own count
    (:func:`image_encoder_replicas`): what :func:`staged_replicas` leaves a front that wants more, so that the
    autoscaler's record (``status.desiredReplicas``) is the count the planner writes and no decision is undone."""
    if cap is None or spec.stages is None:
        return cap
    return split_staged_cap(cap, image_encoder_replicas(spec, status)[0], cap, front_usd_per_hour,
                            image_encoder_usd_per_hour).front


def image_encoder_budget_cap(spec: IsvcSpec, status: IsvcStatus, cap: int | None,
                             front_usd_per_hour: Decimal | None, image_encoder_usd_per_hour: Decimal | None
                             ) -> int | None:
    """The budget cap the image encoder pool's autoscaler decides under (pure): ``cap`` itself without
    ``spec.stages`` (or no cap); for a staged service the pool's share of the cap over both pools with the front's
    own count (``status.desiredReplicas`` within its bounds and the cap, ``minReplicas`` before the first decision;
    Fixed: ``spec.scaling.replicas``), as :func:`decide_replicas` takes it: what :func:`staged_replicas` leaves a
    pool that wants more. Any count up to it is one the split keeps, so the pool's record
    (``status.stages[image-encoder].autoscaler.desiredReplicas``) is the count the planner writes (as
    :func:`front_budget_cap` for the front). 0 when the front's count is 0 or the cap is. Taken from status, that
    count is the planner's only while the front's Deployment exists: without it the pool takes no decision
    (``operator.autoscale.plan.pool_decision_held``)."""
    if cap is None or spec.stages is None:
        return cap
    sc = spec.scaling
    if sc.mode == "Fixed":
        front = bound_replicas(int(sc.replicas or 0), None, None, cap)[0]
    else:
        base = status.desired_replicas if status.desired_replicas is not None else sc.min_replicas
        front = bound_replicas(base, sc.min_replicas, sc.max_replicas, cap)[0]
    return split_staged_cap(front, cap, cap, front_usd_per_hour, image_encoder_usd_per_hour).image_encoder


def _pool_autoscaler(spec: IsvcSpec, status: IsvcStatus) -> AutoscalerRecord | None:
    """The pool's autoscaler block as stored (``status.stages[image-encoder].autoscaler``); None in Fixed mode
    (a stored block is dropped there: its decision no longer applies) or when absent."""
    if spec.scaling.mode == "Fixed":
        return None
    item = status.stage(STAGE_IMAGE_ENCODER)
    return item.autoscaler if item is not None else None


def _merge_template(w: Write | None, name: str, removal: dict[str, Any] | None) -> Write | None:
    """``w`` (a Deployment patch, or None) with a pod-template ``removal`` patch merged in (its metadata maps key by
    key, its spec by :func:`_merged`); ``w`` when ``removal`` is None."""
    if removal is None:
        return w
    body = w.body if w else {"metadata": {}, "spec": {}}
    template = {**(body["spec"].get("template") or {})}
    extra = removal["spec"]["template"]
    if "spec" in extra:
        template["spec"] = _merged(template.get("spec") or {}, extra["spec"])
    if "metadata" in extra:
        meta = {**(template.get("metadata") or {})}
        for key, values in extra["metadata"].items():
            meta[key] = {**(meta.get(key) or {}), **values}
        template["metadata"] = meta
    return Write("Deployment", "patch", name, {**body, "spec": {**body["spec"], "template": template}})


def _merged(patch: Any, extra: Any) -> Any:
    """Two patches in one: maps merged key by key, lists of named objects (containers, volumes) item by item on their
    ``name`` as the strategic merge does, anything else ``extra``'s (a ``None`` in it deletes the key)."""
    if isinstance(patch, dict) and isinstance(extra, dict):
        return {**patch, **{k: _merged(patch[k], v) if k in patch else v for k, v in extra.items()}}
    if (isinstance(patch, list) and isinstance(extra, list) and patch and extra
            and all(isinstance(i, dict) and "name" in i for i in patch + extra)):
        more = {i["name"]: i for i in extra}
        return [_merged(i, more.pop(i["name"])) if i["name"] in more else i for i in patch] + list(more.values())
    return extra


def _stage_removal(desired: dict[str, Any], observed: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pod-template patch that takes the front's stage label and encoder address off a front switched back to
    one piece (a strategic merge keeps map keys a patch does not name: they are nulled). Their removal changes the
    template, so the pods roll onto the one-piece repository. None when nothing is to remove."""
    have = (((observed or {}).get("spec") or {}).get("template") or {}).get("metadata") or {}
    want = desired["spec"]["template"]["metadata"]
    meta = {}
    for key, name in (("labels", STAGE_LABEL), ("annotations", IMAGE_ENCODER_ADDRESS_ANNOTATION)):
        if name in (have.get(key) or {}) and name not in (want.get(key) or {}):
            meta[key] = {name: None}
    return {"spec": {"template": {"metadata": meta}}} if meta else None


def _front_calls_pool(obs: IsvcObserved) -> bool:
    """Whether a front pod may still call the encoder pool: the front's template is staged, or a pod made from a
    staged template is still there (terminating pods drain their requests first)."""
    return _front_address(obs.deployment) is not None or any(
        STAGE_LABEL in ((p.get("metadata") or {}).get("labels") or {}) for p in obs.pods)


def _image_encoder_writes(spec: IsvcSpec, obs: IsvcObserved, files: dict[str, str] | None, config: PlanConfig,
                          replicas: int) -> list[Write]:
    """The encoder pool's writes: each object created or repaired (``files`` None, a scale pass: its replicas
    only); without ``spec.stages`` (a full pass), the objects an earlier spec left deleted once no front pod calls
    them."""
    name = image_encoder_name(spec)
    dep = obs.image_encoder.get("Deployment")
    if files is None:
        current = ((dep or {}).get("spec") or {}).get("replicas")
        return [] if spec.stages is None or dep is None or current == replicas else [
            Write("Deployment", "patch", name, {"spec": {"replicas": replicas}})]
    if spec.stages is None:
        if _front_calls_pool(obs):
            return []
        return _deletes(spec, obs.image_encoder, _image_encoder_names(spec), reversed(IMAGE_ENCODER_KINDS))
    desired = build_image_encoder_deployment(spec, replicas, files, config.node_loss_toleration_s)
    writes = [_child_write("ConfigMap", build_image_encoder_configmap(spec, files), obs.image_encoder.get("ConfigMap"),
                           ("data",)),
              _merge_template(_merge_template(_child_write("Deployment", desired, dep, ("spec",)), name,
                                              _spot_removal(desired, dep)), name, _stale_removal(desired, dep)),
              _service_write(build_image_encoder_service(spec), obs.image_encoder.get("Service")),
              _pdb_write(build_image_encoder_pdb(spec), obs.image_encoder.get("PodDisruptionBudget")),
              _child_write("NetworkPolicy", build_image_encoder_network_policy(spec, config.scraper_labels),
                           obs.image_encoder.get("NetworkPolicy"), ("spec",))]
    return [w for w in writes if w is not None]


def _stages_status(spec: IsvcSpec, obs: IsvcObserved, decision: ReplicaDecision
                   ) -> tuple[tuple[StageRecord, ...], cond.Condition]:
    """``status.stages`` (front, image-encoder) and ``ImageEncoderReady`` (``spec.stages`` set)."""
    layout = stage_layout(spec, obs)
    want, reason, message = decision.image_encoder or image_encoder_replicas(spec, obs.status)
    dep = obs.image_encoder.get("Deployment")
    dst = (dep or {}).get("status") or {}
    ready = _ready_pods(dep)
    address = image_encoder_address(obs.image_encoder.get("Service"))
    fdst = (obs.deployment or {}).get("status") or {}
    front_note = (None if layout.front_address is not None else
                  "waiting for the encoder Service's ClusterIP before creating the front pool" if layout.hold_front
                  else "serving as one piece until an image encoder replica is ready")
    if front_note is None and decision.reason == R.CAPPED_BY_BUDGET:
        front_note = decision.message  # the cap over both pools: which gives up replicas first, at what price
    front = StageRecord(STAGE_FRONT, int(fdst.get("replicas") or 0), int(fdst.get("readyReplicas") or 0),
                        decision.desired, decision.reason, front_note)
    encoder = StageRecord(STAGE_IMAGE_ENCODER, int(dst.get("replicas") or 0), ready, want, reason, message,
                          address or "", _pool_autoscaler(spec, obs.status))  # the autoscaler's block carried over
    name = image_encoder_name(spec)
    if dep is None:
        c = cond.Condition(R.IMAGE_ENCODER_READY, cond.FALSE, R.CREATING, f"creating the Deployment {name}")
    elif want == 0:
        c = cond.Condition(R.IMAGE_ENCODER_READY, cond.TRUE, R.SCALED_TO_ZERO, f"{name} at 0 replicas: {message}")
    elif ready > 0:
        c = cond.Condition(R.IMAGE_ENCODER_READY, cond.TRUE, R.AVAILABLE,
                           f"{ready}/{want} image encoder replica(s) ready at {address or 'no address yet'}")
    else:
        c = cond.Condition(R.IMAGE_ENCODER_READY, cond.FALSE, R.IMAGE_ENCODER_UNAVAILABLE,
                           f"0/{want} image encoder replica(s) of {name} ready")
    return (front, encoder), c


def cpu_oversubscription(spec: IsvcSpec) -> str | None:
    """The warning when a CPU replica runs more torch threads than it has cores, else None (pure).

    A replica without GPUs gets its CPU request as its limit (a CFS quota): ``instanceCount`` Triton instances of
    ``intraOpThreads`` threads each then contend for ``ceil(cpu)`` cores (at least 1, so one thread on a fraction
    of a core is fine). Not a refusal: it runs, only slower, and a user may mean it. GPU replicas have no CPU
    limit and are not checked. Posted as a Warning Event ``CPUOversubscribed`` once per spec generation.
    """
    if spec.resources.gpu_count > 0:
        return None
    cores = parse_cpu_cores(spec.resources.cpu, "spec.resources.cpu")
    budget = max(1, math.ceil(cores))
    instances, threads = spec.runtime.instance_count, spec.runtime.intra_op_threads
    if instances * threads <= budget:
        return None
    return (f"spec.runtime.instanceCount x spec.runtime.intraOpThreads = {instances} x {threads} = "
            f"{instances * threads} threads on {spec.resources.cpu} CPU (spec.resources.cpu, also the replica's CPU "
            f"limit): they contend for {budget} core(s) and requests slow down; keep instanceCount x intraOpThreads "
            f"<= {budget} or raise spec.resources.cpu")


def _replicas_write(spec: IsvcSpec, replicas: int, drift: Write | None) -> Write:
    """The Deployment patch that sets ``replicas`` (and records them in the annotation), with any drift repair."""
    patch = drift.body if drift else {"metadata": {}, "spec": {}}
    patch = {**patch, "metadata": {**patch.get("metadata", {}), "annotations": {REPLICAS_ANNOTATION: str(replicas)}},
             "spec": {**patch.get("spec", {}), "replicas": replicas}}
    return Write("Deployment", "patch", spec.name, patch)


def _ready_condition(obs: IsvcObserved, desired: int, problem: tuple[str, str] | None,
                     held: bool = False) -> cond.Condition:
    """``Ready``: creating, a pod problem, scaled to zero (or held at 0 by a cap annotation that cannot be read,
    ``held``: not ready, it cannot serve), all ``desired`` replicas ready at the Deployment's current generation, or
    waiting for replicas."""
    dep = obs.deployment or {}
    dst = dep.get("status") or {}
    ready = int(dst.get("readyReplicas") or 0)
    if not obs.deployment:
        return cond.Condition(R.READY, cond.FALSE, R.CREATING, "creating the Deployment")
    if problem:
        return cond.Condition(R.READY, cond.FALSE, problem[0], f"{ready}/{desired} replicas ready; {problem[1]}")
    if desired == 0 and held:
        return cond.Condition(R.READY, cond.FALSE, R.BUDGET_CAP_UNREADABLE,
                              "held at 0 replicas: a budget cap annotation cannot be read (BudgetLimited); it serves "
                              "once the BudgetPolicy rewrites the annotation or it is deleted")
    if desired == 0:
        return cond.Condition(R.READY, cond.TRUE, R.SCALED_TO_ZERO, "scaled to zero replicas")
    if ready >= desired and (dst.get("observedGeneration") or 0) >= (dep.get("metadata") or {}).get("generation", 0):
        return cond.Condition(R.READY, cond.TRUE, R.AVAILABLE, f"{ready}/{desired} replicas ready")
    return cond.Condition(R.READY, cond.FALSE, R.WAITING_FOR_REPLICAS, f"{ready}/{desired} replicas ready")


def _degraded_condition(problem: tuple[str, str] | None, gateway: tuple[str, str, int] | None,
                        gateway_pods: int) -> cond.Condition:
    """``Degraded``: True with the first failing replica's reason (or its Deployment's ``FailedCreate``), else the
    gateway's (:func:`_gateway_problems`); the gateway's failing pods are counted and named as the gateway's either
    way. False ``Healthy`` when no pod of either fails."""
    if gateway is None:
        return (cond.Condition(R.DEGRADED, cond.TRUE, problem[0], problem[1][:1024]) if problem
                else cond.Condition(R.DEGRADED, cond.FALSE, R.HEALTHY, "no failing pods"))
    said = (f"{gateway[2]} of {gateway_pods} gateway pod(s) failing: {gateway[1]}" if gateway[2]
            else f"the gateway: {gateway[1]}")
    if problem is None:
        return cond.Condition(R.DEGRADED, cond.TRUE, gateway[0], said[:1024])
    return cond.Condition(R.DEGRADED, cond.TRUE, problem[0], f"{problem[1][:600]}; and {said}"[:1024])


def refused_ready(reason: str, message: str, deployment: dict[str, Any] | None) -> cond.Condition:
    """``Ready`` of a refused service (``reason``, ``message``: the refusal's): False with them, but True while a
    missing model (``ModelNotFound``: its ConfigMap or PVC was deleted) meets a Deployment (as read) with ready
    replicas: those replicas loaded the model before and still serve it; new ones cannot start (``Degraded``)."""
    dep = deployment or {}
    ready = int((dep.get("status") or {}).get("readyReplicas") or 0)
    if reason == R.MODEL_NOT_FOUND and ready > 0:
        want = (dep.get("spec") or {}).get("replicas")
        return cond.Condition(R.READY, cond.TRUE, R.AVAILABLE,
                              (f"{ready}/{want if want is not None else ready} replicas ready, serving the model "
                               f"they loaded; new replicas cannot start: {message}")[:1024])
    return cond.Condition(R.READY, cond.FALSE, reason, message)


def _progressing_condition(obs: IsvcObserved, decision: ReplicaDecision) -> cond.Condition:
    """``Progressing``: what ``kubectl rollout status`` waits for (:func:`rollout_status`, over the replicas this plan
    writes when it writes them), said as a new pod template rolling out (old pods left) or as a scale (a replica
    count change: the pods are not at the count, or this plan writes another one); False
    ``ProgressDeadlineExceeded`` when the Deployment says so; False ``RolloutComplete`` only when the rollout is
    complete and nothing is scaling."""
    dep = obs.deployment
    if not dep:
        return cond.Condition(R.PROGRESSING, cond.TRUE, R.CREATING, "creating the Deployment")
    dst = dep.get("status") or {}
    replicas, ready = int(dst.get("replicas") or 0), int(dst.get("readyReplicas") or 0)
    updated, available = int(dst.get("updatedReplicas") or 0), int(dst.get("availableReplicas") or 0)
    raw = (dep.get("spec") or {}).get("replicas")
    have = int(raw) if raw is not None else decision.desired
    target = decision.write if decision.write is not None else have
    pending = rollout_status({**dep, "spec": {**(dep.get("spec") or {}), "replicas": target}})
    counts = f"{replicas} replica(s), {updated} updated, {available} available, {ready} ready"
    if pending is not None and pending[0] == R.DEPLOYMENT_PROGRESS_DEADLINE_EXCEEDED:
        return cond.Condition(R.PROGRESSING, cond.FALSE, pending[0], f"{pending[1]} ({counts})"[:1024])
    if replicas > updated:  # the old ReplicaSet's pods are left: a changed pod template (or a restart) rolls out
        what = "rolling out a new pod template"
    elif replicas != target:
        what = f"scaling from {replicas} to {target} replica(s)"
    elif target != have:  # the pods are at the count already; the Deployment's replicas are written
        what = f"setting the Deployment's replicas from {have} to {target}"
    else:
        what = ""
    if pending is None and not what:
        return cond.Condition(R.PROGRESSING, cond.FALSE, R.ROLLOUT_COMPLETE, f"all {target} replica(s) updated")
    text = ": ".join(t for t in (what, pending[1] if pending else "") if t)
    return cond.Condition(R.PROGRESSING, cond.TRUE, R.ROLLING_OUT, f"{text} ({counts})"[:1024])


def _conflict_condition(spec: IsvcSpec, decision: ReplicaDecision, old_conditions: list[ConditionStatus],
                        config: PlanConfig, now: dt.datetime) -> cond.Condition:
    """``ScalingConflict``: the decision's own conflict, else ``spec.scaling.replicas`` ignored outside Fixed
    mode, else an ``ExternalScale`` still held (``config.conflict_hold_s`` after it was set), else none."""
    if decision.conflict is not None:
        return decision.conflict
    sc = spec.scaling
    if sc.mode != "Fixed" and sc.replicas is not None and sc.replicas != decision.desired:
        return cond.Condition(R.SCALING_CONFLICT, cond.TRUE, R.SCALE_IGNORED_IN_MODE,
                              f"spec.scaling.replicas={sc.replicas} (e.g. from kubectl scale) is ignored in "
                              f"{sc.mode} mode; set spec.scaling.mode: Fixed to pin replicas, or change "
                              f"minReplicas/maxReplicas")
    old = cond.get(old_conditions, R.SCALING_CONFLICT)
    held = False
    if old and old.get("status") == cond.TRUE and old.get("reason") == R.EXTERNAL_SCALE:
        since = parse_time(old.get("lastTransitionTime"))  # unreadable: the hold is over (the condition is redone)
        held = since is not None and (now - since).total_seconds() < config.conflict_hold_s
    return (cond.Condition(R.SCALING_CONFLICT, cond.TRUE, old["reason"], old["message"]) if held and old
            else cond.Condition(R.SCALING_CONFLICT, cond.FALSE, R.NO_CONFLICT, "only modalscale writes the replicas"))


def _budget_condition(obs: IsvcObserved, decision: ReplicaDecision) -> cond.Condition:
    """``BudgetLimited``: a BudgetPolicy's replica cap (and Spot placement), Spot placement alone, or none. A staged
    service's cap counts both pools: the message says how it splits them (:func:`staged_replicas`)."""
    on_spot = (f"BudgetPolicy {obs.spot_policy} runs the pods on Spot capacity "
               f"({', '.join(f'{k}={v}' for k, v in SPOT_NODE_SELECTOR.items())})") if obs.spot_policy else ""
    if obs.budget_cap_unreadable:
        counts = f"front {decision.desired}, image encoder {decision.image_encoder[0]}" if (
            decision.image_encoder is not None) else f"{decision.desired}"
        readable = ("" if obs.budget_cap_replicas is None
                    else f"; BudgetPolicy {obs.budget_cap_policy} caps replicas at {obs.budget_cap_replicas}")
        return cond.Condition(
            R.BUDGET_LIMITED, cond.TRUE, R.BUDGET_CAP_UNREADABLE,
            (f"{'; '.join(obs.budget_cap_unreadable)}: no pool scales above the replicas its Deployment holds "
             f"(now {counts}) and the autoscaler holds, since a cap that cannot be read may be lower and is no "
             f"reason to scale down{readable}. The BudgetPolicy that owns the annotation rewrites or deletes it at "
             f"its next evaluation; delete one no BudgetPolicy writes" + (f"; {on_spot}" if on_spot else "")
             + (f"; {_unreadable_held(obs)}" if obs.budget_annotations_unreadable else ""))[:1024])
    if obs.budget_annotations_unreadable:
        cap = ("" if obs.budget_cap_replicas is None
               else f"; BudgetPolicy {obs.budget_cap_policy} caps replicas at {obs.budget_cap_replicas}")
        return cond.Condition(R.BUDGET_LIMITED, cond.TRUE, R.BUDGET_ANNOTATION_UNREADABLE,
                              (_unreadable_held(obs) + cap + (f"; {on_spot}" if on_spot else ""))[:1024])
    if obs.budget_cap_replicas is not None:
        staged = ""
        if decision.image_encoder is not None and decision.desired > 0:
            staged = (" over both stages: " + staged_cap_rule(decision.desired, decision.image_encoder[0],
                                                             obs.budget_cap_replicas, obs.replica_usd_per_hour,
                                                             obs.image_encoder_usd_per_hour))
        return cond.Condition(R.BUDGET_LIMITED, cond.TRUE, R.CAPPED_BY_BUDGET,
                              f"BudgetPolicy {obs.budget_cap_policy} caps replicas at {obs.budget_cap_replicas}"
                              + staged + (f"; {on_spot}" if on_spot else ""))
    if on_spot:
        return cond.Condition(R.BUDGET_LIMITED, cond.TRUE, R.MOVED_TO_SPOT, on_spot)
    return cond.Condition(R.BUDGET_LIMITED, cond.FALSE, R.WITHIN_BUDGET, "no budget cap in force")


def _unreadable_held(obs: IsvcObserved) -> str:
    """What holds while Spot or tenant-rejection annotations do not decode (``BudgetLimited``'s message)."""
    def unreadable(prefix: str) -> bool:  # invalid_budget_annotations' messages start "annotation <key>: "
        return any(m.startswith(f"annotation {prefix}") for m in obs.budget_annotations_unreadable)

    held = []
    if unreadable(BUDGET_SPOT_PREFIX):
        placed = "Spot" if _on_spot(_placed_deployment(obs)) else "on-demand"
        held.append(f"the pods stay on {placed} capacity, as the Deployment has them")
    if unreadable(BUDGET_REJECT_PREFIX):
        held.append("the gateway keeps refusing the tenants it last read under the key (none since it started)")
    return (f"{'; '.join(obs.budget_annotations_unreadable)}: {' and '.join(held)}, since a value that cannot be "
            f"read is no reason to move pods or admit a refused tenant. The BudgetPolicy that owns the annotation "
            f"rewrites or deletes it at its next evaluation; delete one no BudgetPolicy writes")


def _scaling_history(obs: IsvcObserved, decision: ReplicaDecision, now: dt.datetime) -> list[ScalingChange]:
    """``status.scalingHistory`` with this plan's replica write appended (when it changes the Deployment's
    replicas), the last :data:`HISTORY_LIMIT` entries."""
    history = list(obs.status.scaling_history or ())
    if decision.write is not None and obs.deployment is not None:
        before = _spec_replicas(obs.deployment)
        if before != decision.write:
            history.append(ScalingChange(now.replace(microsecond=0), before, decision.write,
                                         decision.conflict.reason if decision.conflict else decision.reason,
                                         decision.message[:1024]))
    return history[-HISTORY_LIMIT:]


def _status_events(old_conditions: list[ConditionStatus], new_conditions: list[ConditionStatus],
                   decision: ReplicaDecision) -> list[tuple[str, str, str]]:
    """``(type, reason, message)`` Events for the conditions that changed: Warning for a bad state, Normal else;
    none for the first visit's healthy or unknown states."""
    events = []
    changed = cond.transitions(old_conditions, new_conditions)
    # A scaling conflict is an Event whenever its cause changes (kubectl scale on the InferenceService, then on the
    # Deployment, then an HPA: True all along) and at each external scale restored, not only when status flips.
    old_conflict = cond.get(old_conditions, R.SCALING_CONFLICT) or {}
    new_conflict = cond.get(new_conditions, R.SCALING_CONFLICT) or {}
    if new_conflict.get("status") == cond.TRUE and new_conflict not in changed and (
            old_conflict.get("reason") != new_conflict.get("reason") or decision.conflict is not None
            and decision.conflict.reason == R.EXTERNAL_SCALE and decision.write is not None):
        changed.append(new_conflict)
    old_budget = cond.get(old_conditions, R.BUDGET_LIMITED) or {}
    new_budget = cond.get(new_conditions, R.BUDGET_LIMITED) or {}
    if (new_budget.get("status") == cond.TRUE and new_budget not in changed and old_budget
            and old_budget.get("reason") != new_budget.get("reason")):
        changed.append(new_budget)  # e.g. CappedByBudget -> BudgetCapUnreadable: True all along
    old_child = cond.get(old_conditions, R.CHILD_CONFLICT) or {}
    new_child = cond.get(new_conditions, R.CHILD_CONFLICT) or {}
    if (new_child.get("status") == cond.TRUE and new_child not in changed
            and old_child.get("message") != new_child.get("message")):
        changed.append(new_child)  # another object's name taken, or one given back: True all along
    if any(c["type"] == R.CHILD_CONFLICT and c["status"] == cond.TRUE for c in changed):
        # One cause, one Event: a foreign object that holds the replicas or their Service turns Ready False
        # (ForeignObject) in the pass ChildConflict turns True, and ChildConflict's Event names every such object.
        changed = [c for c in changed if not (c["type"] == R.READY and c["reason"] == R.FOREIGN_OBJECT)]
    for c in changed:
        # Creating is the normal first step, not a warning (Ready=False only until the Deployment exists).
        bad = (c["type"] in (R.READY, R.IMAGE_ENCODER_READY) and c["status"] != cond.TRUE and c["reason"] != R.CREATING
               ) or (c["type"] in (R.DEGRADED, R.SCALING_CONFLICT, R.BUDGET_LIMITED, R.CHILD_CONFLICT)
                     and c["status"] == cond.TRUE)
        if not old_conditions and not bad and not (c["type"] == R.READY and c["reason"] == R.CREATING):
            continue  # First visit: no Event for the initial healthy/unknown state of every condition.
        events.append(("Warning" if bad else "Normal", c["reason"], f"{c['type']}={c['status']}: {c['message']}"))
    return events


def _with_stages(spec: IsvcSpec, obs: IsvcObserved, decision: ReplicaDecision, wanted: list[cond.Condition]
                 ) -> tuple[tuple[StageRecord, ...] | None, list[cond.Condition]]:
    """``status.stages`` and ``wanted`` with ``ImageEncoderReady`` added (``spec.stages`` set; else None and
    ``wanted``). A front pool calling an encoder pool without a ready replica is not Ready: image requests fail."""
    if spec.stages is None:
        return None, wanted
    block, encoder_ready = _stages_status(spec, obs, decision)
    ready = wanted[0]
    if (encoder_ready.status != cond.TRUE and ready.status == cond.TRUE
            and stage_layout(spec, obs).front_address is not None):
        ready = cond.Condition(R.READY, cond.FALSE, R.IMAGE_ENCODER_UNAVAILABLE,
                               f"{ready.message}, but {encoder_ready.message}: image requests fail")
    return block, [ready, *wanted[1:], encoder_ready]


def _with_conflicts(spec: IsvcSpec, wanted: list[cond.Condition], conflicts: list[ChildConflict],
                    old_conditions: list[ConditionStatus]) -> list[cond.Condition]:
    """``wanted`` with ``ChildConflict``: True naming every foreign object (:func:`child_conflicts`), False once none
    is left (written only after a first conflict). ``Ready`` turns False (``ForeignObject``) when one holds the
    replicas (their Deployment, their generated model repository) or is the Service ``<name>`` clients call, or
    while the replicas are not created and any wanted child's name is taken (a staged front waits for a held pool)."""
    if not conflicts:
        if cond.get(old_conditions, R.CHILD_CONFLICT) is None:
            return wanted
        return [*wanted, cond.Condition(R.CHILD_CONFLICT, cond.FALSE, R.NO_CONFLICT,
                                        "every object of this service's child names is its own")]
    text = " ".join(c.message() for c in conflicts)[:4096]
    out = [*wanted, cond.Condition(R.CHILD_CONFLICT, cond.TRUE, R.FOREIGN_OBJECT, text)]
    ready = out[0]
    blocking = [c for c in conflicts if c.wanted and (c.group == "replicas" or (c.kind, c.name) == ("Service",
                                                                                                    spec.name))]
    if not blocking and ready.reason == R.CREATING:
        blocking = [c for c in conflicts if c.wanted]
    if blocking:
        out[0] = cond.Condition(R.READY, cond.FALSE, R.FOREIGN_OBJECT, " ".join(c.message() for c in blocking)[:4096])
    return out


def _status(spec: IsvcSpec, obs: IsvcObserved, decision: ReplicaDecision, config: PlanConfig,
            now: dt.datetime, conflicts: list[ChildConflict] | None = None
            ) -> tuple[IsvcStatus, list[tuple[str, str, str]]]:
    """The InferenceService's status (conditions, replicas, scaling history, cost) and its Events."""
    dst = (obs.deployment or {}).get("status") or {}
    problem = _pod_problems(obs.pods) or _deployment_problem(obs.deployment)
    old_conditions = list(obs.status.conditions or ())
    degraded = _degraded_condition(problem, _gateway_problems(obs) if spec.gateway.enabled else None,
                                   len(obs.gateway_pods))
    held = decision.reason == R.BUDGET_CAP_UNREADABLE
    wanted = [_ready_condition(obs, decision.desired, problem, held), _progressing_condition(obs, decision), degraded,
              _conflict_condition(spec, decision, old_conditions, config, now), _budget_condition(obs, decision)]
    gateway_block: GatewayRecord | None = None
    if spec.gateway.enabled:
        gateway_block, gateway_ready = _gateway_status(spec, obs)
        wanted.append(gateway_ready)
    stage_block, wanted = _with_stages(spec, obs, decision, wanted)
    wanted = _with_conflicts(spec, wanted, conflicts or [], old_conditions)
    kept = [c for c in old_conditions if (spec.gateway.enabled or c.get("type") != R.GATEWAY_READY)
            and (spec.stages is not None or c.get("type") != R.IMAGE_ENCODER_READY)]
    new_conditions = cond.upsert(kept, wanted, spec.generation, now)
    history = _scaling_history(obs, decision, now)
    cost = None
    if obs.replica_usd_per_hour is not None:
        cost = obs.replica_usd_per_hour * running_replicas(obs.pods)
        if obs.gateway_usd_per_pod_hour is not None:  # the gateway's Ready pods, at their own price
            cost += obs.gateway_usd_per_pod_hour * _ready_pods(obs.gateway_objects.get("Deployment"))
        if obs.image_encoder_usd_per_hour is not None and spec.stages is not None:  # the encoder pool's, at theirs
            cost += obs.image_encoder_usd_per_hour * running_replicas(obs.image_encoder_pods)
        cost = cost.quantize(Decimal("0.0001"))
    status = IsvcStatus(
        observed_generation=spec.generation, replicas=int(dst.get("replicas") or 0),
        ready_replicas=int(dst.get("readyReplicas") or 0), desired_replicas=decision.desired,
        selector=selector(spec), url=service_url(spec), cost_usd_per_hour=cost,
        scaling_history=tuple(history) if history else None,
        # DELETE removes the block of an earlier enabled spec (a null in the merge patch)
        gateway=gateway_block if gateway_block is not None else DELETE if obs.status.gateway is not None else None,
        stages=stage_block if stage_block is not None else DELETE if obs.status.stages is not None else None,
        conditions=tuple(new_conditions))
    return status, _status_events(old_conditions, new_conditions, decision)


def configmap_for(spec: IsvcSpec) -> str:
    """Name of the generated model-repository ConfigMap."""
    return configmap_name(spec)
