"""The typed ``inferenceservices.modalscale.io`` spec, parsed once (camelCase -> snake_case happens here only).

Why a module: the operator's planner, the autoscaler's ``ScalingPolicy`` and the runtime's ``RuntimeConfig`` each
read the same ``spec`` dict and re-applied its defaults and bounds, and they drifted apart (a Fixed-mode replica
count outside ``[minReplicas, maxReplicas]`` was refused by one reader only; unknown fields by another; an explicit
``null`` crashed a third). Here the spec is read once into frozen pieces (:class:`ModelSpec`, :class:`RuntimeSpec`,
:class:`ResourceSpec`, :class:`ScalingSpec`, :class:`PlacementSpec`) that every consumer takes.

The rules are the CRD's (``crds/inferenceservices.modalscale.io.yaml``), so an object the apiserver admitted
parses, and a manifest read from a file (``modalscale cost diff``, ``modalscale runtime render --from-isvc``) is
held to what the apiserver would hold it to:

- defaults as the CRD's ``default``; an explicit ``null`` is the default (the apiserver prunes nulls before
  defaulting);
- integer ranges, enums and string patterns as the schema's;
- the CEL rules: ``minReplicas <= maxReplicas``, Fixed mode needs ``replicas`` within ``[minReplicas,
  maxReplicas]``, Utilization and Predictive need ``minReplicas >= 1`` unless ``spec.gateway.enabled`` (only the
  gateway holds requests at 0 replicas and activates one), ``scaleToZeroAfterSeconds`` needs ``minReplicas: 0``
  outside Fixed mode,
  CPU and memory above 0, a model source needs its object, a GPU count needs a type and a GPU type a count of at
  least 1 (an unset count is 0: no GPU), preferred batch sizes
  ascending and ``<= maxBatchSize``, engine ``openvino`` neither at precision FP16 nor with GPUs, and
  ``metadata.name`` a DNS-1035 label of at most 63 characters (it names the Service and is the pods' label value);
  with ``spec.stages``: model source BuiltIn, encoder ``minReplicas <= maxReplicas``, no encoder GPUs with engine
  openvino, and a name of at most 49 characters (the encoder pool's Service is ``<name>-image-encoder``);
- ``spec.serviceAccountName`` and each ``spec.imagePullSecrets[].name`` a DNS-1123 subdomain of at most 253
  characters (:data:`~modalscale.api.names.DNS_SUBDOMAIN_PATTERN`), each Secret listed once (a list-map);
- unknown fields are refused, as the apiserver's strict field validation (kubectl's default) refuses them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from modalscale.api.errors import InvalidSpec
from modalscale.api.names import DNS_SUBDOMAIN_PATTERN
from modalscale.api.quantities import InvalidQuantity, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
"""Extended resource name of NVIDIA GPUs."""
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""Node label (GPU feature discovery's) a GPU replica's pod selects with its ``resources.gpu.type``: the type that
prices it."""
MODEL_SOURCES = ("BuiltIn", "ConfigMap", "PVC", "Image", "URI")
SCALING_MODES = ("Predictive", "Utilization", "Fixed")


@dataclass(frozen=True)
class ScalingModeDefaults:
    """What three ``spec.scaling`` fields are when unset, per ``spec.scaling.mode``."""

    target_utilization_percent: int
    """``targetUtilizationPercent``, percent."""
    scale_down_stabilization_s: int
    """``scaleDownStabilizationSeconds``, s."""
    max_step_replicas: int
    """``maxStepReplicas``, replicas per decision."""


SCALING_MODE_DEFAULTS: dict[str, ScalingModeDefaults] = {
    "Predictive": ScalingModeDefaults(target_utilization_percent=90, scale_down_stabilization_s=60,
                                      max_step_replicas=32),
    "Utilization": ScalingModeDefaults(target_utilization_percent=70, scale_down_stabilization_s=300,
                                       max_step_replicas=4),
    "Fixed": ScalingModeDefaults(target_utilization_percent=70, scale_down_stabilization_s=300, max_step_replicas=4),
}
"""Mode-dependent defaults (issue 20: "the defaults are what ships"). Utilization and Fixed keep the HPA's usual 70 %
target, its 300 s scale-down window (``behavior.scaleDown.stabilizationWindowSeconds``' default) and a step of 4.
Predictive gets the setting the Pareto benchmark measures (``benchmarks/autoscaler_pareto.py``): its p95 target is
the sizing rule and the utilization target only a bound (90 %), the peak forecast's 5-minute look-back is its
memory after a drop (a 60 s window, not 300 s; less the p95 target when unset: :func:`predictive_scale_down_window_s`),
and the observed-queue rule's drain may need many replicas at once (32). Measured on that benchmark's six traces,
3 seeds, 6 Dec 2026 (docs/benchmarks.md): at 70 %, 300 s and 4 the
predictive policy cost 1.09-1.51x the replica-hours of this setting, for 0-5 more SLO-minutes in the hour on Azure
and ServeGen, none on Mooncake and long-request, 1 fewer on the modality shift and on/off seed 1; at 90 %, 60 s and
4 only the shift's SLO-minutes moved (1-2 more minutes missed). The CRD sets no ``default`` on these fields so
that the operator can tell an unset field from a set one (an apiserver default would be stored in every object,
whatever its mode); ``tests/unit/test_crd_schema.py`` holds the CRD's descriptions to these values."""
START_UP_HORIZON_S = 60
"""A new replica's start-up time the Predictive policy plans for, s (``ScalingPolicy.forecast_horizon_s``): the
forecast looks that far ahead less the p95 target, and the unset scale-down window is what of it the target does
not absorb (:func:`predictive_scale_down_window_s`)."""


def predictive_scale_down_window_s(target_p95_latency_ms: int, decision_interval_s: int) -> int:
    """Predictive mode's ``scaleDownStabilizationSeconds`` when unset, s (pure): its 60 s
    (:data:`SCALING_MODE_DEFAULTS`) less the p95 target's whole seconds, the part of a new replica's
    :data:`START_UP_HORIZON_S` start-up a request cannot wait out, at least two decision intervals.

    The window holds a replica through a dip so that it is there if the demand comes back before a new one could
    start and serve. A request may wait the target, so a replica asked for again when the demand shows is in time
    if it starts within the target: only the start-up beyond the target needs the hold, as only that part needs a
    forecast (``modalscale.autoscaler.policy._forecast_need``). At least two decisions, so that a scale-down is
    taken on two readings in a row and the observed-queue rule, whose contradiction check spans two decisions, can
    see that one was early: with one decision's window (a 120 s target, long requests and a model predicting 5 ms,
    tests/unit/autoscaler/test_autoscaler_simulate.py) every dip went down at once and came back too late, 81.7 %
    SLO-minutes against 100 % at 30 s. Measured (``benchmarks/autoscaler_pareto.py``, 3 seeds, docs/benchmarks.md):
    long-request (80 s target: 30 s) 8.62 / 8.64 / 8.85 -> 8.28 / 8.34 / 8.61 replica-h (1.28 / 1.31 / 1.28 ->
    1.23 / 1.26 / 1.24x oracle), on/off (30 s target: 30 s) 2.75 / 2.70 / 2.48 -> 2.52 / 2.50 / 2.30 h, at the same
    SLO-minutes and burst counts; the traces with a 2-10 s target (a 50-58 s window holds the same 15 s decisions
    as 60 s) unchanged.
    """
    unabsorbed_s = START_UP_HORIZON_S - target_p95_latency_ms // 1000
    return max(2 * decision_interval_s,
               min(SCALING_MODE_DEFAULTS["Predictive"].scale_down_stabilization_s, unabsorbed_s))


PRECISIONS = ("FP32", "FP16", "BF16", "INT8")
ENGINES = ("torch", "openvino")
"""``spec.runtime.engine`` values (``modalscale.runtime.repo_config.Engine``; a unit test keeps them equal)."""
PRICING_TIERS = ("OnDemand", "Spot")
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")

KNOWN_FIELDS: dict[str, frozenset[str]] = {
    "spec": frozenset({"model", "runtime", "resources", "placement", "scaling", "pricing", "priority", "gateway",
                       "stages", "serviceAccountName", "imagePullSecrets"}),
    "spec.model": frozenset({"source", "name", "configMap", "pvc", "image", "uri", "costModelRef", "inputs"}),
    "spec.model.inputs": frozenset({"images", "text"}),
    "spec.model.configMap": frozenset({"name"}),
    "spec.model.pvc": frozenset({"claimName", "subPath"}),
    "spec.model.image": frozenset({"reference", "path"}),
    "spec.model.costModelRef": frozenset({"name", "key"}),
    "spec.runtime": frozenset({"image", "version", "instanceCount", "intraOpThreads", "maxBatchSize",
                               "dynamicBatching", "modalityAwareBatching", "responseCache", "embeddingCache",
                               "precision", "engine"}),
    "spec.runtime.dynamicBatching": frozenset({"enabled", "preferredBatchSizes", "maxQueueDelayMicroseconds"}),
    "spec.resources": frozenset({"cpu", "memory", "gpu"}),
    "spec.resources.gpu": frozenset({"count", "type"}),
    "spec.placement": frozenset({"nodeSelector", "tolerations"}),
    "spec.scaling": frozenset({"mode", "replicas", "minReplicas", "maxReplicas", "targetP95LatencyMilliseconds",
                               "targetUtilizationPercent", "tolerancePercent", "scaleUpStabilizationSeconds",
                               "scaleDownStabilizationSeconds", "maxStepReplicas", "decisionIntervalSeconds",
                               "scaleToZeroAfterSeconds"}),
    "spec.pricing": frozenset({"tier"}),
    "spec.gateway": frozenset({"enabled", "replicas", "maxInFlight", "queue", "maxBodyBytes", "tenantHeader",
                               "resources"}),
    "spec.gateway.queue": frozenset({"size", "timeoutSeconds"}),
    "spec.gateway.resources": frozenset({"cpu", "memory"}),
    "spec.stages": frozenset({"imageEncoder"}),
    "spec.stages.imageEncoder": frozenset({"minReplicas", "maxReplicas", "resources", "runtime"}),
    "spec.stages.imageEncoder.resources": frozenset({"cpu", "memory", "gpu"}),
    "spec.stages.imageEncoder.resources.gpu": frozenset({"count", "type"}),
    "spec.stages.imageEncoder.runtime": frozenset({"instanceCount", "intraOpThreads", "maxBatchSize",
                                                  "maxQueueDelayMicroseconds"}),
}
"""The properties of every object in the CRD's ``spec`` schema (a unit test holds this equal to the CRD)."""

_HOST = r"([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[a-fA-F0-9:]+\])"
_PATH_COMPONENT = r"[a-z0-9]+(([.]|_|__|-+)[a-z0-9]+)*"
_REPOSITORY = f"({_HOST}(:[0-9]+)?/)?{_PATH_COMPONENT}(/{_PATH_COMPONENT})*"
IMAGE_REPOSITORY_PATTERN = f"^{_REPOSITORY}$"
"""``spec.runtime.image``'s ``pattern`` in the CRD: an image repository without tag or digest, as the OCI distribution
reference grammar writes a name: an optional registry host (a DNS name, or an IPv6 address in brackets) with an
optional port and a ``/``, then lower-case path components (letters, digits, separated by ``.``, ``_``, ``__`` or
dashes) joined by ``/``. The container's image is ``<image>:<version>`` (:attr:`RuntimeSpec.image_ref`), so a tag or
digest here would be doubled."""
IMAGE_REPOSITORY_MAX_CHARS = 255
"""``spec.runtime.image``'s ``maxLength`` in the CRD: the distribution grammar's longest name."""
IMAGE_REFERENCE_PATTERN = (f"^{_REPOSITORY}(:[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                           f"(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{{32,}})?$")
"""``spec.model.image.reference``'s ``pattern`` in the CRD: a whole image reference, the repository
(:data:`IMAGE_REPOSITORY_PATTERN`) with an optional ``:tag`` and an optional ``@digest``."""
_IMAGE_REPOSITORY = re.compile(IMAGE_REPOSITORY_PATTERN)
_IMAGE_REFERENCE = re.compile(IMAGE_REFERENCE_PATTERN)
_MODEL_NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$")
_OBJECT_NAME = re.compile(DNS_SUBDOMAIN_PATTERN)
_VERSION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_GPU_TYPE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_CPU = re.compile(r"^([0-9]+(\.[0-9]+)?|[0-9]+m)$")
_MEMORY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_URI = re.compile(r"^(s3|gs|as)://.+")
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_TENSOR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_HEADER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DOTDOT_ELEMENT = re.compile(r"(^|/)\.\.(/|$)")
IMAGE_PULL_SECRETS_MAX_ITEMS = 16
"""Most ``spec.imagePullSecrets`` (the CRD's ``maxItems``)."""
"""A ``..`` element of a path: the API server refuses a volume mount's ``subPath`` with one (the CRD too)."""
GATEWAY_ENABLED_DEFAULT = True
"""``spec.gateway.enabled`` when unset: the gateway is in the path of every InferenceService (issue 19) unless its
spec says ``gateway: {enabled: false}`` (the direct Service). The CRD's CEL rule on ``spec`` reads an unset
``enabled`` as this value (``tests/unit/test_crd_gateway.py`` holds them together). The CRD sets no ``default`` on
the field on purpose: a default would be stored in every object written, and a later change of the default would
then not reach them."""
GATEWAY_CPU_DEFAULT = "100m"
"""``spec.gateway.resources.cpu`` when unset: one gateway pod's CPU request. The gateway costs about 0.6-0.8
CPU-ms per forwarded request (docs/gateway.md, ``benchmarks/gateway_overhead.py``), so 100m covers ~125 requests/s
per pod at its request (it has no CPU limit and bursts above it); 2 pods take 200m, not the 1000m of 500m each,
which left a small node (1500m allocatable on 2 cores) room for one 500m replica only."""
NAME_MAX_LENGTH = 63
"""Longest InferenceService name: it is the Service's name (a DNS-1035 label, at most 63 characters) and the
value of the pods' ``modalscale.io/inferenceservice`` label (at most 63); the other children append suffixes
to it (``<name>-model-repo``, a ConfigMap: a DNS-1123 subdomain of up to 253, so never the tighter limit)."""
NAME_RULE = (f"a DNS-1035 label of at most {NAME_MAX_LENGTH} characters (lower-case letters, digits and '-', "
             f"starting with a letter and ending with a letter or digit)")
"""What an InferenceService name must be, in words (the CRD's rule on ``metadata.name`` says the same)."""
IMAGE_ENCODER_SUFFIX = "-image-encoder"
"""Suffix of the image encoder pool's Deployment, Service and PodDisruptionBudget (``<name>-image-encoder``) in the
staged layout (``spec.stages``)."""
STAGED_NAME_MAX_LENGTH = NAME_MAX_LENGTH - len(IMAGE_ENCODER_SUFFIX)
"""Longest InferenceService name with ``spec.stages`` (49): the encoder pool's Service ``<name>-image-encoder`` must
be a DNS-1035 label of at most 63 characters too (the CRD's rule on ``spec.stages`` says the same)."""
REPLICAS_SERVICE_SUFFIX = "-replicas"
"""Suffix of the Service of the replicas behind the request gateway (``<name>-replicas``, ``spec.gateway.enabled``)."""
GATEWAY_NAME_MAX_LENGTH = NAME_MAX_LENGTH - len(REPLICAS_SERVICE_SUFFIX)
"""Longest InferenceService name with the gateway in its path (54, the default): the replicas' Service
``<name>-replicas`` must be a DNS-1035 label of at most 63 characters too (the CRD's rule on ``metadata.name`` and
``spec.gateway`` says the same). A longer name needs ``spec.gateway.enabled: false``."""


@dataclass(frozen=True)
class ModelInputsSpec:
    """``spec.model.inputs``: the KServe v2 input tensors the gateway reads features from (defaults: the built-in
    model's names)."""

    images: str = "IMAGES"
    """Input holding the encoded images (BYTES)."""
    text: str = "TEXT"
    """Input holding the prompt text (BYTES)."""


@dataclass(frozen=True)
class ModelSpec:
    """``spec.model``: where the Triton model repository comes from."""

    source: str
    """One of :data:`MODEL_SOURCES`."""
    name: str
    """Triton model name clients call (``spec.model.name``)."""
    config_map: str | None = None
    pvc_claim: str | None = None
    pvc_sub_path: str = ""
    image_reference: str | None = None
    image_path: str = "/models"
    uri: str | None = None
    cost_model_config_map: str | None = None
    """ConfigMap holding the service-time model artifact (``costModelRef.name``); None = none."""
    cost_model_key: str = "model.skops"
    inputs: ModelInputsSpec = field(default_factory=ModelInputsSpec)
    """Which inputs carry images and text (``spec.model.inputs``), for the gateway's per-request features."""


@dataclass(frozen=True)
class GatewaySpec:
    """``spec.gateway``: the request gateway (``modalscale gateway``) in front of the replicas (CRD defaults)."""

    enabled: bool = GATEWAY_ENABLED_DEFAULT
    """Whether the Service ``<name>`` reaches the gateway (True) or the replicas directly (False)."""
    replicas: int = 2
    """Gateway pods, 1..20 (2 for availability: a PodDisruptionBudget keeps one)."""
    max_in_flight: int = 1000
    """Requests the gateway forwards at once for this service, 1..100000; beyond it requests queue."""
    queue_size: int = 1000
    """Requests held waiting (at zero replicas or above ``max_in_flight``), 0..100000; beyond it 503."""
    queue_timeout_s: int = 120
    """Longest a request waits in the queue, seconds, 1..3600; then 503 with Retry-After."""
    max_body_bytes: int = 64 * 1024 * 1024
    """Largest request body accepted, bytes, 1024..1073741824; above it 400 (never forwarded)."""
    tenant_header: str = "x-modalscale-tenant"
    """Request header (lower case; gRPC metadata key) naming the tenant; absent = ``default``."""
    cpu: str = GATEWAY_CPU_DEFAULT
    """CPU request of one gateway pod (Kubernetes quantity)."""
    memory: str = "256Mi"
    """Memory request and limit of one gateway pod (Kubernetes quantity)."""


@dataclass(frozen=True)
class DynamicBatchingSpec:
    """``spec.runtime.dynamicBatching``."""

    enabled: bool = True
    preferred_batch_sizes: tuple[int, ...] = ()
    """Ascending, each in [1, ``max_batch_size``], in requests."""
    max_queue_delay_us: int = 2000
    """How long Triton may hold a request to form a batch, microseconds."""


@dataclass(frozen=True)
class RuntimeSpec:
    """``spec.runtime``: the Triton container and the generated model configuration (CRD defaults)."""

    image: str = "nvcr.io/nvidia/tritonserver"
    version: str = "24.10-py3"
    instance_count: int = 1
    """Model instances (Triton ``instance_group.count``) per replica, 1..16; the autoscaler's slots per replica."""
    intra_op_threads: int = 1
    """torch intra-op threads per instance, 1..64."""
    max_batch_size: int = 8
    """Triton ``max_batch_size`` in requests, 0..256 (0 disables batching)."""
    dynamic_batching: DynamicBatchingSpec = field(default_factory=DynamicBatchingSpec)
    modality_aware_batching: bool = True
    response_cache: bool = False
    embedding_cache: bool = True
    precision: str = "FP32"
    """One of :data:`PRECISIONS`."""
    engine: str = "torch"
    """One of :data:`ENGINES`: what runs the encoders on a CPU replica (``openvino``: not with FP16, not with GPUs)."""

    @property
    def image_ref(self) -> str:
        """``<image>:<version>`` of the runtime container."""
        return f"{self.image}:{self.version}"


@dataclass(frozen=True)
class ResourceSpec:
    """``spec.resources`` per replica."""

    cpu: str
    """CPU quantity as written (``"2"``, ``"500m"``), validated by :mod:`modalscale.api.quantities`."""
    memory: str
    """Memory quantity as written (``"8Gi"``)."""
    gpu_count: int
    """GPUs per replica, 0..16."""
    gpu_type: str | None
    """GPU product (``nvidia-l4``); required when ``gpu_count > 0``, and only then (None when 0)."""


@dataclass(frozen=True)
class ScalingSpec:
    """``spec.scaling`` (CRD defaults applied; CEL rules checked)."""

    mode: str
    """One of :data:`SCALING_MODES`."""
    replicas: int | None
    """``spec.scaling.replicas`` (the /scale target); required in Fixed mode, within [min, max] there."""
    min_replicas: int
    max_replicas: int
    target_p95_latency_ms: int
    target_utilization_percent: int
    tolerance_percent: int
    scale_up_stabilization_s: int
    scale_down_stabilization_s: int
    max_step_replicas: int
    decision_interval_s: int
    scale_to_zero_after_s: int | None = None
    """``scaleToZeroAfterSeconds``: scale to 0 after this many seconds without a request, s; None = never (only
    with ``minReplicas: 0``, which needs the gateway outside Fixed mode)."""


@dataclass(frozen=True)
class PlacementSpec:
    """``spec.placement``: merged into the pods' spec (a GPU service adds its GPU product selector)."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class ImageEncoderStageSpec:
    """``spec.stages.imageEncoder``: the image encoder pool of the staged layout, resolved against the one-piece
    fields (a field left out takes them: ``resources`` the whole ``spec.resources``, each runtime knob
    ``spec.runtime``'s)."""

    min_replicas: int
    """Fewest replicas of the pool, 1..1000: what it runs in Fixed mode and before its autoscaler's first decision.
    In Predictive and Utilization mode the pool's own autoscaler (``autoscaler.policy.image_encoder_policy``: the
    Utilization rule on the pool's Triton metrics) sizes it within ``[min_replicas, max_replicas]``; always under a
    budget cap, and 0 while the front pool is at 0."""
    max_replicas: int
    """Upper bound of the pool's autoscaler, 1..1000, at least ``min_replicas``."""
    resources: ResourceSpec
    """Requests of one encoder replica (also its price)."""
    runtime: RuntimeSpec
    """``spec.runtime`` with the pool's ``instanceCount``, ``intraOpThreads``, ``maxBatchSize`` and
    ``maxQueueDelayMicroseconds``; no preferred batch sizes (those of ``spec.runtime`` count the front's requests,
    while the pool batches images from every front replica)."""


@dataclass(frozen=True)
class StagesSpec:
    """``spec.stages``: the stage-disaggregated layout (issue 24). Absent (None on the spec) = one piece."""

    image_encoder: ImageEncoderStageSpec
    """The image encoder pool, called by the front pool (text encoder and fusion) over KServe v2 gRPC."""


@dataclass(frozen=True)
class ServiceSpec:
    """The whole ``spec`` of an InferenceService, typed."""

    model: ModelSpec
    runtime: RuntimeSpec
    resources: ResourceSpec
    scaling: ScalingSpec
    placement: PlacementSpec
    pricing_tier: str
    """``spec.pricing.tier``: one of :data:`PRICING_TIERS`."""
    priority: int
    """``spec.priority``, 0..1000 (a BudgetPolicy lists lower priorities first; it caps every service alike)."""
    gateway: GatewaySpec = field(default_factory=GatewaySpec)
    stages: StagesSpec | None = None
    """``spec.stages``: None = the one-piece layout."""
    service_account_name: str | None = None
    """``spec.serviceAccountName``: the replicas' pods' ServiceAccount; None = the namespace's ``default``."""
    image_pull_secrets: tuple[str, ...] = ()
    """``spec.imagePullSecrets[].name``: Secrets (this namespace) the replicas' pods pull their images with."""


@dataclass(frozen=True)
class IsvcSpec:
    """An InferenceService as the planner sees it: identity from ``metadata`` plus the typed spec pieces."""

    namespace: str
    name: str
    uid: str
    generation: int
    labels: dict[str, str]
    model: ModelSpec
    runtime: RuntimeSpec
    image: str
    """``<runtime.image>:<runtime.version>``."""
    resources: ResourceSpec
    scaling: ScalingSpec
    pricing_tier: str
    priority: int
    placement: PlacementSpec = field(default_factory=PlacementSpec)
    """Node selector and tolerations of the pods (``spec.placement``)."""
    gateway: GatewaySpec = field(default_factory=GatewaySpec)
    """The request gateway (``spec.gateway``); ``enabled`` False = the Service selects the replicas directly."""
    stages: StagesSpec | None = None
    """The staged layout (``spec.stages``); None = one piece (every object as before stages existed)."""
    service_account_name: str | None = None
    """ServiceAccount of the replicas' and the image encoder pool's pods (``spec.serviceAccountName``); None = the
    namespace's ``default``. The gateway pods always run as their own ``<name>-gateway``."""
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets the replicas' and the image encoder pool's pods pull the Triton and model images with
    (``spec.imagePullSecrets``), in order. The gateway pods pull the operator's image with the operator's own
    (``MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS``)."""


# ---------------------------------------------------------------------------------------------- readers
def _object(parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    """``parent[key]`` as a mapping ({} when absent or null), its fields checked against :data:`KNOWN_FIELDS`."""
    value = parent.get(key)
    if value is None:
        value = {}
    where = f"{path}.{key}" if path else key
    if not isinstance(value, Mapping):
        raise InvalidSpec(where, f"must be an object, got {type(value).__name__}")
    unknown = sorted(set(value) - KNOWN_FIELDS[where])
    if unknown:
        raise InvalidSpec(f"{where}.{unknown[0]}",
                          f"unknown field (known: {', '.join(sorted(KNOWN_FIELDS[where]))})")
    return value


def _int(d: Mapping[str, Any], key: str, default: int, path: str, lo: int, hi: int) -> int:
    value = d.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidSpec(f"{path}.{key}", f"must be a whole number in [{lo}, {hi}], got {value!r}")
    return value


def _bool(d: Mapping[str, Any], key: str, default: bool, path: str) -> bool:
    value = d.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidSpec(f"{path}.{key}", f"must be true or false, got {value!r}")
    return value


def _str(d: Mapping[str, Any], key: str, default: str | None, path: str, *, pattern: re.Pattern[str] | None = None,
         choices: tuple[str, ...] = (), max_length: int = 253, min_length: int = 0) -> str | None:
    value = d.get(key)
    if value is None:
        return default
    where = f"{path}.{key}"
    if not isinstance(value, str):
        raise InvalidSpec(where, f"must be a string, got {value!r}")
    if choices and value not in choices:
        raise InvalidSpec(where, f"unknown value {value!r}; use {', '.join(choices)}")
    if not min_length <= len(value) <= max_length:
        raise InvalidSpec(where, f"must be {min_length}..{max_length} characters long, got {len(value)}")
    if pattern is not None and not pattern.fullmatch(value):
        raise InvalidSpec(where, f"{value!r} does not match {pattern.pattern}")
    return value


def _req(value: str | None) -> str:
    assert value is not None  # a default was given
    return value


def _quantity_text(d: Mapping[str, Any], key: str, default: str, path: str, pattern: re.Pattern[str],
                   max_int: int, examples: str) -> str:
    """A resource quantity above 0: an integer in [1, ``max_int``] or a string matching the CRD's ``pattern``, valid
    in the one quantity grammar. Returns it as the text the Deployment gets."""
    value = d.get(key)
    where = f"{path}.{key}"
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= max_int:
            raise InvalidSpec(where, f"must be in [0, {max_int}], got {value}")
    elif isinstance(value, str):
        if len(value) > 16 or not pattern.fullmatch(value):
            raise InvalidSpec(where, f"{value!r} is not a quantity this field takes (e.g. {examples}; "
                                     f"pattern {pattern.pattern})")
    try:
        amount = parse_quantity(value, where)
    except InvalidQuantity as exc:
        raise InvalidSpec(where, exc.message) from None
    if amount == 0:
        raise InvalidSpec(where, f"must be greater than 0, got {value!r}: a replica that requests none is priced "
                                 f"0 USD and never counts against a budget (e.g. \"{default}\")")
    return str(value)


def parse_model(model: Mapping[str, Any]) -> ModelSpec:
    """Typed ``spec.model`` (``model`` is its mapping, already checked for unknown fields).

    Raises:
        InvalidSpec: An enum, pattern or CEL rule of the CRD fails (field named).
    """
    p = "spec.model"
    source = _req(_str(model, "source", "BuiltIn", p, choices=MODEL_SOURCES))
    config_map = _object(model, "configMap", p)
    pvc = _object(model, "pvc", p)
    image = _object(model, "image", p)
    cost_ref = _object(model, "costModelRef", p)
    inputs = _object(model, "inputs", p)
    spec = ModelSpec(
        source=source,
        name=_req(_str(model, "name", "multimodal", p, pattern=_MODEL_NAME, max_length=63)),
        config_map=_str(config_map, "name", None, f"{p}.configMap", pattern=_OBJECT_NAME),
        pvc_claim=_str(pvc, "claimName", None, f"{p}.pvc", pattern=_OBJECT_NAME),
        pvc_sub_path=_req(_str(pvc, "subPath", "", f"{p}.pvc", max_length=1024)),
        image_reference=_model_image_reference(image.get("reference")),
        image_path=_req(_str(image, "path", "/models", f"{p}.image", max_length=1024)),
        uri=_str(model, "uri", None, p, pattern=_URI, max_length=2048),
        cost_model_config_map=_str(cost_ref, "name", None, f"{p}.costModelRef", pattern=_OBJECT_NAME),
        cost_model_key=_req(_str(cost_ref, "key", "model.skops", f"{p}.costModelRef")),
        inputs=ModelInputsSpec(
            images=_req(_str(inputs, "images", "IMAGES", f"{p}.inputs", pattern=_TENSOR_NAME, max_length=64)),
            text=_req(_str(inputs, "text", "TEXT", f"{p}.inputs", pattern=_TENSOR_NAME, max_length=64)),
        ),
    )
    needed = {"ConfigMap": ("configMap.name", spec.config_map), "PVC": ("pvc.claimName", spec.pvc_claim),
              "Image": ("image.reference", spec.image_reference), "URI": ("uri", spec.uri)}
    if source in needed and not needed[source][1]:
        raise InvalidSpec(f"{p}.{needed[source][0]}", f"required when spec.model.source is {source}")
    given = [k for k in ("configMap", "pvc", "image", "uri") if model.get(k) is not None]
    own = {"ConfigMap": "configMap", "PVC": "pvc", "Image": "image", "URI": "uri"}.get(source)
    extra = [k for k in given if k != own]
    if extra:
        raise InvalidSpec(f"{p}.{extra[0]}", f"not used with spec.model.source {source}; set only the object the "
                                             f"source names")
    if spec.pvc_sub_path.startswith("/") or _DOTDOT_ELEMENT.search(spec.pvc_sub_path):
        raise InvalidSpec(f"{p}.pvc.subPath", f"{spec.pvc_sub_path!r} must be a relative path inside the volume "
                                              f"without a '..' element (the Deployment's volume mount takes no other), "
                                              f"e.g. 'models/v3'; \"\" is the volume's root")
    if cost_ref and spec.cost_model_config_map is None:
        raise InvalidSpec(f"{p}.costModelRef.name", "required when spec.model.costModelRef is set")
    return spec


def _model_image_reference(value: object) -> str | None:
    """``spec.model.image.reference`` (its raw value): a whole image reference (:data:`IMAGE_REFERENCE_PATTERN`) of
    at most 512 characters; None when unset or null.

    Raises:
        InvalidSpec: Not a string, too long, or not an image reference (the message has an example).
    """
    where = "spec.model.image.reference"
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidSpec(where, f"must be a string, got {value!r}")
    if not (1 <= len(value) <= 512 and _IMAGE_REFERENCE.fullmatch(value)):
        raise InvalidSpec(where, f"{value[:80]!r} is not an image reference: [registry host[:port]/]repository"
                                 f"[:tag][@digest], the repository's path in lower case, no spaces, at most 512 "
                                 f"characters, e.g. registry.example.com/models/captioner:v3")
    return value


def parse_runtime(runtime: Mapping[str, Any]) -> RuntimeSpec:
    """Typed ``spec.runtime`` (``runtime`` is its mapping, already checked for unknown fields).

    Raises:
        InvalidSpec: A range, enum, pattern or CEL rule of the CRD fails (field named).
    """
    p = "spec.runtime"
    batching = _object(runtime, "dynamicBatching", p)
    b = f"{p}.dynamicBatching"
    max_batch = _int(runtime, "maxBatchSize", 8, p, 0, 256)
    sizes = batching.get("preferredBatchSizes")
    sizes = [] if sizes is None else sizes
    if (not isinstance(sizes, list) or len(sizes) > 8
            or not all(isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= 256 for s in sizes)):
        raise InvalidSpec(f"{b}.preferredBatchSizes",
                          f"must be a list of at most 8 integers in [1, 256], got {sizes!r}")
    if sizes != sorted(set(sizes)):
        raise InvalidSpec(f"{b}.preferredBatchSizes", f"must be ascending and distinct, got {sizes}")
    if sizes and sizes[-1] > max_batch:
        raise InvalidSpec(f"{b}.preferredBatchSizes",
                          f"each entry must be <= spec.runtime.maxBatchSize ({max_batch}), got {sizes}")
    spec = RuntimeSpec(
        image=_runtime_image(runtime.get("image")),
        version=_req(_str(runtime, "version", "24.10-py3", p, pattern=_VERSION, max_length=128)),
        instance_count=_int(runtime, "instanceCount", 1, p, 1, 16),
        intra_op_threads=_int(runtime, "intraOpThreads", 1, p, 1, 64),
        max_batch_size=max_batch,
        dynamic_batching=DynamicBatchingSpec(
            enabled=_bool(batching, "enabled", True, b),
            preferred_batch_sizes=tuple(sizes),
            max_queue_delay_us=_int(batching, "maxQueueDelayMicroseconds", 2000, b, 0, 1_000_000),
        ),
        modality_aware_batching=_bool(runtime, "modalityAwareBatching", True, p),
        response_cache=_bool(runtime, "responseCache", False, p),
        embedding_cache=_bool(runtime, "embeddingCache", True, p),
        precision=_req(_str(runtime, "precision", "FP32", p, choices=PRECISIONS)),
        engine=_req(_str(runtime, "engine", "torch", p, choices=ENGINES)),
    )
    if spec.engine == "openvino" and spec.precision == "FP16":
        raise InvalidSpec(f"{p}.engine", "openvino does not offer spec.runtime.precision FP16 (no FP16 arithmetic "
                                         "on these CPUs); use precision FP32, BF16 or INT8 with openvino, or engine "
                                         "torch")
    return spec


def _runtime_image(value: object) -> str:
    """``spec.runtime.image`` (its raw value): an image repository without tag or digest
    (:data:`IMAGE_REPOSITORY_PATTERN`), or the default when unset or null.

    Raises:
        InvalidSpec: Not a string, longer than :data:`IMAGE_REPOSITORY_MAX_CHARS`, a tag or digest in it (the tag
            goes in ``spec.runtime.version``), or not a repository name; the message has the fix and an example.
    """
    where, default = "spec.runtime.image", RuntimeSpec.image
    if value is None:
        return default
    if not isinstance(value, str):
        raise InvalidSpec(where, f"must be a string, got {value!r}")
    if 1 <= len(value) <= IMAGE_REPOSITORY_MAX_CHARS and _IMAGE_REPOSITORY.fullmatch(value):
        return value
    name = value.partition("@")[0]
    tagged = ":" in name.rsplit("/", 1)[-1]
    if "@" in value or tagged:
        repository, tag = name.rsplit(":", 1) if tagged else (name, "")
        example = f"image: {repository}" + (f", version: {tag}" if tag else "")
        if tag.isdigit() and "/" not in name:
            example += f" (or, if {name} is a registry, name the repository in it: {name}/<repository>)"
        digest = "; a digest cannot be pinned: spec.runtime.version takes a tag" if "@" in value else ""
        raise InvalidSpec(where, f"{value[:80]!r} carries a {'digest' if '@' in value else 'tag'}: set the repository "
                                 f"only and put the tag in spec.runtime.version (the container's image is "
                                 f"<image>:<version>, so a tag here is doubled), e.g. {example} (default "
                                 f"{default}:{RuntimeSpec.version}){digest}")
    raise InvalidSpec(where, f"{value[:80]!r} is not an image repository name: an optional registry host[:port]/, "
                             f"then lower-case path components (letters, digits, '.', '_', '-') joined by '/', no "
                             f"spaces, tag or digest, at most {IMAGE_REPOSITORY_MAX_CHARS} characters, e.g. "
                             f"{default} or registry.local:5000/ml/triton")


def parse_resources(res: Mapping[str, Any], path: str = "spec.resources") -> ResourceSpec:
    """Typed ``spec.resources`` (``res`` is its mapping, already checked for unknown fields; ``path`` where it is:
    also ``spec.stages.imageEncoder.resources``).

    Raises:
        InvalidSpec: A quantity, range or CEL rule of the CRD fails (field named).
    """
    p = path
    gpu = _object(res, "gpu", p)
    gpu_count = _int(gpu, "count", 0, f"{p}.gpu", 0, 16)
    gpu_type = _str(gpu, "type", None, f"{p}.gpu", pattern=_GPU_TYPE, max_length=63)
    if gpu_count > 0 and not gpu_type:
        raise InvalidSpec(f"{p}.gpu.type", f"required when {p}.gpu.count > 0 (e.g. nvidia-l4)")
    if gpu_type is not None and gpu_count == 0:
        written = "unset (0)" if gpu.get("count") is None else "0"
        raise InvalidSpec(f"{p}.gpu.count", f"is {written} but {p}.gpu.type is {gpu_type!r}: a replica with 0 GPUs "
                                            f"requests none and is not placed on {gpu_type} nodes, so the type would "
                                            f"be ignored; set count: 1 (or more) for GPU replicas, or remove "
                                            f"gpu.type for CPU replicas")
    return ResourceSpec(
        cpu=_quantity_text(res, "cpu", "2", p, _CPU, 1024, '"2", "500m" (half a core)'),
        memory=_quantity_text(res, "memory", "8Gi", p, _MEMORY, 2**44, '"8Gi", "512Mi" (binary units)'),
        gpu_count=gpu_count,
        gpu_type=gpu_type,
    )


def parse_scaling(sc: Mapping[str, Any], gateway_enabled: bool = GATEWAY_ENABLED_DEFAULT) -> ScalingSpec:
    """Typed ``spec.scaling`` (``sc`` is its mapping, already checked for unknown fields); unset
    ``targetUtilizationPercent``, ``scaleDownStabilizationSeconds`` and ``maxStepReplicas`` take their mode's
    :data:`SCALING_MODE_DEFAULTS` (Predictive's window less the p95 target: :func:`predictive_scale_down_window_s`).

    Args:
        gateway_enabled: ``spec.gateway.enabled``: only with the gateway may Utilization and Predictive go to 0.
    Raises:
        InvalidSpec: A range, enum or CEL rule of the CRD fails (field named).
    """
    p = "spec.scaling"
    mode = _req(_str(sc, "mode", "Predictive", p, choices=SCALING_MODES))
    by_mode = SCALING_MODE_DEFAULTS[mode]
    replicas = sc.get("replicas")
    if replicas is not None:
        replicas = _int(sc, "replicas", 0, p, 0, 1000)
    interval_s = _int(sc, "decisionIntervalSeconds", 15, p, 5, 3600)
    target_ms = _int(sc, "targetP95LatencyMilliseconds", 500, p, 1, 600000)
    down_s = (predictive_scale_down_window_s(target_ms, interval_s) if mode == "Predictive"
              else by_mode.scale_down_stabilization_s)
    scaling = ScalingSpec(
        mode=mode,
        replicas=replicas,
        min_replicas=_int(sc, "minReplicas", 1, p, 0, 1000),
        max_replicas=_int(sc, "maxReplicas", 10, p, 1, 1000),
        target_p95_latency_ms=target_ms,
        target_utilization_percent=_int(sc, "targetUtilizationPercent", by_mode.target_utilization_percent, p, 1,
                                        100),
        tolerance_percent=_int(sc, "tolerancePercent", 10, p, 0, 50),
        scale_up_stabilization_s=_int(sc, "scaleUpStabilizationSeconds", 0, p, 0, 3600),
        scale_down_stabilization_s=_int(sc, "scaleDownStabilizationSeconds", down_s, p, 0, 3600),
        max_step_replicas=_int(sc, "maxStepReplicas", by_mode.max_step_replicas, p, 1, 1000),
        decision_interval_s=interval_s,
        scale_to_zero_after_s=(None if sc.get("scaleToZeroAfterSeconds") is None
                               else _int(sc, "scaleToZeroAfterSeconds", 0, p, 1, 86400)),
    )
    if scaling.min_replicas > scaling.max_replicas:
        raise InvalidSpec(f"{p}.minReplicas", f"({scaling.min_replicas}) must be <= spec.scaling.maxReplicas "
                                              f"({scaling.max_replicas})")
    if mode != "Fixed" and scaling.min_replicas < 1 and not gateway_enabled:
        raise InvalidSpec(f"{p}.minReplicas", f"must be at least 1 in {mode} mode without the gateway, got "
                                              f"{scaling.min_replicas}: at 0 replicas only the gateway holds requests "
                                              f"and activates a replica. Set spec.gateway.enabled: true (the "
                                              f"default) to scale from zero, or minReplicas: 1, or use mode: Fixed "
                                              f"with replicas: 0 to stop it (a BudgetPolicy's ScaleToZero still "
                                              f"scales any mode to 0)")
    if scaling.scale_to_zero_after_s is not None and (mode == "Fixed" or scaling.min_replicas != 0):
        raise InvalidSpec(f"{p}.scaleToZeroAfterSeconds",
                          f"takes effect only in Predictive or Utilization mode with minReplicas: 0 (got mode "
                          f"{mode}, minReplicas {scaling.min_replicas}); set minReplicas: 0 and "
                          f"spec.gateway.enabled: true, or remove scaleToZeroAfterSeconds")
    if mode == "Fixed":
        if replicas is None:
            raise InvalidSpec(f"{p}.replicas", "required when spec.scaling.mode is Fixed")
        if not scaling.min_replicas <= replicas <= scaling.max_replicas:
            raise InvalidSpec(f"{p}.replicas", f"({replicas}) must lie within [spec.scaling.minReplicas, "
                                               f"spec.scaling.maxReplicas] = [{scaling.min_replicas}, "
                                               f"{scaling.max_replicas}] in Fixed mode")
    return scaling


def parse_gateway(gw: Mapping[str, Any]) -> GatewaySpec:
    """Typed ``spec.gateway`` (``gw`` is its mapping, already checked for unknown fields).

    Raises:
        InvalidSpec: A range, pattern or quantity of the CRD fails (field named).
    """
    p = "spec.gateway"
    queue = _object(gw, "queue", p)
    res = _object(gw, "resources", p)
    return GatewaySpec(
        enabled=_bool(gw, "enabled", GATEWAY_ENABLED_DEFAULT, p),
        replicas=_int(gw, "replicas", 2, p, 1, 20),
        max_in_flight=_int(gw, "maxInFlight", 1000, p, 1, 100_000),
        queue_size=_int(queue, "size", 1000, f"{p}.queue", 0, 100_000),
        queue_timeout_s=_int(queue, "timeoutSeconds", 120, f"{p}.queue", 1, 3600),
        max_body_bytes=_int(gw, "maxBodyBytes", 64 * 1024 * 1024, p, 1024, 1024**3),
        tenant_header=_req(_str(gw, "tenantHeader", "x-modalscale-tenant", p, pattern=_HEADER_NAME, max_length=64)),
        cpu=_quantity_text(res, "cpu", GATEWAY_CPU_DEFAULT, f"{p}.resources", _CPU, 64, '"100m", "1"'),
        memory=_quantity_text(res, "memory", "256Mi", f"{p}.resources", _MEMORY, 2**40, '"256Mi", "1Gi"'),
    )


def parse_stages(root: Mapping[str, Any], model: ModelSpec, runtime: RuntimeSpec,
                 resources: ResourceSpec) -> StagesSpec | None:
    """Typed ``spec.stages`` (``root`` is ``spec``'s mapping); the one-piece fields fill what the stage leaves out.

    Args:
        model, runtime, resources: The parsed ``spec.model``, ``spec.runtime`` and ``spec.resources``.
    Returns:
        None when ``spec.stages`` is absent or null (the one-piece layout).
    Raises:
        InvalidSpec: ``imageEncoder`` missing, a range or quantity of the CRD, ``minReplicas > maxReplicas``, a model
            source other than BuiltIn, or engine openvino with encoder GPUs (field named, with the fix).
    """
    if root.get("stages") is None:
        return None
    stages = _object(root, "stages", "spec")
    p = "spec.stages.imageEncoder"
    if stages.get("imageEncoder") is None:
        raise InvalidSpec(p, "required when spec.stages is set (e.g. imageEncoder: {minReplicas: 1}); remove "
                             "spec.stages for the one-piece layout")
    enc = _object(stages, "imageEncoder", "spec.stages")
    if model.source != "BuiltIn":
        raise InvalidSpec("spec.stages", f"the staged layout needs spec.model.source BuiltIn (the operator "
                                         f"generates both stages' model repositories), got {model.source}; remove "
                                         f"spec.stages or serve the built-in model")
    min_replicas = _int(enc, "minReplicas", 1, p, 1, 1000)
    max_replicas = _int(enc, "maxReplicas", 10, p, 1, 1000)
    if min_replicas > max_replicas:
        raise InvalidSpec(f"{p}.minReplicas", f"({min_replicas}) must be <= {p}.maxReplicas ({max_replicas})")
    own = parse_resources(_object(enc, "resources", p), f"{p}.resources") if enc.get("resources") is not None \
        else resources
    if runtime.engine == "openvino" and own.gpu_count > 0:
        raise InvalidSpec(f"{p}.resources.gpu.count", f"spec.runtime.engine openvino runs the encoders on the CPU "
                                                      f"only, but the image encoder pool asks for {own.gpu_count} "
                                                      f"GPU(s); set gpu.count 0 there, or engine torch")
    knobs, r = _object(enc, "runtime", p), f"{p}.runtime"
    batching = replace(runtime.dynamic_batching, preferred_batch_sizes=(), max_queue_delay_us=_int(
        knobs, "maxQueueDelayMicroseconds", runtime.dynamic_batching.max_queue_delay_us, r, 0, 1_000_000))
    own_runtime = replace(runtime, instance_count=_int(knobs, "instanceCount", runtime.instance_count, r, 1, 16),
                          intra_op_threads=_int(knobs, "intraOpThreads", runtime.intra_op_threads, r, 1, 64),
                          max_batch_size=_int(knobs, "maxBatchSize", runtime.max_batch_size, r, 0, 256),
                          dynamic_batching=batching)
    return StagesSpec(ImageEncoderStageSpec(min_replicas, max_replicas, own, own_runtime))


def parse_placement(placement: Mapping[str, Any]) -> PlacementSpec:
    """Typed ``spec.placement`` (``placement`` is its mapping, already checked for unknown fields).

    Raises:
        InvalidSpec: Not a map of strings / not a list of tolerations (field named).
    """
    selector = placement.get("nodeSelector") or {}
    if (not isinstance(selector, Mapping) or len(selector) > 16
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items())):
        raise InvalidSpec("spec.placement.nodeSelector", "must map at most 16 label names to string values")
    tolerations = placement.get("tolerations") or []
    out = []
    for i, tol in enumerate(tolerations if isinstance(tolerations, list) else [None]):
        if not isinstance(tol, Mapping) or set(tol) - set(TOLERATION_KEYS):
            raise InvalidSpec(f"spec.placement.tolerations[{i}]",
                              f"must be a toleration with only {', '.join(TOLERATION_KEYS)}")
        out.append(dict(tol))
    return PlacementSpec(node_selector=dict(selector), tolerations=tuple(out))


def parse_pod_identity(root: Mapping[str, Any]) -> tuple[str | None, tuple[str, ...]]:
    """Typed ``spec.serviceAccountName`` and ``spec.imagePullSecrets`` (``root`` is ``spec``'s mapping).

    Returns:
        The ServiceAccount's name (None: unset) and the pull Secrets' names in order.
    Raises:
        InvalidSpec: A name that is not a DNS-1123 subdomain of at most 253 characters, a Secret that is not
            ``{name: ...}`` or is listed twice (the CRD's list-map), more than :data:`IMAGE_PULL_SECRETS_MAX_ITEMS`
            (field named, with an example).
    """
    account = root.get("serviceAccountName")
    if account is not None and not (isinstance(account, str) and 1 <= len(account) <= 253
                                    and _OBJECT_NAME.fullmatch(account)):
        raise InvalidSpec("spec.serviceAccountName", f"{account!r} is not a ServiceAccount name (lower-case letters, "
                                                     f"digits, '-' and '.', at most 253 characters), e.g. "
                                                     f"model-reader")
    secrets = root.get("imagePullSecrets")
    if secrets is None:
        return account, ()
    p = "spec.imagePullSecrets"
    if not isinstance(secrets, list) or len(secrets) > IMAGE_PULL_SECRETS_MAX_ITEMS:
        raise InvalidSpec(p, f"must be a list of at most {IMAGE_PULL_SECRETS_MAX_ITEMS} Secret references, e.g. "
                             f"[{{name: regcred}}]")
    names: list[str] = []
    for i, ref in enumerate(secrets):
        if not isinstance(ref, Mapping):
            raise InvalidSpec(f"{p}[{i}]", f"must be an object naming a Secret, e.g. {{name: regcred}}, got {ref!r}")
        unknown = sorted(set(ref) - {"name"})
        if unknown:
            raise InvalidSpec(f"{p}[{i}].{unknown[0]}", "unknown field (known: name); the Secret must be in the "
                                                        "service's namespace, e.g. {name: regcred}")
        name = ref.get("name")
        if not (isinstance(name, str) and 1 <= len(name) <= 253 and _OBJECT_NAME.fullmatch(name)):
            raise InvalidSpec(f"{p}[{i}].name", f"{name!r} is not a Secret name (lower-case letters, digits, '-' and "
                                                f"'.', at most 253 characters), e.g. regcred")
        if name in names:
            raise InvalidSpec(f"{p}[{i}].name", f"{name!r} is listed twice; list each Secret once, e.g. "
                                                f"[{{name: regcred}}]")
        names.append(name)
    return account, tuple(names)


def parse_spec(spec: Mapping[str, Any] | None) -> ServiceSpec:
    """Parse the ``spec`` of an InferenceService (camelCase mapping as the API or a manifest holds it).

    Args:
        spec: ``body["spec"]``; None or missing fields take the CRD defaults.
    Returns:
        The typed spec; every consumer (planner, ``ScalingPolicy``, ``RuntimeConfig``, pricing) reads these pieces.
    Raises:
        InvalidSpec: The first field that breaks a CRD rule, named with its path and the fix.
    """
    root = _object({"spec": spec}, "spec", "")
    model = parse_model(_object(root, "model", "spec"))
    runtime = parse_runtime(_object(root, "runtime", "spec"))
    resources = parse_resources(_object(root, "resources", "spec"))
    if runtime.engine == "openvino" and resources.gpu_count > 0:
        raise InvalidSpec("spec.runtime.engine", f"openvino runs the encoders on the CPU only, but "
                                                 f"spec.resources.gpu.count is {resources.gpu_count} (a GPU replica "
                                                 f"runs torch encoder models on its GPUs); use engine torch with GPUs, "
                                                 f"or gpu.count 0 with openvino")
    gateway = parse_gateway(_object(root, "gateway", "spec"))
    account, pull_secrets = parse_pod_identity(root)
    return ServiceSpec(
        model=model,
        runtime=runtime,
        resources=resources,
        scaling=parse_scaling(_object(root, "scaling", "spec"), gateway.enabled),
        placement=parse_placement(_object(root, "placement", "spec")),
        pricing_tier=_req(_str(_object(root, "pricing", "spec"), "tier", "OnDemand", "spec.pricing",
                               choices=PRICING_TIERS)),
        priority=_int(root, "priority", 100, "spec", 0, 1000),
        gateway=gateway,
        stages=parse_stages(root, model, runtime, resources),
        service_account_name=account,
        image_pull_secrets=pull_secrets,
    )


def check_name(name: object) -> None:
    """Refuse an InferenceService name the operator cannot use for its children.

    Raises:
        InvalidSpec: ``metadata.name`` is not :data:`NAME_RULE`; the message names the fix (rename).
    """
    if isinstance(name, str) and len(name) <= NAME_MAX_LENGTH and _DNS_1035_LABEL.fullmatch(name):
        return
    length = len(name) if isinstance(name, str) else 0
    hint = ""
    if isinstance(name, str):
        fixed = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
        fixed = ("x" + fixed if fixed[:1].isdigit() else fixed)[:NAME_MAX_LENGTH].rstrip("-")
        hint = f", e.g. {fixed!r}" if fixed and _DNS_1035_LABEL.fullmatch(fixed) else ""
    raise InvalidSpec("metadata.name", f"{name!r} ({length} characters) must be {NAME_RULE}: it becomes the name of "
                                       f"the Service and the value of the pods' label modalscale.io/inferenceservice"
                                       f"; rename the InferenceService (delete it and create it under a new name"
                                       f"{hint})")


def _metadata(body: object) -> Mapping[str, Any]:
    """``body``'s ``metadata``, checked where parse_isvc reads it (the apiserver guarantees these shapes; a manifest
    that ``modalscale cost diff`` reads has no apiserver): an object, ``generation`` a whole number, ``labels`` a map
    of strings. Raises :class:`InvalidSpec` naming the field."""
    if not isinstance(body, Mapping):
        raise InvalidSpec("(document)", f"must be an object with metadata and spec, got {type(body).__name__}")
    meta = body.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise InvalidSpec("metadata", f"must be an object, got {meta!r}")
    generation = meta.get("generation")
    if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)
                                   or generation < 0):
        raise InvalidSpec("metadata.generation", f"must be a whole number >= 0, got {generation!r} (the apiserver "
                                                 f"sets it; leave it out of a manifest)")
    labels = meta.get("labels")
    if labels is not None and not (isinstance(labels, Mapping)
                                   and all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        raise InvalidSpec("metadata.labels", f"must be a map of strings to strings (team: search), got {labels!r}")
    return meta


def parse_isvc(body: Mapping[str, Any]) -> IsvcSpec:
    """Return the typed InferenceService of ``body`` (a dict as read from the API or a manifest).

    Raises:
        InvalidSpec: See :func:`parse_spec`; also ``metadata.name`` missing or not :data:`NAME_RULE` (the apiserver
            admits any DNS-1123 subdomain of up to 253 for a custom resource; a CRD older than this rule too), and
            ``body`` or ``metadata`` not an object, ``metadata.generation`` or ``metadata.labels`` of the wrong type.
    """
    meta = _metadata(body)
    if not meta.get("name"):
        raise InvalidSpec("metadata.name", "required")
    check_name(meta["name"])
    s = parse_spec(body.get("spec"))
    name = meta["name"]
    if s.stages is not None and len(name) > STAGED_NAME_MAX_LENGTH:
        raise InvalidSpec("metadata.name", f"{name!r} ({len(name)} characters) is too long for spec.stages: the "
                                           f"image encoder pool's Service <name>{IMAGE_ENCODER_SUFFIX} must be a "
                                           f"DNS-1035 label of at most {NAME_MAX_LENGTH} characters; use a name of at "
                                           f"most {STAGED_NAME_MAX_LENGTH} characters or remove spec.stages")
    if s.gateway.enabled and len(name) > GATEWAY_NAME_MAX_LENGTH:
        raise InvalidSpec("metadata.name", f"{name!r} ({len(name)} characters) is too long for the request gateway: "
                                           f"the replicas' Service <name>{REPLICAS_SERVICE_SUFFIX} must be a DNS-1035 "
                                           f"label of at most {NAME_MAX_LENGTH} characters; use a name of at most "
                                           f"{GATEWAY_NAME_MAX_LENGTH} characters or set spec.gateway.enabled: false")
    return IsvcSpec(
        namespace=meta.get("namespace") or "default",
        name=meta["name"],
        uid=meta.get("uid", ""),
        generation=meta.get("generation") or 0,
        labels=dict(meta.get("labels") or {}),
        model=s.model,
        runtime=s.runtime,
        image=s.runtime.image_ref,
        resources=s.resources,
        scaling=s.scaling,
        pricing_tier=s.pricing_tier,
        priority=s.priority,
        placement=s.placement,
        gateway=s.gateway,
        stages=s.stages,
        service_account_name=s.service_account_name,
        image_pull_secrets=s.image_pull_secrets,
    )
