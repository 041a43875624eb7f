"""Pure builders of the children of an InferenceService: model-repository ConfigMap, Deployment, Service.

Every child carries a controller ownerReference (garbage collection deletes it with its owner) and the
recommended ``app.kubernetes.io/*`` labels. Builders never read the cluster or the clock.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from modalscale import GROUP, VERSION
from modalscale.api.capacity import SPOT_NODE_SELECTOR, SPOT_TOLERATION
from modalscale.api.inferenceservice import (
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    IMAGE_ENCODER_SUFFIX,
    REPLICAS_SERVICE_SUFFIX,
    IsvcSpec,
)
from modalscale.runtime.repo_config import IMAGE_ENCODER_MODEL, RESPONSE_CACHE_BYTES

SELECTOR_LABEL = "modalscale.io/inferenceservice"
"""Pod label that selects the pods of one InferenceService (immutable Deployment selector)."""
REPLICAS_ANNOTATION = "modalscale.io/replicas"
"""Deployment annotation: the replicas the operator last wrote; a different spec.replicas means someone else scaled."""
MODEL_REPO_MOUNT = "/models"
MODEL_VOLUME = "model-repository"
"""The pod volume (and mount at :data:`MODEL_REPO_MOUNT`) of a ConfigMap, PVC or Image model source; a URI source
has none (Triton reads the repository itself)."""
CONFIGMAP_REPO = f"{MODEL_REPO_MOUNT}/..data"
"""``--model-repository`` of a ConfigMap volume: the kubelet's ``..data`` link to the current files. The volume's
root also holds ``..data`` and ``..<timestamp>``, which Triton would scan as models and fail to load."""
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
PRESTOP_DRAIN_S = 30
"""Longest wait of the BuiltIn runtime's preStop hook (``python3 -m modalscale.runtime.drain``) for the requests
executing in the router and batched models, which Triton's own drain does not count."""
PRESTOP_QUIET_S = 5
"""Seconds without a request in flight before the hook ends (the endpoint removal races the hook)."""
DRAIN_S = 45
"""``--exit-timeout-secs``: after SIGTERM, Triton waits this long for queued requests and model unloads."""
TERMINATION_GRACE_S = PRESTOP_DRAIN_S + DRAIN_S + 15
"""Seconds Kubernetes allows from the start of the preStop hook to SIGKILL (hook, then Triton's drain)."""
NODE_LOSS_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
"""The NoExecute taints the node lifecycle controller puts on a node whose kubelet stopped posting status
(``Ready`` Unknown) or that reports ``Ready`` False; the taint manager evicts the pods that do not tolerate them."""
NODE_LOSS_TOLERATION_S = 30
"""Default ``tolerationSeconds`` of the replicas' and gateway pods for :data:`NODE_LOSS_TAINTS`, in seconds
(``MODALSCALE_NODE_LOSS_TOLERATION_SECONDS``).

Without a toleration of its own a pod gets 300 s from the DefaultTolerationSeconds admission plugin (kube-apiserver
``--default-unreachable-toleration-seconds``/``--default-not-ready-toleration-seconds``), a default meant to keep
ordinary pods through a network blip: a replica on a lost node then holds its place 5 minutes before its
replacement is even created. The Kubernetes documentation (Taints and Tolerations, "Taint based evictions") has a
pod set its own ``tolerationSeconds`` for how long it stays bound to a failing node. A serving replica keeps no
state: a needless eviction costs one start elsewhere, each second of a needed one is capacity lost mid-burst. The
taint comes only after the node missed heartbeats for the controller-manager's ``--node-monitor-grace-period``
(50 s by default since Kubernetes 1.32, kubernetes#126287; 40 s before), so 30 s creates the replacement about 80 s
after the last heartbeat and a blip shorter than that evicts nothing; not 0, since vendors warn that too short a
toleration migrates pods on every network jitter (Huawei CCE, "Toleration Time for Nodes in Unreachable State").
"""


STARTUP_PROBE: dict[str, Any] = {"httpGet": {"path": "/v2/health/live", "port": "http"},
                                 "periodSeconds": 1, "failureThreshold": 300}
"""The Triton container's startup probe: ``/v2/health/live`` (tritonserver serves it once its models loaded) every
second, for up to 300 s. The kubelet runs the readiness probe at once when the startup probe first succeeds, so
the period of this probe is how late a started replica is seen Ready: at 5 s (before 5 Dec 2026) a replica's own
time to Ready on the real node fell on 5 s steps (25.4-25.5 s or 30.4-30.6 s in 42 starts from zero, median 30.41
s); at 1 s, 21.3-26.5 s (median 23.90 s, 16 starts; docs/gateway.md), the user's wait at every start from zero and
every scale-up. An HTTP GET that Triton's C++ server answers costs the replica nothing
measurable, unlike the BuiltIn readiness check (a Python process, about 40 ms of CPU a run), which stays at 5 s."""


MANAGED_BY_LABEL, MANAGED_BY = "app.kubernetes.io/managed-by", "modalscale-operator"
"""The label, and its value, on every object the operator makes (the watch caches list by it)."""
INSTANCE_LABEL = "app.kubernetes.io/instance"
"""The label naming the InferenceService on every object the operator makes for it (its value: the service's name);
with :data:`MANAGED_BY_LABEL` it tells an orphaned child to adopt back (``plan.child_ownership``)."""


def owned_labels(spec: IsvcSpec) -> dict[str, str]:
    """The labels the operator owns on every child (others' labels are never touched)."""
    return {
        "app.kubernetes.io/name": "triton-inference-server",
        INSTANCE_LABEL: spec.name,
        "app.kubernetes.io/component": "inference-server",
        "app.kubernetes.io/part-of": "modalscale",
        MANAGED_BY_LABEL: MANAGED_BY,
        SELECTOR_LABEL: spec.name,
    }


def selector(spec: IsvcSpec) -> str:
    """``status.selector`` of the scale subresource (label selector string of the pods)."""
    return f"{SELECTOR_LABEL}={spec.name}"


def owner_reference(spec: IsvcSpec) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "name": spec.name, "uid": spec.uid,
        "controller": True, "blockOwnerDeletion": True,
    }


def _meta(spec: IsvcSpec, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": spec.namespace, "labels": owned_labels(spec),
            "ownerReferences": [owner_reference(spec)]}


def configmap_name(spec: IsvcSpec) -> str:
    return f"{spec.name}-model-repo"


STAGE_LABEL = "modalscale.io/stage"
"""Label naming a pod's stage in the staged layout (``spec.stages``): :data:`STAGE_FRONT` on the front pool's pods,
:data:`STAGE_IMAGE_ENCODER` on the image encoder pool's objects and pods. One-piece pods carry none."""
STAGE_FRONT, STAGE_IMAGE_ENCODER = "front", "image-encoder"
"""The values of :data:`STAGE_LABEL`: those of ``modalscale.runtime.repo_config.Stage`` (a unit test keeps them
equal) and the names in ``status.stages``."""
IMAGE_ENCODER_LABEL = "modalscale.io/image-encoder"
"""Pod label that selects the image encoder pool of one InferenceService (its value: the InferenceService's name).
The encoder pods never carry :data:`SELECTOR_LABEL`: the front Deployment's selector, the Services ``<name>`` and
``<name>-replicas``, the PodDisruptionBudget ``<name>``, the NetworkPolicy, the gateway and the autoscaler's
metrics select on that one, and none of them may take an encoder pod for a front replica."""
IMAGE_ENCODER_ADDRESS_ANNOTATION = "modalscale.io/image-encoder-address"
"""Front pod-template annotation: the encoder pool's ``host:port`` the front's repository was rendered with. The
repository is a ConfigMap, and a changed ConfigMap reaches a running Triton never (it loads its models once), so
the address is also in the template: a new address rolls the front pods onto the new repository."""

MODEL_REPOSITORY_HASH_ANNOTATION = "modalscale.io/model-repository-hash"
"""Pod-template annotation of a BuiltIn runtime (one piece, front or encoder pool): :func:`content_hash` of the
generated repository the pods mount. Triton reads its repository once at start (no ``--model-control-mode=poll``:
a half-written ConfigMap update would load a broken model), so an edit that changes the repository (batching,
instance count, precision) would reach only pods started after the kubelet refreshed the volume, up to a minute
later and never the running ones. With the hash in the template the edit is a new pod template: the Deployment
rolls its pods (surge one, take none away) onto the new repository, as a Helm chart's ``checksum/config``
annotation does (Helm docs, "Chart Development Tips and Tricks", *Automatically Roll Deployments*)."""


@dataclass(frozen=True)
class Pool:
    """Which replicas one runtime Deployment runs: the one-piece (or front) replicas ``<name>``, or the image encoder
    pool ``<name>-image-encoder``. :func:`front_pool` is the one-piece layout exactly."""

    name: str
    """The Deployment's name."""
    labels: dict[str, str]
    """Labels of the Deployment object (and of the pods, with :attr:`pod_labels` over them)."""
    selector: dict[str, str]
    """``spec.selector.matchLabels`` (immutable once created)."""
    configmap: str
    """The generated model-repository ConfigMap it mounts (BuiltIn source)."""
    ready_model: str
    """The Triton model the readiness probe checks."""
    pod_labels: dict[str, str] = field(default_factory=dict)
    """Extra pod-template labels (the stage label of the front pool)."""
    pod_annotations: dict[str, str] = field(default_factory=dict)
    """Pod-template annotations (the front's :data:`IMAGE_ENCODER_ADDRESS_ANNOTATION`), beside the repository's
    :data:`MODEL_REPOSITORY_HASH_ANNOTATION`; none of either: no ``annotations``."""
    record_replicas: bool = True
    """Put :data:`REPLICAS_ANNOTATION` on the Deployment (the one-piece and front pools: external scaling is told
    apart by it; the encoder pool's replicas are compared and restored like any field)."""


def front_pool(spec: IsvcSpec, encoder_address: str | None = None) -> Pool:
    """The replicas ``<name>``: one piece (``encoder_address`` None: exactly as before stages), or the staged
    layout's front pool calling the encoder pool at ``encoder_address`` (stage label and address annotation)."""
    pool = Pool(spec.name, owned_labels(spec), {SELECTOR_LABEL: spec.name}, configmap_name(spec), spec.model.name)
    if encoder_address is None:
        return pool
    return replace(pool, pod_labels={STAGE_LABEL: STAGE_FRONT},
                   pod_annotations={IMAGE_ENCODER_ADDRESS_ANNOTATION: encoder_address})


def image_encoder_name(spec: IsvcSpec) -> str:
    """``<name>-image-encoder``: the image encoder pool's Deployment, Service and PodDisruptionBudget."""
    return f"{spec.name}{IMAGE_ENCODER_SUFFIX}"


def image_encoder_configmap_name(spec: IsvcSpec) -> str:
    """``<name>-image-encoder-model-repo``: the encoder pool's generated model repository."""
    return f"{image_encoder_name(spec)}-model-repo"


def image_encoder_labels(spec: IsvcSpec) -> dict[str, str]:
    """The labels the operator owns on the encoder pool's objects and pods: the recommended ones with component
    ``image-encoder``, the stage label and :data:`IMAGE_ENCODER_LABEL`, never :data:`SELECTOR_LABEL`."""
    labels = {k: v for k, v in owned_labels(spec).items() if k != SELECTOR_LABEL}
    return {**labels, "app.kubernetes.io/component": "image-encoder", STAGE_LABEL: STAGE_IMAGE_ENCODER,
            IMAGE_ENCODER_LABEL: spec.name}


def image_encoder_pool(spec: IsvcSpec) -> Pool:
    """The staged layout's image encoder pool (readiness: the ``image_encoder`` model)."""
    return Pool(image_encoder_name(spec), image_encoder_labels(spec), {IMAGE_ENCODER_LABEL: spec.name},
                image_encoder_configmap_name(spec), IMAGE_ENCODER_MODEL, record_replicas=False)


def image_encoder_spec(spec: IsvcSpec) -> IsvcSpec:
    """``spec`` as the encoder pool's replicas run it: its own resources and runtime knobs
    (``spec.stages.imageEncoder``), the same image, placement and pricing tier (a Spot switch moves both pools).

    Raises:
        ValueError: ``spec.stages`` is None.
    """
    if spec.stages is None:
        raise ValueError("image_encoder_spec needs spec.stages")
    enc = spec.stages.image_encoder
    return replace(spec, runtime=enc.runtime, resources=enc.resources)


def _pool_meta(spec: IsvcSpec, pool: Pool, name: str | None = None) -> dict[str, Any]:
    return {"name": name or pool.name, "namespace": spec.namespace, "labels": dict(pool.labels),
            "ownerReferences": [owner_reference(spec)]}


def configmap_key(path: str) -> str:
    """A ConfigMap key for a repository file path (keys may not hold ``/``): ``a/b.txt`` -> ``a__b.txt``."""
    key = path.replace("/", "__")
    if not re.fullmatch(r"[-._a-zA-Z0-9]+", key):
        raise ValueError(f"repository path {path!r} cannot be a ConfigMap key")
    return key


def build_configmap(spec: IsvcSpec, files: dict[str, str]) -> dict[str, Any]:
    """The ConfigMap holding the generated model repository (``files``: repository path -> text)."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(spec, configmap_name(spec)),
        "data": {configmap_key(p): text for p, text in sorted(files.items())},
    }


def _model_volume(spec: IsvcSpec, repo_files: dict[str, str], user_cm_keys: list[str], configmap: str) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]], str]:
    """Volumes, mounts and the ``--model-repository`` argument for the model source (``configmap``: the generated
    repository's, BuiltIn)."""
    m = spec.model
    mount = {"name": MODEL_VOLUME, "mountPath": MODEL_REPO_MOUNT, "readOnly": True}
    if m.source == "BuiltIn":
        items = [{"key": configmap_key(p), "path": p} for p in sorted(repo_files)]
        vol = {"name": MODEL_VOLUME, "configMap": {"name": configmap, "items": items}}
        return [vol], [mount], CONFIGMAP_REPO
    if m.source == "ConfigMap":
        items = [{"key": k, "path": k.replace("__", "/")} for k in sorted(user_cm_keys)]
        vol = {"name": MODEL_VOLUME, "configMap": {"name": m.config_map, "items": items}}
        return [vol], [mount], CONFIGMAP_REPO
    if m.source == "PVC":
        vol = {"name": MODEL_VOLUME, "persistentVolumeClaim": {"claimName": m.pvc_claim, "readOnly": True}}
        if m.pvc_sub_path:
            mount = {**mount, "subPath": m.pvc_sub_path}
        return [vol], [mount], MODEL_REPO_MOUNT
    if m.source == "Image":
        vol = {"name": MODEL_VOLUME, "image": {"reference": m.image_reference, "pullPolicy": "IfNotPresent"}}
        return [vol], [mount], f"{MODEL_REPO_MOUNT}/{m.image_path.strip('/')}"
    return [], [], str(m.uri)


def node_loss_tolerations(tolerations: list[dict[str, Any]], toleration_s: int | None) -> list[dict[str, Any]]:
    """``tolerations`` followed by one NoExecute toleration of ``toleration_s`` seconds for each of
    :data:`NODE_LOSS_TAINTS` that none of them already tolerates.

    A toleration already tolerates the taint when its key is the taint's or empty and its effect is NoExecute or
    empty: the DefaultTolerationSeconds admission plugin's own rule for not adding its 300 s. So a user's toleration
    of the same taint (``spec.placement.tolerations``, any ``tolerationSeconds`` or none) wins; adding ours beside it
    would cut it short, as the taint manager evicts at the smallest ``tolerationSeconds`` of the matching ones.

    Args:
        tolerations: The pod's other tolerations (``v1.Toleration`` dicts), kept as they are and first.
        toleration_s: Seconds, >= 0; None: add none (the cluster's defaults apply).
    Returns:
        A new list.
    """
    out = [dict(t) for t in tolerations]
    if toleration_s is None:
        return out
    for taint in NODE_LOSS_TAINTS:
        if not any(t.get("key", "") in ("", taint) and t.get("effect", "") in ("", "NoExecute") for t in tolerations):
            out.append({"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": toleration_s})
    return out


def build_deployment(spec: IsvcSpec, replicas: int, repo_files: dict[str, str],
                     user_cm_keys: list[str] | None = None,
                     node_loss_toleration_s: int | None = None, pool: Pool | None = None) -> dict[str, Any]:
    """The Deployment running ``tritonserver`` for ``spec``.

    Args:
        replicas: ``spec.replicas`` to write (the scaling decision; never None).
        repo_files: The generated repository (BuiltIn source), mounted from the ConfigMap.
        user_cm_keys: Keys of the user's ConfigMap (ConfigMap source), ``__`` standing for ``/``.
        node_loss_toleration_s: Seconds the pods stay on a lost node (:func:`node_loss_tolerations`); None: the
            cluster's default (the planner passes ``PlanConfig.node_loss_toleration_s``).
    """
    pool = pool or front_pool(spec)
    volumes, mounts, repo_arg = _model_volume(spec, repo_files, user_cm_keys or [], pool.configmap)
    volumes.append({"name": "tmp", "emptyDir": {}})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    threads = spec.runtime.intra_op_threads
    resources: dict[str, Any] = {
        "requests": {"cpu": spec.resources.cpu, "memory": spec.resources.memory},
        "limits": {"memory": spec.resources.memory},
    }
    node_selector: dict[str, str] = dict(spec.placement.node_selector)
    tolerations: list[dict[str, Any]] = [dict(t) for t in spec.placement.tolerations]
    if spec.resources.gpu_count > 0:
        resources["requests"][GPU_RESOURCE] = str(spec.resources.gpu_count)
        resources["limits"][GPU_RESOURCE] = str(spec.resources.gpu_count)
        node_selector[GPU_PRODUCT_LABEL] = str(spec.resources.gpu_type)
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    else:
        # A CPU replica gets exactly its request (CFS quota): each replica adds a fixed slice of compute.
        resources["limits"]["cpu"] = spec.resources.cpu
    args = [
        f"--model-repository={repo_arg}", f"--http-port={HTTP_PORT}", f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}", "--allow-metrics=true", "--strict-readiness=true",
        f"--exit-timeout-secs={DRAIN_S}",
        # Latency quantiles (nv_inference_request_summary_us) for the autoscaler's p95 and the dashboard.
        "--metrics-config=summary_latencies=true",
    ]
    if spec.runtime.response_cache:
        args.append(f"--cache-config=local,size={RESPONSE_CACHE_BYTES}")  # as runtime serve sizes it
    container = {
        "name": "triton",
        "image": spec.image,
        "command": ["tritonserver"],
        "args": args,
        "env": [{"name": "OMP_NUM_THREADS", "value": str(threads)},
                {"name": "HF_HUB_OFFLINE", "value": "1"}],
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
                  {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        **_probes(spec, pool.ready_model),
        "startupProbe": STARTUP_PROBE,
        **({"lifecycle": _prestop_drain()} if spec.model.source == "BuiltIn" else {}),
        "resources": resources,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": mounts,
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 1000,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,  # see the gateway's pod spec
    }
    tolerations = node_loss_tolerations(tolerations, node_loss_toleration_s)
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    # The user's account (workload identity for a model in object storage) and pull Secrets (a private registry);
    # the API token stays unmounted: the identity webhooks (IRSA, Azure) project their own token.
    if spec.service_account_name:
        pod_spec["serviceAccountName"] = spec.service_account_name
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in spec.image_pull_secrets]
    template: dict[str, Any] = {"metadata": {"labels": {**pool.labels, **pool.pod_labels}}, "spec": pod_spec}
    annotations = dict(pool.pod_annotations)
    if spec.model.source == "BuiltIn" and repo_files:
        annotations[MODEL_REPOSITORY_HASH_ANNOTATION] = content_hash(repo_files)
    if annotations:
        template["metadata"]["annotations"] = annotations
    meta = _pool_meta(spec, pool)
    if pool.record_replicas:
        meta["annotations"] = {REPLICAS_ANNOTATION: str(replicas)}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(pool.selector)},
            # Never drop below the ready replicas during a rollout: surge one, take none away.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "revisionHistoryLimit": 5,
            "template": template,
        },
    }


def _probes(spec: IsvcSpec, model: str) -> dict[str, Any]:
    """Readiness (of ``model``) and liveness of the Triton container.

    The BuiltIn runtime image runs ``modalscale.runtime.health`` (exec): besides Triton's answer (the model's ready
    endpoint; ``/v2/health/live``) it fails while a Python-backend stub of tritonserver is dead, which Triton
    itself never reports (a stub killed by the OOM killer: Triton keeps saying ready while every request to that
    model fails), so the pod leaves the Service and the kubelet restarts the container. It runs in the replica's
    CPU quota (about 40 ms of CPU a run), hence the timeouts. A user's own Triton image may have neither Python
    nor modalscale: it gets Triton's endpoints over HTTP.
    """
    if spec.model.source == "BuiltIn":
        check = ["python3", "-m", "modalscale.runtime.health", f"--http-port={HTTP_PORT}"]
        readiness: dict[str, Any] = {"exec": {"command": [*check, f"--model={model}"]}}
        liveness: dict[str, Any] = {"exec": {"command": check}}
    else:
        readiness = {"httpGet": {"path": f"/v2/models/{model}/ready", "port": "http"}}
        liveness = {"httpGet": {"path": "/v2/health/live", "port": "http"}}
    return {"readinessProbe": {**readiness, "periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 5},
            "livenessProbe": {**liveness, "periodSeconds": 10, "failureThreshold": 6, "timeoutSeconds": 5}}


def _prestop_drain() -> dict[str, Any]:
    """The preStop hook of the BuiltIn runtime image (which has Python and modalscale; a user's own Triton image
    may have neither, so other model sources get Triton's own drain only)."""
    return {"preStop": {"exec": {"command": [
        "python3", "-m", "modalscale.runtime.drain", f"--metrics-url=http://127.0.0.1:{METRICS_PORT}/metrics",
        f"--timeout-s={PRESTOP_DRAIN_S}", f"--quiet-s={PRESTOP_QUIET_S}"]}}}


def build_service(spec: IsvcSpec) -> dict[str, Any]:
    """The ClusterIP Service in front of the Triton pods (HTTP, gRPC, metrics)."""
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": _meta(spec, spec.name),
        "spec": {
            "type": "ClusterIP",
            "selector": {SELECTOR_LABEL: spec.name},
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                      {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
                      {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}],
        },
    }


def build_image_encoder_configmap(spec: IsvcSpec, files: dict[str, str]) -> dict[str, Any]:
    """The ConfigMap ``<name>-image-encoder-model-repo``: the encoder pool's generated repository (``files``)."""
    cm = build_configmap(spec, files)
    cm["metadata"] = _pool_meta(spec, image_encoder_pool(spec), image_encoder_configmap_name(spec))
    return cm


def build_image_encoder_deployment(spec: IsvcSpec, replicas: int, files: dict[str, str],
                                   node_loss_toleration_s: int | None = None) -> dict[str, Any]:
    """The Deployment ``<name>-image-encoder``: :func:`build_deployment` of :func:`image_encoder_spec` for
    :func:`image_encoder_pool` (its own resources, runtime knobs, labels, selector and repository)."""
    return build_deployment(image_encoder_spec(spec), replicas, files, None, node_loss_toleration_s,
                            image_encoder_pool(spec))


def build_image_encoder_service(spec: IsvcSpec) -> dict[str, Any]:
    """The ClusterIP Service ``<name>-image-encoder`` of the encoder pool (same ports as :func:`build_service`); the
    front pool calls its gRPC port at its ClusterIP (``status.stages[image-encoder].address``)."""
    svc = build_service(spec)
    svc["metadata"] = _pool_meta(spec, image_encoder_pool(spec))
    svc["spec"]["selector"] = {IMAGE_ENCODER_LABEL: spec.name}
    return svc


def build_image_encoder_pdb(spec: IsvcSpec) -> dict[str, Any]:
    """``<name>-image-encoder``: at most one encoder replica evicted at a time, as :func:`build_pdb` for the front."""
    pdb = build_pdb(spec)
    pdb["metadata"] = _pool_meta(spec, image_encoder_pool(spec))
    pdb["spec"]["selector"] = {"matchLabels": {IMAGE_ENCODER_LABEL: spec.name}}
    return pdb


def build_image_encoder_network_policy(spec: IsvcSpec, scraper_labels: dict[str, str]) -> dict[str, Any]:
    """``<name>-image-encoder``: only this InferenceService's front pods reach the encoder pool's gRPC port (the
    one port :mod:`modalscale.runtime.model.encoder_client` calls), and only the metrics scraper its metrics port;
    nothing else reaches the pool, whose replicas decode whatever image bytes they are sent.

    Front pods are told by :data:`SELECTOR_LABEL` (the gateway pods and the encoder pods never carry it). Like
    :func:`build_network_policy`, it takes effect only where the cluster's network plugin enforces NetworkPolicy.

    Args:
        scraper_labels: Pod labels of the metrics scraper (any namespace).
    """
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": _pool_meta(spec, image_encoder_pool(spec)),
        "spec": {
            "podSelector": {"matchLabels": {IMAGE_ENCODER_LABEL: spec.name}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {SELECTOR_LABEL: spec.name}}}],
                 "ports": [{"protocol": "TCP", "port": GRPC_PORT}]},
                {"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": dict(scraper_labels)}}],
                 "ports": [{"protocol": "TCP", "port": METRICS_PORT}]},
            ],
        },
    }


def image_encoder_address(service: dict[str, Any] | None) -> str | None:
    """``<ClusterIP>:<gRPC port>`` of the observed encoder Service, None until the API server gave it one.

    Why the ClusterIP and not ``<name>-image-encoder.<ns>.svc``: the local cluster's real node runs its kubelet with
    ``clusterDNS: []`` (no cluster DNS), so a Service name does not resolve inside a pod there, while a ClusterIP is
    reached through kube-proxy on every cluster. It is fixed for the Service's life; if the Service is deleted and
    made again, the new address reaches the front pods by a rollout (:data:`IMAGE_ENCODER_ADDRESS_ANNOTATION`).
    Service link variables (``<NAME>_SERVICE_HOST``) need no DNS either, but only reach pods started after the Service
    and cannot reach a repository file, which is where the runtime reads the address.
    """
    ip = ((service or {}).get("spec") or {}).get("clusterIP")
    if not ip or ip == "None":
        return None
    return f"[{ip}]:{GRPC_PORT}" if ":" in ip else f"{ip}:{GRPC_PORT}"


def service_url(spec: IsvcSpec) -> str:
    """Cluster DNS URL of the HTTP endpoint."""
    return f"http://{spec.name}.{spec.namespace}.svc.cluster.local:{HTTP_PORT}"


def content_hash(obj: Any) -> str:
    """Short stable hash of a JSON-able value: the first 12 hex digits of the SHA-256 of its JSON with sorted keys
    (:data:`MODEL_REPOSITORY_HASH_ANNOTATION`)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------- the gateway
GATEWAY_LABEL = "modalscale.io/gateway"
"""Pod label that selects the gateway pods of one InferenceService (its value: the InferenceService's name). The
gateway pods never carry :data:`SELECTOR_LABEL`: the replicas' Deployment, their PodMonitor and the budget
ledger select on that one."""
GATEWAY_HTTP_PORT, GATEWAY_GRPC_PORT, GATEWAY_METRICS_PORT = 8000, 8001, 9090
"""Container ports of ``modalscale gateway`` (the defaults of its port variables)."""
GATEWAY_READY_PATH, GATEWAY_LIVE_PATH = "/readyz", "/healthz"
"""Served by ``modalscale gateway`` on its metrics port (:mod:`modalscale.gateway.server`): ``/readyz`` 200 while it
takes requests (also at zero replicas, where it holds them), 503 from SIGTERM on, so endpoints drop it before its
listeners close; ``/healthz`` 200 while the process serves."""
GATEWAY_UID = 10001
"""The operator image's user (Dockerfile.operator ``USER 10001``), at least 10000 so it maps to no host user."""
SERVICE_ACCOUNT_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def gateway_name(spec: IsvcSpec) -> str:
    """``<name>-gateway``: the gateway's Deployment, ServiceAccount, Role, RoleBinding and PodDisruptionBudget."""
    return f"{spec.name}-gateway"


def replicas_service_name(spec: IsvcSpec) -> str:
    """``<name>-replicas``: the Service of the replicas behind the gateway (its EndpointSlices are what the
    gateway watches, label ``kubernetes.io/service-name=<name>-replicas``)."""
    return f"{spec.name}{REPLICAS_SERVICE_SUFFIX}"


def gateway_labels(spec: IsvcSpec) -> dict[str, str]:
    """The labels the operator owns on the gateway's objects and pods."""
    return {
        "app.kubernetes.io/name": "modalscale-gateway",
        INSTANCE_LABEL: spec.name,
        "app.kubernetes.io/component": "gateway",
        "app.kubernetes.io/part-of": "modalscale",
        MANAGED_BY_LABEL: MANAGED_BY,
        GATEWAY_LABEL: spec.name,
    }


def _gateway_meta(spec: IsvcSpec, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": spec.namespace, "labels": gateway_labels(spec),
            "ownerReferences": [owner_reference(spec)]}


GATEWAY_SHUTDOWN_DELAY_S = 5
"""After SIGTERM, seconds a gateway pod keeps taking requests while its endpoints go (``MODALSCALE_GATEWAY_
SHUTDOWN_DELAY_S``, the gateway's own default)."""
GATEWAY_TEARDOWN_MARGIN_S = 5
"""Seconds of a gateway pod's grace period left after its drain, for closing its watch, probes and sessions."""


def gateway_termination_grace_s(spec: IsvcSpec) -> int:
    """The gateway pods' ``terminationGracePeriodSeconds``: the queue timeout (at most 300 s) + 15 s, so that
    requests admitted before SIGTERM finish within it."""
    return min(spec.gateway.queue_timeout_s, 300) + 15


def gateway_drain_timeout_s(spec: IsvcSpec) -> int:
    """``MODALSCALE_GATEWAY_DRAIN_TIMEOUT_S``: how long a stopping gateway lets in-flight and queued requests finish,
    seconds: its grace period less the shutdown delay and :data:`GATEWAY_TEARDOWN_MARGIN_S`. Left at the gateway's
    30 s default, a request still answered 35 s after SIGTERM was cut at every gateway rollout, with most of the
    grace period unused."""
    return gateway_termination_grace_s(spec) - GATEWAY_SHUTDOWN_DELAY_S - GATEWAY_TEARDOWN_MARGIN_S


def gateway_env(spec: IsvcSpec) -> list[dict[str, str]]:
    """The variables ``modalscale gateway`` reads from its environment (/work/notes/gateway-interface.md)."""
    gw = spec.gateway
    values = {
        "MODALSCALE_GATEWAY_NAMESPACE": spec.namespace,
        "MODALSCALE_GATEWAY_SERVICE": spec.name,
        "MODALSCALE_GATEWAY_REPLICAS_SERVICE": replicas_service_name(spec),
        "MODALSCALE_GATEWAY_HTTP_PORT": str(GATEWAY_HTTP_PORT),
        "MODALSCALE_GATEWAY_GRPC_PORT": str(GATEWAY_GRPC_PORT),
        "MODALSCALE_GATEWAY_METRICS_PORT": str(GATEWAY_METRICS_PORT),
        "MODALSCALE_GATEWAY_MAX_INFLIGHT": str(gw.max_in_flight),
        "MODALSCALE_GATEWAY_QUEUE_SIZE": str(gw.queue_size),
        "MODALSCALE_GATEWAY_QUEUE_TIMEOUT_S": str(gw.queue_timeout_s),
        "MODALSCALE_GATEWAY_SHUTDOWN_DELAY_S": str(GATEWAY_SHUTDOWN_DELAY_S),
        "MODALSCALE_GATEWAY_DRAIN_TIMEOUT_S": str(gateway_drain_timeout_s(spec)),
        "MODALSCALE_GATEWAY_MAX_BODY_BYTES": str(gw.max_body_bytes),
        "MODALSCALE_GATEWAY_TENANT_HEADER": gw.tenant_header,
        "MODALSCALE_GATEWAY_IMAGES_INPUT": spec.model.inputs.images,
        "MODALSCALE_GATEWAY_TEXT_INPUT": spec.model.inputs.text,
    }
    return [{"name": k, "value": v} for k, v in values.items()]


def build_gateway_deployment(spec: IsvcSpec, image: str, node_loss_toleration_s: int | None = None,
                             pull_secrets: tuple[str, ...] = ()) -> dict[str, Any]:
    """The Deployment ``<name>-gateway`` running ``modalscale gateway`` from the operator's ``image``.

    ``spec.gateway.replicas`` pods, spread over nodes, placed by the user's ``spec.placement`` (node selector and
    tolerations: where this service's pods may run, e.g. a tainted node pool) but never by a budget's Spot switch
    (the gateway holds the requests of every replica: it stays on-demand) nor by the replicas' GPU selector; the
    API credentials are mounted explicitly (the projected volume the ServiceAccount admission plugin would add, as
    the chart does for the operator), so the gateway can watch EndpointSlices also where that plugin is off.
    ``node_loss_toleration_s``: as in :func:`build_deployment`. ``pull_secrets``: the pods' ``imagePullSecrets``
    (Secret names in the service's namespace; the operator's ``MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS``).
    """
    gw = spec.gateway
    labels = gateway_labels(spec)
    ready_get = {"httpGet": {"path": GATEWAY_READY_PATH, "port": "metrics"}, "timeoutSeconds": 2}
    live_get = {"httpGet": {"path": GATEWAY_LIVE_PATH, "port": "metrics"}, "timeoutSeconds": 2}
    container = {
        "name": "gateway",
        "image": image,
        "command": ["modalscale", "gateway"],
        "env": gateway_env(spec),
        "ports": [{"name": "http", "containerPort": GATEWAY_HTTP_PORT, "protocol": "TCP"},
                  {"name": "grpc", "containerPort": GATEWAY_GRPC_PORT, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": GATEWAY_METRICS_PORT, "protocol": "TCP"}],
        "readinessProbe": {**ready_get, "periodSeconds": 2, "failureThreshold": 2},
        "livenessProbe": {**live_get, "periodSeconds": 10, "failureThreshold": 6},
        "resources": {"requests": {"cpu": gw.cpu, "memory": gw.memory}, "limits": {"memory": gw.memory}},
        "securityContext": {"runAsNonRoot": True, "runAsUser": GATEWAY_UID, "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                         {"name": "kube-api-access", "mountPath": SERVICE_ACCOUNT_TOKEN_PATH, "readOnly": True}],
    }
    token = {"projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}
    pod_spec: dict[str, Any] = {
        "serviceAccountName": gateway_name(spec),
        "automountServiceAccountToken": False,
        # No Docker-link variables of the namespace's Services: an InferenceService named modalscale-gateway has a
        # Service whose link variables are named like the gateway's settings, which the gateway refuses as unknown
        # settings: every gateway pod of the namespace crash-looped.
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}, {"name": "kube-api-access", **token}],
        # In-flight requests finish within the queue timeout (the gateway's drain: gateway_drain_timeout_s); the
        # gateway stops taking new ones on SIGTERM.
        "terminationGracePeriodSeconds": gateway_termination_grace_s(spec),
        "securityContext": {"runAsNonRoot": True, "runAsUser": GATEWAY_UID, "runAsGroup": GATEWAY_UID,
                            "fsGroup": GATEWAY_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                               "labelSelector": {"matchLabels": {GATEWAY_LABEL: spec.name}}}}]}},
    }
    node_selector = {k: v for k, v in spec.placement.node_selector.items() if k not in SPOT_NODE_SELECTOR}
    tolerations = node_loss_tolerations([dict(t) for t in spec.placement.tolerations if t != SPOT_TOLERATION],
                                        node_loss_toleration_s)
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _gateway_meta(spec, gateway_name(spec)),
        "spec": {
            "replicas": gw.replicas,
            "selector": {"matchLabels": {GATEWAY_LABEL: spec.name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "revisionHistoryLimit": 5,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def build_gateway_service(spec: IsvcSpec) -> dict[str, Any]:
    """The Service ``<name>`` with the gateway on: same ports as :func:`build_service`, selecting the gateway pods."""
    svc = build_service(spec)
    svc["spec"]["selector"] = {GATEWAY_LABEL: spec.name}
    return svc


def build_replicas_service(spec: IsvcSpec) -> dict[str, Any]:
    """The Service ``<name>-replicas`` selecting the replicas (what :func:`build_service` is without the gateway)."""
    svc = build_service(spec)
    svc["metadata"]["name"] = replicas_service_name(spec)
    return svc


def build_gateway_service_account(spec: IsvcSpec) -> dict[str, Any]:
    """The gateway pods' ServiceAccount (its token is mounted by the Deployment's projected volume only)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _gateway_meta(spec, gateway_name(spec)),
            "automountServiceAccountToken": False}


def build_gateway_role(spec: IsvcSpec) -> dict[str, Any]:
    """What the gateway calls: watch the EndpointSlices of the namespace (list/watch cannot be narrowed to one
    name), read, watch and annotate its own InferenceService only (the activation request; the watch reads the
    budget's tenant rejections, with a ``metadata.name`` field selector, which ``resourceNames`` requires)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": _gateway_meta(spec, gateway_name(spec)),
        "rules": [
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [GROUP], "resources": ["inferenceservices"], "resourceNames": [spec.name],
             "verbs": ["get", "list", "watch", "patch"]},
        ],
    }


def build_gateway_role_binding(spec: IsvcSpec) -> dict[str, Any]:
    """Binds :func:`build_gateway_role` to the gateway's ServiceAccount."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": _gateway_meta(spec, gateway_name(spec)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": gateway_name(spec)},
        "subjects": [{"kind": "ServiceAccount", "name": gateway_name(spec), "namespace": spec.namespace}],
    }


def build_pdb(spec: IsvcSpec) -> dict[str, Any]:
    """``<name>``: at most one replica evicted at a time (``kubectl drain``, a node upgrade, the cluster
    autoscaler), so a service of 2 or more replicas keeps a Ready one while the evicted one's replacement starts
    (without it a drain evicts every replica on the node at once: issue 21's chaos scenario 1 saw 0 Ready).

    ``maxUnavailable: 1``, not ``minAvailable``: a single replica can still be evicted, so a drain never waits
    forever (the gateway holds its requests meanwhile, as at zero replicas); ``unhealthyPodEvictionPolicy:
    AlwaysAllow``: a replica that is not Ready (crash-looping, starting) serves nothing and never blocks a drain.
    """
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(spec, spec.name),
        "spec": {"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow",
                 "selector": {"matchLabels": {SELECTOR_LABEL: spec.name}}},
    }


def build_gateway_pdb(spec: IsvcSpec) -> dict[str, Any]:
    """At most one gateway pod evicted at a time (``maxUnavailable: 1``, so a single replica still drains)."""
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": _gateway_meta(spec, gateway_name(spec)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {GATEWAY_LABEL: spec.name}}},
    }


def build_network_policy(spec: IsvcSpec, scraper_labels: dict[str, str]) -> dict[str, Any]:
    """Only the gateway reaches the replicas' serving ports, and only the metrics scraper their metrics port.

    Args:
        scraper_labels: Pod labels of the metrics scraper (any namespace), e.g. ``app.kubernetes.io/name:
            prometheus``, the label the Prometheus Operator puts on its Prometheus pods.
    """
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": _meta(spec, replicas_service_name(spec)),
        "spec": {
            "podSelector": {"matchLabels": {SELECTOR_LABEL: spec.name}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {GATEWAY_LABEL: spec.name}}}],
                 "ports": [{"protocol": "TCP", "port": HTTP_PORT}, {"protocol": "TCP", "port": GRPC_PORT}]},
                {"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": dict(scraper_labels)}}],
                 "ports": [{"protocol": "TCP", "port": METRICS_PORT}]},
            ],
        },
    }


def gateway_children(spec: IsvcSpec, image: str, scraper_labels: dict[str, str],
                     node_loss_toleration_s: int | None = None, pull_secrets: tuple[str, ...] = ()
                     ) -> list[dict[str, Any]]:
    """Every object the gateway adds, in creation order (RBAC before the pods that use it)."""
    return [build_gateway_service_account(spec), build_gateway_role(spec), build_gateway_role_binding(spec),
            build_replicas_service(spec), build_network_policy(spec, scraper_labels), build_gateway_pdb(spec),
            build_gateway_deployment(spec, image, node_loss_toleration_s, pull_secrets)]
