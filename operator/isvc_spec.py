"""Parse and validate an InferenceService body into typed values (camelCase -> snake_case happens here only).

The CRD schema rejects what it can; this module reports the rest with an error naming the field and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from modalscale.api.errors import InvalidSpec
from modalscale.api.quantities import InvalidQuantity, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class ModelSpec:
    source: str
    name: str
    config_map: str | None = None
    pvc_claim: str | None = None
    pvc_sub_path: str = ""
    image_reference: str | None = None
    image_path: str = "/models"
    uri: str | None = None
    cost_model_config_map: str | None = None
    cost_model_key: str = "model.skops"


@dataclass(frozen=True)
class ScalingSpec:
    mode: str
    replicas: int | None
    min_replicas: int
    max_replicas: int
    target_p95_latency_ms: int
    target_utilization_percent: int
    tolerance_percent: int
    scale_up_stabilization_s: int
    scale_down_stabilization_s: int
    max_step_replicas: int
    decision_interval_s: int


@dataclass(frozen=True)
class ResourceSpec:
    cpu: str
    memory: str
    gpu_count: int
    gpu_type: str | None


@dataclass(frozen=True)
class PlacementSpec:
    """``spec.placement``: merged into the pods' spec (a GPU service adds its GPU product selector)."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()


TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")


@dataclass(frozen=True)
class IsvcSpec:
    """An InferenceService as the planner sees it."""

    namespace: str
    name: str
    uid: str
    generation: int
    labels: dict[str, str]
    model: ModelSpec
    runtime: dict[str, Any]
    """``spec.runtime`` as given (defaults applied by the apiserver); read by ``modalscale.runtime``."""
    image: str
    resources: ResourceSpec
    scaling: ScalingSpec
    pricing_tier: str
    priority: int
    raw_spec: dict[str, Any]
    """The whole ``spec`` as read (apiserver defaults applied), for ``modalscale.runtime``."""
    placement: PlacementSpec = field(default_factory=PlacementSpec)
    """Node selector and tolerations of the pods (``spec.placement``)."""


def _get(d: dict[str, Any], key: str, default: Any) -> Any:
    value = d.get(key)
    return default if value is None else value


def _int(d: dict[str, Any], key: str, default: int, field: str, lo: int, hi: int) -> int:
    value = _get(d, key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidSpec(f"{field}.{key}", f"must be a whole number in [{lo}, {hi}], got {value!r}")
    return value


def _resource(value: Any, field: str) -> str:
    """``value`` as the quantity text the Deployment gets, once :func:`parse_quantity` accepts it."""
    try:
        parse_quantity(value, field)
    except InvalidQuantity as exc:
        raise InvalidSpec(field, exc.message) from None
    return str(value)


def parse_isvc(body: dict[str, Any]) -> IsvcSpec:
    """Return the typed spec of an InferenceService ``body`` (a dict as read from the API).

    Raises:
        InvalidSpec: A field the schema could not check is wrong; the error names it and the fix.
    """
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    model = spec.get("model") or {}
    source = _get(model, "source", "BuiltIn")
    if source not in ("BuiltIn", "ConfigMap", "PVC", "Image", "URI"):
        raise InvalidSpec("spec.model.source", f"unknown source {source!r}; use BuiltIn, ConfigMap, PVC, Image or URI")
    cost_ref = model.get("costModelRef") or {}
    model_spec = ModelSpec(
        source=source,
        name=_get(model, "name", "multimodal"),
        config_map=(model.get("configMap") or {}).get("name"),
        pvc_claim=(model.get("pvc") or {}).get("claimName"),
        pvc_sub_path=_get(model.get("pvc") or {}, "subPath", ""),
        image_reference=(model.get("image") or {}).get("reference"),
        image_path=_get(model.get("image") or {}, "path", "/models"),
        uri=model.get("uri"),
        cost_model_config_map=cost_ref.get("name"),
        cost_model_key=_get(cost_ref, "key", "model.skops"),
    )
    needed = {"ConfigMap": model_spec.config_map, "PVC": model_spec.pvc_claim, "Image": model_spec.image_reference,
              "URI": model_spec.uri}
    if source in needed and not needed[source]:
        key = {"ConfigMap": "configMap.name", "PVC": "pvc.claimName", "Image": "image.reference", "URI": "uri"}[source]
        raise InvalidSpec(f"spec.model.{key}", f"required when spec.model.source is {source}")

    runtime = dict(spec.get("runtime") or {})
    image = f"{_get(runtime, 'image', 'nvcr.io/nvidia/tritonserver')}:{_get(runtime, 'version', '24.10-py3')}"

    res = spec.get("resources") or {}
    gpu = res.get("gpu") or {}
    gpu_count = _int(gpu, "count", 0, "spec.resources.gpu", 0, 16)
    gpu_type = gpu.get("type")
    if gpu_count > 0 and not gpu_type:
        raise InvalidSpec("spec.resources.gpu.type", "required when spec.resources.gpu.count > 0 (e.g. nvidia-l4)")
    resources = ResourceSpec(
        cpu=_resource(_get(res, "cpu", "2"), "spec.resources.cpu"),
        memory=_resource(_get(res, "memory", "8Gi"), "spec.resources.memory"),
        gpu_count=gpu_count,
        gpu_type=gpu_type,
    )

    sc = spec.get("scaling") or {}
    mode = _get(sc, "mode", "Predictive")
    if mode not in ("Predictive", "Utilization", "Fixed"):
        raise InvalidSpec("spec.scaling.mode", f"unknown mode {mode!r}; use Predictive, Utilization or Fixed")
    replicas = sc.get("replicas")
    if replicas is not None:
        replicas = _int(sc, "replicas", 0, "spec.scaling", 0, 1000)
    scaling = ScalingSpec(
        mode=mode,
        replicas=replicas,
        min_replicas=_int(sc, "minReplicas", 1, "spec.scaling", 0, 1000),
        max_replicas=_int(sc, "maxReplicas", 10, "spec.scaling", 1, 1000),
        target_p95_latency_ms=_int(sc, "targetP95LatencyMilliseconds", 500, "spec.scaling", 1, 600000),
        target_utilization_percent=_int(sc, "targetUtilizationPercent", 70, "spec.scaling", 1, 100),
        tolerance_percent=_int(sc, "tolerancePercent", 10, "spec.scaling", 0, 50),
        scale_up_stabilization_s=_int(sc, "scaleUpStabilizationSeconds", 0, "spec.scaling", 0, 3600),
        scale_down_stabilization_s=_int(sc, "scaleDownStabilizationSeconds", 300, "spec.scaling", 0, 3600),
        max_step_replicas=_int(sc, "maxStepReplicas", 4, "spec.scaling", 1, 1000),
        decision_interval_s=_int(sc, "decisionIntervalSeconds", 15, "spec.scaling", 5, 3600),
    )
    if scaling.min_replicas > scaling.max_replicas:
        raise InvalidSpec("spec.scaling.minReplicas", "must be <= spec.scaling.maxReplicas")
    if mode == "Fixed" and replicas is None:
        raise InvalidSpec("spec.scaling.replicas", "required when spec.scaling.mode is Fixed")

    return IsvcSpec(
        placement=_placement(spec.get("placement") or {}),
        namespace=meta.get("namespace", "default"),
        name=meta["name"],
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation", 0) or 0),
        labels=dict(meta.get("labels") or {}),
        model=model_spec,
        runtime=runtime,
        image=image,
        resources=resources,
        scaling=scaling,
        pricing_tier=_get(spec.get("pricing") or {}, "tier", "OnDemand"),
        priority=_int(spec, "priority", 100, "spec", 0, 1000),
        raw_spec=spec,
    )


def _placement(placement: dict[str, Any]) -> PlacementSpec:
    """Typed ``spec.placement``; raises InvalidSpec naming the field when the schema could not check it."""
    selector = placement.get("nodeSelector") or {}
    if not isinstance(selector, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in selector.items()):
        raise InvalidSpec("spec.placement.nodeSelector", "must map label names to string values")
    tolerations = placement.get("tolerations") or []
    out = []
    for i, tol in enumerate(tolerations if isinstance(tolerations, list) else [None]):
        if not isinstance(tol, dict) or set(tol) - set(TOLERATION_KEYS):
            raise InvalidSpec(f"spec.placement.tolerations[{i}]",
                              f"must be a toleration with only {', '.join(TOLERATION_KEYS)}")
        out.append(dict(tol))
    return PlacementSpec(node_selector=dict(selector), tolerations=tuple(out))
