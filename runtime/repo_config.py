"""Pure generation of the Triton model repository for the built-in multimodal model.

The operator puts the result of :func:`build_repository` into a ConfigMap and ``modalscale runtime serve``
writes it to disk, so both serve byte-identical repositories. Nothing here touches the disk, the clock or
the network: a :class:`RuntimeConfig` goes in, text comes out.

Request interface of the generated model (also in ``runtime/README.md``); the leading ``1`` is the batch
dimension a client always sends (with ``max_batch_size: 0`` the model declares it explicitly, so clients
never need to know whether batching is on):

============== ============ ========= ===========================================================
name           Triton type  shape     meaning
============== ============ ========= ===========================================================
IMAGES         TYPE_STRING  [1, n]    n >= 0 encoded JPEG/PNG/WebP/BMP images (bytes), optional
TEXT           TYPE_STRING  [1, 1]    one UTF-8 text, optional
EMBEDDING      TYPE_FP32    [1, 256]  L2-normalised fused embedding
MODALITY       TYPE_STRING  [1, 1]    ``image``, ``text`` or ``image_text``
IMAGE_CLASSES  TYPE_INT32   [1, n]    ImageNet-1k top-1 class index per image; [[-1]] for text
============== ============ ========= ===========================================================

Every :class:`Stage` serves this interface except ``image-encoder``, whose model (:data:`IMAGE_ENCODER_MODEL`) is
described in :func:`render_image_encoder_pbtxt`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import ModelSpec, ResourceSpec, RuntimeSpec, parse_spec

EMBEDDING_DIM = 256
"""Width D of the ``EMBEDDING`` output (fixed-seed projection size of the fusion head)."""
IMAGE_FEATURE_DIM = 1280
"""Pooled EfficientNet-Lite0 features per image (``model.encoders.IMAGE_FEATURE_DIM``; a unit test keeps them equal,
spelled out here because this module imports no torch)."""
TEXT_FEATURE_DIM = 384
"""Mean-pooled MiniLM features per text (``model.encoders.TEXT_FEATURE_DIM``)."""

INPUT_IMAGES = "IMAGES"
INPUT_TEXT = "TEXT"
OUTPUT_EMBEDDING = "EMBEDDING"
OUTPUT_MODALITY = "MODALITY"
OUTPUT_IMAGE_CLASSES = "IMAGE_CLASSES"

IMAGE_INT8_MAX_SIDE_PIXELS = 16_384
"""Upper bound of ``image_int8_min_side_pixels`` (above ``max_image_side_pixels`` it only means no image is INT8)."""
MAX_IMAGE_PIXELS_BOUND = 89_478_485
"""Upper bound of ``max_image_pixels``: Pillow's ``Image.MAX_IMAGE_PIXELS``. ``Image.open`` warns above it (and raises
above twice it), and ``inputs.decode_image`` refuses on that warning, so a larger limit was not the one enforced: an
image of 95 M pixels under a 200 M limit was refused as ``ImageTooLarge`` "exceeds the limit of 200000000 pixels"."""
RESPONSE_CACHE_BYTES = 64 * 1024 * 1024
"""Size of Triton's local response cache (``--cache-config local,size=...``) when any model enables it."""


class Precision(str, enum.Enum):
    """Numeric precision of the encoders (``spec.runtime.precision``)."""

    FP32 = "FP32"
    FP16 = "FP16"
    BF16 = "BF16"
    INT8 = "INT8"
    """Engine torch: dynamic INT8 quantization of the text encoder's ``nn.Linear`` layers (SmoothQuant-calibrated,
    per-channel weights); LayerNorm and convolutions stay in float. Engine openvino: NNCF INT8 text encoder, and the
    NNCF INT8 image encoder for images at least ``image_int8_min_side_pixels`` on their bucket's shorter side. A GPU
    layout runs it as FP16 (:func:`gpu_precision`)."""


class Engine(str, enum.Enum):
    """What runs the two encoders inside the Python backend (``spec.runtime.engine``, the ``runtime serve --engine``
    flag).

    ``torch`` (default): the torch modules as they are. ``openvino``: the same modules converted once with
    ``openvino.convert_model`` and compiled for the CPU (``modalscale.runtime.model.ov_engine``); CPU instances
    only (a GPU layout always runs torch).
    """

    TORCH = "torch"
    OPENVINO = "openvino"


class Stage(str, enum.Enum):
    """Which part of the model a replica serves (issue 24, stage-disaggregated serving; ``runtime serve --stage``).

    ``all`` (default): the whole model in one replica, today's layouts, byte-identical repository. ``image-encoder``:
    only the image encoder, as the Triton model :data:`IMAGE_ENCODER_MODEL` (a pool that every front replica calls,
    so its dynamic batcher batches images from all of them). ``front``: the client-facing model with the text encoder
    and the fusion head; it sends each request's images to the pool at ``RuntimeConfig.image_encoder_url`` over KServe
    v2 gRPC and never loads the image encoder.
    """

    ALL = "all"
    IMAGE_ENCODER = "image-encoder"
    FRONT = "front"


IMAGE_ENCODER_MODEL = "image_encoder"
"""The Triton model an ``image-encoder`` stage serves (:func:`render_image_encoder_pbtxt`) and a front calls."""
IMAGE_ENCODER_UNAVAILABLE = "ImageEncoderUnavailable"
"""Error reason (message prefix and ``modalscale_request_errors_total`` label) of a front request whose images the
encoder pool did not answer; Triton answers it with ``UNAVAILABLE`` (HTTP 503)."""
OUT_OF_MEMORY = "OutOfMemory"
"""Error reason (message prefix and ``modalscale_request_errors_total`` label) of a request that the replica ran out
of memory for (a ``MemoryError`` decoding or resizing its image, torch's out of memory in the encoder pass): resource
exhaustion of that replica, not the request's fault nor a bug, so Triton answers it with ``UNAVAILABLE`` (HTTP 503,
gRPC UNAVAILABLE: the Python backend's ``TritonError`` has no RESOURCE_EXHAUSTED), which clients retry."""
UNAVAILABLE_REASONS = (IMAGE_ENCODER_UNAVAILABLE, OUT_OF_MEMORY)
"""The reasons Triton answers with ``UNAVAILABLE`` (HTTP 503); the router gives them back that status from the
message prefix (BLS loses the code)."""
_HOST_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?):([0-9]{1,5})$")


@dataclass(frozen=True)
class RuntimeConfig:
    """Everything that shapes the generated Triton model repository.

    Defaults equal the CRD defaults of ``inferenceservices.modalscale.io``.
    """

    model_name: str = "multimodal"
    """Triton model name (``spec.model.name``); clients and the readiness probe use it."""
    instance_count: int = 1
    """Triton ``instance_group.count``: model instances (processes of the Python backend) per replica."""
    intra_op_threads: int = 1
    """torch intra-op threads per instance; instance_count x intra_op_threads should not exceed cores."""
    max_batch_size: int = 8
    """Triton ``max_batch_size`` in requests; 0 disables batching."""
    dynamic_batching: bool = True
    """Emit a ``dynamic_batching`` block (ignored when ``max_batch_size`` is 0)."""
    preferred_batch_sizes: tuple[int, ...] = ()
    """Ascending preferred batch sizes in requests, each <= ``max_batch_size``."""
    max_queue_delay_microseconds: int = 2000
    """How long the dynamic batcher may hold a request to form a larger batch, in microseconds."""
    modality_aware_batching: bool = True
    """Separate Triton queues per modality class (a light router model in front of one batched model per
    modality), and inside each batch one text-encoder pass per token-length bucket instead of padding every text to
    the longest. Without batching only the in-model grouping applies. Image passes are one per resolution bucket
    whatever this says (``batching.plan_image_groups``: padding made an image's features depend on its
    neighbours)."""
    response_cache: bool = False
    """Triton response cache for byte-identical requests (the server also needs ``--cache-config``)."""
    embedding_cache: bool = True
    """Content-hash (SHA-256) LRU cache of per-image embeddings inside the model."""
    precision: Precision = Precision.FP32
    """Encoder precision."""
    engine: Engine = Engine.TORCH
    """Encoder engine (:class:`Engine`): ``spec.runtime.engine``, ``runtime serve --engine`` and the presets."""
    gpu_count: int = 0
    """GPUs per replica (``spec.resources.gpu.count``); > 0 gives ``KIND_GPU`` instances."""
    max_images_per_request: int = 16
    """Requests with more images are rejected with a per-request error."""
    max_image_side_pixels: int = 384
    """Images are resized so that their longer side is at most this many pixels before encoding."""
    max_image_pixels: int = 40_000_000
    """Images whose header declares more pixels (width x height) are rejected without being decoded."""
    max_text_bytes: int = 16_384
    """Texts longer than this many UTF-8 bytes are rejected (the encoder reads at most 256 tokens)."""
    embedding_cache_entries: int = 1024
    """Capacity of the per-instance embedding cache, in images."""
    image_int8_min_side_pixels: int = 0
    """Engine openvino at precision INT8 only: images whose resolution bucket's shorter side is at least this many
    pixels are encoded by the NNCF-quantized INT8 image encoder, smaller ones by the FP32 one (INT8 loses fidelity on
    small feature maps: ``ov_engine.image_int8_ignored_names``); 0 = every image FP32, as before. Not an
    InferenceService field of its own: an InferenceService with ``engine: openvino`` and ``precision: INT8`` gets
    :data:`FASTEST_IMAGE_INT8_MIN_SIDE_PIXELS` (:meth:`from_typed`), any other 0; also set by ``runtime serve
    --image-int8-min-side-pixels`` and the presets."""
    cpu_cores: float = 0.0
    """CPU cores the replica may use (``modalscale.runtime.cores.available_cores``: the cgroup quota, else the CPU
    affinity); sizes the router's instances (:func:`router_instances_for`). 0 = not known: sized for the batch
    only, as before."""
    stage: Stage = Stage.ALL
    """Which part of the model this replica serves (:class:`Stage`); ``all`` keeps the one-piece layouts."""
    image_encoder_url: str = ""
    """Stage ``front`` only (required there, empty otherwise): ``host:port`` of the image encoder pool's KServe v2
    gRPC endpoint (a Service's ClusterIP and port 8001 in a cluster without DNS, ``127.0.0.1:8001`` locally)."""

    def __post_init__(self) -> None:
        _check_int("model.name", len(self.model_name), 1, 127)
        _check_int("runtime.instanceCount", self.instance_count, 1, 16)
        _check_int("runtime.intraOpThreads", self.intra_op_threads, 1, 64)
        _check_int("runtime.maxBatchSize", self.max_batch_size, 0, 256)
        _check_int("runtime.dynamicBatching.maxQueueDelayMicroseconds", self.max_queue_delay_microseconds, 0,
                   1_000_000)
        _check_int("resources.gpu.count", self.gpu_count, 0, 16)
        if isinstance(self.cpu_cores, bool) or not isinstance(self.cpu_cores, int | float) \
                or not 0 <= self.cpu_cores <= 1024:
            raise InvalidSpec("cpu_cores", f"must be a number of cores in [0, 1024] (0 = unknown), "
                                     f"got {self.cpu_cores!r}")
        for name in ("max_images_per_request", "max_image_side_pixels", "max_image_pixels", "max_text_bytes",
                     "embedding_cache_entries"):
            high = MAX_IMAGE_PIXELS_BOUND if name == "max_image_pixels" else 1 << 40
            _check_int(name, getattr(self, name), 1, high)
        sizes = self.preferred_batch_sizes
        if list(sizes) != sorted(set(sizes)) or any(s < 1 for s in sizes):
            raise InvalidSpec(
                "spec.runtime.dynamicBatching.preferredBatchSizes", f"must be ascending, distinct and >= 1, "
                f"got {list(sizes)}")
        if sizes and sizes[-1] > self.max_batch_size:
            raise InvalidSpec(
                "spec.runtime.dynamicBatching.preferredBatchSizes", f"each entry must be <= runtime.maxBatchSize "
                f"({self.max_batch_size}), got {list(sizes)}")
        if not isinstance(self.precision, Precision):
            raise InvalidSpec("spec.runtime.precision", f"must be a Precision, got {self.precision!r}")
        if not isinstance(self.engine, Engine):
            raise InvalidSpec("engine", f"must be one of {[e.value for e in Engine]}, got {self.engine!r}")
        if self.engine is Engine.OPENVINO and self.precision is Precision.FP16 and not self.gpu_count:  # CRD: too
            raise InvalidSpec("engine", "openvino does not offer precision FP16 (no FP16 arithmetic on these CPUs); "
                                        "use precision FP32, BF16 or INT8 with openvino, or engine torch")
        _check_int("image_int8_min_side_pixels", self.image_int8_min_side_pixels, 0, IMAGE_INT8_MAX_SIDE_PIXELS)
        if self.image_int8_min_side_pixels and (self.engine is not Engine.OPENVINO
                                                or self.precision is not Precision.INT8):
            raise InvalidSpec(
                "image_int8_min_side_pixels", f"the INT8 image encoder needs engine openvino at precision INT8, got "
                f"engine {self.engine.value} at {self.precision.value}; set --image-int8-min-side-pixels 0 (every "
                f"image FP32) or use --engine openvino --precision INT8")
        _check_stage(self.stage, self.image_encoder_url)

    @property
    def batching_enabled(self) -> bool:
        """True when Triton may put several requests into one ``execute`` call."""
        return self.max_batch_size > 0 and self.dynamic_batching

    @property
    def uses_router(self) -> bool:
        """True when the repository has a router model in front of per-modality batched models."""
        return self.modality_aware_batching and self.batching_enabled

    @property
    def router_instances(self) -> int:
        """Router instances (:func:`router_instances_for` of ``max_batch_size`` and ``cpu_cores``)."""
        return router_instances_for(self.max_batch_size, self.cpu_cores)

    def modality_model_name(self, modality: str) -> str:
        """Name of the batched model serving ``modality`` (``image``, ``text``, ``image_text``) behind the router."""
        return f"{self.model_name}_{modality}"

    @property
    def instance_kind(self) -> str:
        """Triton ``instance_group.kind``: ``KIND_GPU`` when the replica has GPUs, else ``KIND_CPU``."""
        return "KIND_GPU" if self.gpu_count > 0 else "KIND_CPU"

    def replace(self, **changes: Any) -> RuntimeConfig:
        """Return a copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_isvc_spec(cls, spec: Mapping[str, Any] | None) -> RuntimeConfig:
        """Read an InferenceService ``spec`` (camelCase mapping, missing fields = CRD defaults) with
        :func:`modalscale.api.inferenceservice.parse_spec`, then :meth:`from_typed`.

        Raises:
            InvalidSpec: A field breaks a CRD rule (unknown fields included), or ``model.source`` is not
                ``BuiltIn``; ``field`` names it.
        """
        parsed = parse_spec(spec)
        return cls.from_typed(parsed.model, parsed.runtime, parsed.resources)

    @classmethod
    def from_typed(cls, model: ModelSpec, runtime: RuntimeSpec, resources: ResourceSpec) -> RuntimeConfig:
        """The config of the typed ``spec.model``, ``spec.runtime`` and ``spec.resources.gpu``.

        ``runtime.image`` and ``runtime.version`` choose the container and are not used here. ``runtime.engine``
        openvino at ``runtime.precision`` INT8 also gets the ``fastest`` preset's INT8 image encoder threshold
        (``image_int8_min_side_pixels`` = :data:`FASTEST_IMAGE_INT8_MIN_SIDE_PIXELS`, 160 px); every other spec 0.

        Raises:
            InvalidSpec: ``model.source`` is not ``BuiltIn`` (only that repository is generated here).
        """
        if model.source != "BuiltIn":
            raise InvalidSpec("spec.model.source", f"modalscale.runtime generates the repository only for "
                                                           f"BuiltIn, got {model.source!r}")
        batching = runtime.dynamic_batching
        engine = Engine(runtime.engine)
        return cls(
            model_name=model.name,
            instance_count=runtime.instance_count,
            intra_op_threads=runtime.intra_op_threads,
            max_batch_size=runtime.max_batch_size,
            dynamic_batching=batching.enabled,
            preferred_batch_sizes=batching.preferred_batch_sizes,
            max_queue_delay_microseconds=batching.max_queue_delay_us,
            modality_aware_batching=runtime.modality_aware_batching,
            response_cache=runtime.response_cache,
            embedding_cache=runtime.embedding_cache,
            precision=Precision(runtime.precision),
            engine=engine,
            gpu_count=resources.gpu_count,
            image_int8_min_side_pixels=(FASTEST_IMAGE_INT8_MIN_SIDE_PIXELS if engine is Engine.OPENVINO
                                        and runtime.precision == Precision.INT8.value else 0),
        )


ROUTERS_PER_CORE = 2
"""Router instances per available core (see :func:`router_instances_for`)."""


def router_instances_for(max_batch_size: int, cpu_cores: float) -> int:
    """How many router instances the client-facing model gets (pure).

    Each router instance forwards one request at a time and waits on its BLS call, so the count bounds the requests
    in flight to the modality models. Rule: ``min(16, max(2, 2 x max_batch_size))`` (enough to fill a batch twice),
    and with known cores at most ``max(2, ceil(ROUTERS_PER_CORE x cores))``: the modality models cannot execute more
    than about one batch per core at a time, so 2 per core keep one batch executing per core while the next fills;
    more routers only add processes (16 routers and 3 torch models on the 2-vCPU dev machine before this rule;
    ~41 MiB RSS each).

    Args:
        max_batch_size: The modality models' ``max_batch_size`` in requests.
        cpu_cores: Cores the replica may use; 0 = unknown (no core bound).
    Returns:
        2 .. 16 (2 cores -> 4; a 500m pod -> 2; 8 cores or more -> 16 with max_batch_size 8).
    """
    by_batch = min(16, max(2, 2 * max_batch_size))
    if cpu_cores <= 0:
        return by_batch
    return min(by_batch, max(2, math.ceil(ROUTERS_PER_CORE * cpu_cores - 1e-9)))


def model_parameters(cfg: RuntimeConfig, preload: tuple[str, ...] = ("image", "text")) -> dict[str, str]:
    """The ``parameters`` map handed to the Python model (Triton parameters are strings).

    Args:
        cfg: The runtime config.
        preload: Encoders the model loads at start-up (``image``, ``text``); others load on first use.

    Returns:
        Key -> ``string_value``; read back by ``modalscale.runtime.model.settings.ModelSettings``.
    """
    return {
        "intra_op_threads": str(cfg.intra_op_threads),
        "precision": cfg.precision.value,
        "modality_aware_batching": _bool_text(cfg.modality_aware_batching),
        "embedding_cache": _bool_text(cfg.embedding_cache),
        "embedding_cache_entries": str(cfg.embedding_cache_entries),
        "max_images_per_request": str(cfg.max_images_per_request),
        "max_image_side_pixels": str(cfg.max_image_side_pixels),
        "max_image_pixels": str(cfg.max_image_pixels),
        "max_text_bytes": str(cfg.max_text_bytes),
        "preload": ",".join(preload),
    } | ({"engine": cfg.engine.value} if cfg.engine is not Engine.TORCH else {}) \
        | ({"image_int8_min_side_pixels": str(cfg.image_int8_min_side_pixels)} if cfg.image_int8_min_side_pixels
           else {})


def render_config_pbtxt(cfg: RuntimeConfig, preload: tuple[str, ...] = ("image", "text"),
                        extra_parameters: Mapping[str, str] | None = None) -> str:
    """Render the Triton ``config.pbtxt`` (protobuf text format) of the built-in model (or, behind the router,
    of one per-modality model: call with ``cfg.replace(model_name=cfg.modality_model_name(m),
    response_cache=False)``).

    Args:
        cfg: The runtime config.
    Returns:
        The text; with ``max_batch_size: 0`` the inputs declare the leading ``1`` themselves so the request
        shapes (``IMAGES [1, n]``, ``TEXT [1, 1]``) do not depend on batching. ``IMAGES`` carries
        ``allow_ragged_batch`` whenever batching is on, so requests with different image counts share a batch.
        ``extra_parameters`` (a front's encoder address) follow :func:`model_parameters`.
    """
    batched = cfg.max_batch_size > 0
    lead: list[int] = [] if batched else [1]
    lines = [
        f"name: {_quote(cfg.model_name)}",
        'backend: "python"',
        f"max_batch_size: {cfg.max_batch_size}",
        *_interface_blocks(lead, ragged_images=batched),
        "instance_group [",
        "  {",
        f"    count: {cfg.instance_count}",
        f"    kind: {cfg.instance_kind}",
        "  }",
        "]",
    ]
    if cfg.batching_enabled:
        lines.append("dynamic_batching {")
        if cfg.preferred_batch_sizes:
            lines.append(f"  preferred_batch_size: [ {', '.join(str(s) for s in cfg.preferred_batch_sizes)} ]")
        lines.append(f"  max_queue_delay_microseconds: {cfg.max_queue_delay_microseconds}")
        lines.append("}")
    if cfg.response_cache:
        lines += ["response_cache {", "  enable: true", "}"]
    for key, value in (model_parameters(cfg, preload) | dict(extra_parameters or {})).items():
        lines += ["parameters {", f"  key: {_quote(key)}", f"  value: {{ string_value: {_quote(value)} }}", "}"]
    return "\n".join(lines) + "\n"


MODEL_PY = '''\
"""Triton Python-backend entry point of the modalscale built-in multimodal model (generated, do not edit).

The stub's embedded interpreter ignores PYTHONPATH, so the entries of PYTHONPATH are put in front of
sys.path here (as site directories, so .pth files of editable installs work). ``modalscale runtime serve``
sets PYTHONPATH to the directory holding modalscale and the site-packages with torch; in a container image
either set PYTHONPATH the same way or install modalscale[runtime] into the stub's Python.
"""

import os
import site
import sys

_before = list(sys.path)
for _entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    if _entry:
        site.addsitedir(_entry)
sys.path[:] = [_p for _p in sys.path if _p not in _before] + _before

from modalscale.runtime.model.triton_model import TritonPythonModel  # noqa: E402,F401
'''


MODALITIES = ("image", "text", "image_text")
"""Modality classes; one batched model per class behind the router."""
PRELOAD = {"image": ("image",), "text": ("text",), "image_text": ("image", "text")}
"""Encoders each per-modality model loads at start-up."""


def _client_model_head(cfg: RuntimeConfig) -> list[str]:
    """The first lines of a client-facing Python model's ``config.pbtxt`` (the router, the GPU orchestrator): the
    unbatched request interface (leading ``1`` declared, ``max_batch_size: 0``), ``cfg.router_instances`` CPU
    instances, and the response cache if enabled."""
    lines = [
        f"name: {_quote(cfg.model_name)}",
        'backend: "python"',
        "max_batch_size: 0",
        *_interface_blocks([1], ragged_images=False),
        "instance_group [",
        "  {",
        f"    count: {cfg.router_instances}",
        "    kind: KIND_CPU",
        "  }",
        "]",
    ]
    if cfg.response_cache:
        lines += ["response_cache {", "  enable: true", "}"]
    return lines


def render_router_pbtxt(cfg: RuntimeConfig) -> str:
    """Render the router's ``config.pbtxt``: the client-facing model when ``cfg.uses_router``.

    It has the same request interface as the unbatched model (leading ``1`` declared, ``max_batch_size: 0``),
    ``cfg.router_instances`` CPU instances, the response cache if enabled, and parameters naming the
    per-modality models it forwards to.
    """
    lines = _client_model_head(cfg)
    for modality in MODALITIES:
        lines += ["parameters {", f"  key: {_quote('route_' + modality)}",
                  f"  value: {{ string_value: {_quote(cfg.modality_model_name(modality))} }}", "}"]
    return "\n".join(lines) + "\n"


ROUTER_PY = MODEL_PY.replace("Python-backend entry point of the modalscale built-in multimodal model",
                             "Python-backend router of the modalscale built-in multimodal model").replace(
    "from modalscale.runtime.model.triton_model import TritonPythonModel",
    "from modalscale.runtime.model.router import TritonPythonModel")


def build_repository(cfg: RuntimeConfig) -> dict[str, str]:
    """All files of the model repository, keyed by path relative to the repository root.

    Args:
        cfg: The runtime config.
    Returns:
        Without the router: ``{"<name>/config.pbtxt", "<name>/1/model.py"}``. With ``cfg.uses_router``: the
        router as ``<name>`` plus ``<name>_image``, ``<name>_text`` and ``<name>_image_text`` (each the batched
        model, without response cache). With GPUs (``cfg.gpu_count > 0``): :func:`build_gpu_repository`. The
        operator stores the files in a ConfigMap (``/`` written as ``__`` in keys, per the CRD), the server writes
        them to a directory. Stage ``image-encoder`` (:func:`build_image_encoder_repository`) and ``front``
        (:func:`build_front_repository`) have their own; stage ``all`` is everything above.
    """
    if cfg.stage is Stage.IMAGE_ENCODER:
        return build_image_encoder_repository(cfg)
    if cfg.stage is Stage.FRONT:
        return build_front_repository(cfg)
    if cfg.gpu_count > 0:
        return build_gpu_repository(cfg)
    if not cfg.uses_router:
        return {
            f"{cfg.model_name}/config.pbtxt": render_config_pbtxt(cfg),
            f"{cfg.model_name}/1/model.py": MODEL_PY,
        }
    files = {
        f"{cfg.model_name}/config.pbtxt": render_router_pbtxt(cfg),
        f"{cfg.model_name}/1/model.py": ROUTER_PY,
    }
    for modality in MODALITIES:
        name = cfg.modality_model_name(modality)
        files[f"{name}/config.pbtxt"] = render_config_pbtxt(cfg.replace(model_name=name, response_cache=False),
                                                             preload=PRELOAD[modality])
        files[f"{name}/1/model.py"] = MODEL_PY
    return files


GPU_IMAGE_BUCKET_SIDES = (128, 256, 384)
"""Fixed square image sizes of the GPU layout, in pixels: each image (its resolution bucket, longer side <= 384) is
zero-padded to the smallest of these that holds it, so the GPU image encoder sees three input shapes instead of up
to 144 (12 x 12 multiples of 32); masked pooling keeps the padding out of the average (it still reaches the
convolutions at the borders)."""
GPU_ENCODER_MAX_BATCH = 64
"""``max_batch_size`` of the GPU image encoder model, in images per execution. On an H200
(``benchmarks/gpu_encoders.py``, docs/benchmarks.md) 64 images at 384 px ran at 87 % of the best measured FP16
throughput (128: +15 %, twice the pass time)."""
GPU_TEXT_ENCODER_MAX_BATCH = 128
"""``max_batch_size`` of the GPU text encoder model, in texts per execution. On an H200 a pass of 128 texts gave
1.4-2.9x the texts/s of 64 at FP16 (length buckets 16 to 256 tokens) for at most 10 ms a pass."""
GPU_ENCODERS = ("image_encoder", "text_encoder")
"""Encoder models of the GPU layout, named ``<name>_<encoder>``."""
PIXELS, VALID_HW, TOKEN_IDS, FEATURES, CLASSES = "PIXELS", "VALID_HW", "TOKEN_IDS", "FEATURES", "CLASSES"
"""Tensors between the GPU layout's orchestrator and its encoder models (not part of the client interface)."""


def gpu_precision(cfg: RuntimeConfig) -> Precision:
    """Encoder precision of the GPU layout: INT8 (torch dynamic quantization, CPU-only) runs as FP16; FP32, FP16
    and BF16 as given (FP16 is what a GPU InferenceService should ask for: ``spec.runtime.precision: FP16``)."""
    return Precision.FP16 if cfg.precision is Precision.INT8 else cfg.precision


def gpu_image_sides(cfg: RuntimeConfig) -> tuple[int, ...]:
    """The fixed square sizes (pixels) for ``cfg``: :data:`GPU_IMAGE_BUCKET_SIDES` below ``max_image_side_pixels``,
    then that side itself (every resolution bucket fits the last)."""
    side = cfg.max_image_side_pixels
    return tuple(s for s in GPU_IMAGE_BUCKET_SIDES if s < side) + (side,)


def render_gpu_encoder_pbtxt(cfg: RuntimeConfig, encoder: str) -> str:
    """``config.pbtxt`` of one GPU encoder model (``image_encoder`` or ``text_encoder``).

    ``KIND_GPU`` instances (``instance_count`` per GPU, on GPUs ``0 .. gpu_count - 1``), ``max_batch_size``
    :data:`GPU_ENCODER_MAX_BATCH` (images) or :data:`GPU_TEXT_ENCODER_MAX_BATCH` (texts) and ``dynamic_batching``:
    requests of every modality class that need this encoder
    share its queue, so batches form per encoder, not per modality class (image + text requests feed both).
    Inputs are ragged (``allow_ragged_batch``): each request keeps its own image size or token count and the model
    runs one pass per fixed image size / text length bucket.

    Raises:
        ValueError: Unknown ``encoder``.
    """
    if encoder == "image_encoder":
        inputs = [_tensor_block(PIXELS, "TYPE_FP16", [3, -1, -1], ragged=True) + ",",
                  _tensor_block(VALID_HW, "TYPE_INT32", [2], ragged=True)]
        outputs = [_tensor_block(FEATURES, "TYPE_FP32", [IMAGE_FEATURE_DIM]) + ",",
                   _tensor_block(CLASSES, "TYPE_INT32", [1])]
        preload: tuple[str, ...] = ("image",)
        max_batch = GPU_ENCODER_MAX_BATCH
    elif encoder == "text_encoder":
        inputs = [_tensor_block(TOKEN_IDS, "TYPE_INT64", [-1], ragged=True)]
        outputs = [_tensor_block(FEATURES, "TYPE_FP32", [TEXT_FEATURE_DIM])]
        preload = ("text",)
        max_batch = GPU_TEXT_ENCODER_MAX_BATCH
    else:
        raise ValueError(f"encoder must be one of {GPU_ENCODERS}, got {encoder!r}")
    gpus = ", ".join(str(g) for g in range(cfg.gpu_count))
    lines = [
        f"name: {_quote(cfg.model_name + '_' + encoder)}",
        'backend: "python"',
        f"max_batch_size: {max_batch}",
        "input [", *inputs, "]",
        "output [", *outputs, "]",
        "instance_group [",
        "  {",
        f"    count: {cfg.instance_count}",
        "    kind: KIND_GPU",
        f"    gpus: [ {gpus} ]",
        "  }",
        "]",
        "dynamic_batching {",
        f"  max_queue_delay_microseconds: {cfg.max_queue_delay_microseconds}",
        "}",
    ]
    params = model_parameters(cfg.replace(precision=gpu_precision(cfg), engine=Engine.TORCH,
                                          image_int8_min_side_pixels=0), preload)
    for key, value in params.items():
        lines += ["parameters {", f"  key: {_quote(key)}", f"  value: {{ string_value: {_quote(value)} }}", "}"]
    return "\n".join(lines) + "\n"


def render_gpu_orchestrator_pbtxt(cfg: RuntimeConfig) -> str:
    """``config.pbtxt`` of the GPU layout's client-facing model: CPU instances (sized like the router's) that
    decode and tokenize each request, send its images and text to the encoder models (BLS), fuse and answer. Same
    request interface as every other layout (``max_batch_size 0``, leading ``1`` declared)."""
    lines = _client_model_head(cfg)
    params = model_parameters(cfg.replace(precision=Precision.FP32, engine=Engine.TORCH,
                                          image_int8_min_side_pixels=0), preload=())
    params["image_bucket_sides"] = ",".join(str(s) for s in gpu_image_sides(cfg))
    for encoder in GPU_ENCODERS:
        params[f"route_{encoder}"] = f"{cfg.model_name}_{encoder}"
    for key, value in params.items():
        lines += ["parameters {", f"  key: {_quote(key)}", f"  value: {{ string_value: {_quote(value)} }}", "}"]
    return "\n".join(lines) + "\n"


def _entry_point(class_path: str, what: str) -> str:
    module, _, name = class_path.rpartition(".")
    return MODEL_PY.replace("Python-backend entry point of the modalscale built-in multimodal model", what).replace(
        "from modalscale.runtime.model.triton_model import TritonPythonModel",
        f"from {module} import {name} as TritonPythonModel")


def build_gpu_repository(cfg: RuntimeConfig) -> dict[str, str]:
    """The GPU layout (``cfg.gpu_count > 0``): ``<name>`` (orchestrator, CPU), ``<name>_image_encoder`` and
    ``<name>_text_encoder`` (``KIND_GPU``, precision :func:`gpu_precision`, fixed image sizes
    :func:`gpu_image_sides`, encoder-level dynamic batching); models in ``modalscale.runtime.model.gpu_models``.

    Not run on a GPU in this project (no GPU machine); ``tests/integration/runtime/test_runtime_gpu_layout.py``
    serves the same repository with the instance kind switched to ``KIND_CPU``.
    """
    name = cfg.model_name
    files = {
        f"{name}/config.pbtxt": render_gpu_orchestrator_pbtxt(cfg),
        f"{name}/1/model.py": _entry_point("modalscale.runtime.model.gpu_models.OrchestratorModel",
                                           "Python-backend orchestrator of the modalscale GPU layout"),
    }
    for encoder, cls in zip(GPU_ENCODERS, ("ImageEncoderModel", "TextEncoderModel"), strict=True):
        files[f"{name}_{encoder}/config.pbtxt"] = render_gpu_encoder_pbtxt(cfg, encoder)
        files[f"{name}_{encoder}/1/model.py"] = _entry_point(f"modalscale.runtime.model.gpu_models.{cls}",
                                                             f"Python-backend GPU {encoder} of modalscale")
    return files


ENCODER_IMAGE = "IMAGE"
"""Input of :data:`IMAGE_ENCODER_MODEL`: one encoded image per batch item (``TYPE_STRING``, dims ``[1]``)."""
ENCODER_IMAGE_SIZE = "IMAGE_SIZE"
"""Output of :data:`IMAGE_ENCODER_MODEL`: ``(width, height)`` of each image as displayed, before resizing
(``TYPE_INT32``, dims ``[2]``), so that a front records the pixel features without decoding."""
FRONT_PRELOAD = {"image": (), "text": ("text",), "image_text": ("text",)}
"""Encoders each per-modality model of a front loads at start-up: never the image encoder (the pool has it)."""


def image_encoder_max_batch_size(cfg: RuntimeConfig) -> int:
    """``max_batch_size`` of :data:`IMAGE_ENCODER_MODEL`, in images (its batch dimension is images, not requests): at
    least ``max_images_per_request`` (a request's images travel in one call), else ``max_batch_size`` on CPU and
    :data:`GPU_ENCODER_MAX_BATCH` with GPUs."""
    per_execution = GPU_ENCODER_MAX_BATCH if cfg.gpu_count > 0 else cfg.max_batch_size
    return max(cfg.max_images_per_request, per_execution)


def _stage_model_cfg(cfg: RuntimeConfig) -> RuntimeConfig:
    """The config a stage's torch models run with: as given on CPU; with GPUs precision :func:`gpu_precision` and
    the torch engine, as the GPU layout's encoders."""
    if cfg.gpu_count == 0:
        return cfg
    return cfg.replace(precision=gpu_precision(cfg), engine=Engine.TORCH, image_int8_min_side_pixels=0)


def render_image_encoder_pbtxt(cfg: RuntimeConfig) -> str:
    """``config.pbtxt`` of :data:`IMAGE_ENCODER_MODEL`, the model of stage ``image-encoder``.

    Tensor interface (the batch dimension counts images; a front sends one request per client request, holding all
    of its images, so a bad image fails that request only):

    ============== ============ ========== ===============================================================
    name           Triton type  shape      meaning
    ============== ============ ========== ===============================================================
    IMAGE          TYPE_STRING  [k, 1]     k encoded images (the client's ``IMAGES`` bytes, unchanged)
    FEATURES       TYPE_FP32    [k, 1280]  pooled EfficientNet-Lite0 features per image (FP32 at any precision)
    CLASSES        TYPE_INT32   [k, 1]     ImageNet-1k top-1 class index per image
    IMAGE_SIZE     TYPE_INT32   [k, 2]     ``(width, height)`` as displayed, before resizing
    ============== ============ ========== ===============================================================

    ``max_batch_size`` :func:`image_encoder_max_batch_size`; with batching on (``cfg.batching_enabled``) a
    ``dynamic_batching`` block with ``max_queue_delay_microseconds``, so images of every front replica's requests
    share executions (one encoder pass per resolution bucket, as in every CPU layout); without batching each request
    runs alone. ``instance_count`` instances of ``cfg.instance_kind`` (GPUs ``0 .. gpu_count - 1``). Validation,
    decoding, resizing, bucketing and the embedding cache are the one-piece model's (``pipeline.MultimodalPipeline``),
    so a bad image gets the same ``<Reason>: IMAGES[i]: ...`` message (``INVALID_ARG``).
    """
    model_cfg = _stage_model_cfg(cfg)
    lines = [
        f"name: {_quote(IMAGE_ENCODER_MODEL)}",
        'backend: "python"',
        f"max_batch_size: {image_encoder_max_batch_size(cfg)}",
        "input [", _tensor_block(ENCODER_IMAGE, "TYPE_STRING", [1]), "]",
        "output [",
        _tensor_block(FEATURES, "TYPE_FP32", [IMAGE_FEATURE_DIM]) + ",",
        _tensor_block(CLASSES, "TYPE_INT32", [1]) + ",",
        _tensor_block(ENCODER_IMAGE_SIZE, "TYPE_INT32", [2]),
        "]",
        "instance_group [",
        "  {",
        f"    count: {cfg.instance_count}",
        f"    kind: {cfg.instance_kind}",
    ]
    if cfg.gpu_count > 0:
        lines.append(f"    gpus: [ {', '.join(str(g) for g in range(cfg.gpu_count))} ]")
    lines += ["  }", "]"]
    if cfg.batching_enabled:
        lines += ["dynamic_batching {", f"  max_queue_delay_microseconds: {cfg.max_queue_delay_microseconds}", "}"]
    for key, value in model_parameters(model_cfg, preload=("image",)).items():
        lines += ["parameters {", f"  key: {_quote(key)}", f"  value: {{ string_value: {_quote(value)} }}", "}"]
    return "\n".join(lines) + "\n"


def build_image_encoder_repository(cfg: RuntimeConfig) -> dict[str, str]:
    """Stage ``image-encoder``: one model, :data:`IMAGE_ENCODER_MODEL` (:func:`render_image_encoder_pbtxt`; Python
    model ``modalscale.runtime.model.stage_models.ImageEncoderStageModel``). ``cfg.model_name`` is not used (the
    name is fixed, so a front needs only the address)."""
    return {
        f"{IMAGE_ENCODER_MODEL}/config.pbtxt": render_image_encoder_pbtxt(cfg),
        f"{IMAGE_ENCODER_MODEL}/1/model.py": _entry_point(
            "modalscale.runtime.model.stage_models.ImageEncoderStageModel",
            "Python-backend image encoder of a modalscale image-encoder stage"),
    }


def build_front_repository(cfg: RuntimeConfig) -> dict[str, str]:
    """Stage ``front``: the one-piece layout's client-facing models (the router and ``<name>_image``,
    ``<name>_text``, ``<name>_image_text`` with ``cfg.uses_router``, else one model ``<name>``), with the same
    request interface, batching and routing, but each batched model is
    ``modalscale.runtime.model.stage_models.FrontModel``: it loads only the text encoder (:data:`FRONT_PRELOAD`),
    sends each request's images to :data:`IMAGE_ENCODER_MODEL` at ``cfg.image_encoder_url`` (parameters
    ``image_encoder_url`` and ``image_encoder_model``) while it encodes the texts, and fuses. With GPUs its
    instances are ``KIND_GPU`` at :func:`gpu_precision`."""
    model_cfg = _stage_model_cfg(cfg)
    front_py = _entry_point("modalscale.runtime.model.stage_models.FrontModel",
                            "Python-backend front model of a modalscale front stage")
    extra = {"image_encoder_url": cfg.image_encoder_url, "image_encoder_model": IMAGE_ENCODER_MODEL}
    if not cfg.uses_router:
        return {
            f"{cfg.model_name}/config.pbtxt": render_config_pbtxt(model_cfg, preload=("text",), extra_parameters=extra),
            f"{cfg.model_name}/1/model.py": front_py,
        }
    files = {
        f"{cfg.model_name}/config.pbtxt": render_router_pbtxt(cfg),
        f"{cfg.model_name}/1/model.py": ROUTER_PY,
    }
    for modality in MODALITIES:
        name = cfg.modality_model_name(modality)
        files[f"{name}/config.pbtxt"] = render_config_pbtxt(
            model_cfg.replace(model_name=name, response_cache=False), preload=FRONT_PRELOAD[modality],
            extra_parameters=extra)
        files[f"{name}/1/model.py"] = front_py
    return files


def served_model_name(cfg: RuntimeConfig) -> str:
    """The model a readiness probe or a client checks for ``cfg``'s stage: ``cfg.model_name`` for ``all`` and
    ``front``, :data:`IMAGE_ENCODER_MODEL` for ``image-encoder``."""
    return IMAGE_ENCODER_MODEL if cfg.stage is Stage.IMAGE_ENCODER else cfg.model_name


CONFIGMAP_SEPARATOR = "__"
"""ConfigMap keys cannot contain ``/``; the CRD's convention writes it as ``__``."""


def to_configmap_data(files: Mapping[str, str]) -> dict[str, str]:
    """Repository files -> ConfigMap ``data`` (``multimodal/1/model.py`` -> ``multimodal__1__model.py``).

    Raises:
        ValueError: A path already contains ``__`` (it would not round-trip).
    """
    data = {}
    for path, content in files.items():
        if CONFIGMAP_SEPARATOR in path:
            raise ValueError(f"{path}: repository paths must not contain {CONFIGMAP_SEPARATOR!r}")
        data[path.replace("/", CONFIGMAP_SEPARATOR)] = content
    return data


def from_configmap_data(data: Mapping[str, str]) -> dict[str, str]:
    """Inverse of :func:`to_configmap_data` (for a ConfigMap mounted as flat files)."""
    return {key.replace(CONFIGMAP_SEPARATOR, "/"): content for key, content in data.items()}


def server_arguments(cfg: RuntimeConfig) -> list[str]:
    """Extra ``tritonserver`` arguments the config needs (the response cache must be sized by the server).

    Returns:
        E.g. ``["--cache-config", "local,size=67108864"]`` when ``response_cache`` is on, else ``[]``.
    """
    if cfg.response_cache:
        return ["--cache-config", f"local,size={RESPONSE_CACHE_BYTES}"]
    return []


def config_summary(cfg: RuntimeConfig) -> str:
    """One-line JSON of the config, for logs and ConfigMap annotations."""
    data = dataclasses.asdict(cfg)
    data["precision"] = cfg.precision.value
    if cfg.engine is Engine.TORCH:  # the summary of a torch config is what it was before the engine existed
        del data["engine"]
    else:
        data["engine"] = cfg.engine.value
    if not cfg.image_int8_min_side_pixels:  # nor does a config without the INT8 image encoder
        del data["image_int8_min_side_pixels"]
    if cfg.stage is Stage.ALL:  # nor does a one-piece config (a stage's summary names it)
        del data["stage"], data["image_encoder_url"]
    else:
        data["stage"] = cfg.stage.value
    data["preferred_batch_sizes"] = list(cfg.preferred_batch_sizes)
    return json.dumps(data, sort_keys=True)


def _interface_blocks(lead: list[int], ragged_images: bool) -> list[str]:
    """The client-facing ``input``/``output`` blocks (the request interface), shared by the batched model and
    the router; ``lead`` is the batch dimension prefix of the dims."""
    return [
        "input [",
        _tensor_block(INPUT_IMAGES, "TYPE_STRING", lead + [-1], optional=True, ragged=ragged_images) + ",",
        _tensor_block(INPUT_TEXT, "TYPE_STRING", lead + [1], optional=True),
        "]",
        "output [",
        _tensor_block(OUTPUT_EMBEDDING, "TYPE_FP32", lead + [EMBEDDING_DIM]) + ",",
        _tensor_block(OUTPUT_MODALITY, "TYPE_STRING", lead + [1]) + ",",
        _tensor_block(OUTPUT_IMAGE_CLASSES, "TYPE_INT32", lead + [-1]),
        "]",
    ]


def _tensor_block(name: str, data_type: str, dims: list[int], optional: bool = False,
                  ragged: bool = False) -> str:
    lines = ["  {", f"    name: {_quote(name)}", f"    data_type: {data_type}",
             f"    dims: [ {', '.join(str(d) for d in dims)} ]"]
    if optional:
        lines.append("    optional: true")
    if ragged:
        lines.append("    allow_ragged_batch: true")
    lines.append("  }")
    return "\n".join(lines)


def _quote(text: str) -> str:
    return json.dumps(text)


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(field: str, value: object, low: int, high: int) -> None:
    """Raise InvalidSpec naming ``field`` (a CRD path below ``spec.`` or a config attribute)."""
    if not _is_int(value) or not low <= value <= high:  # type: ignore[operator]
        path = f"spec.{field}" if "." in field else field
        raise InvalidSpec(path, f"must be an integer in [{low}, {high}], got {value!r}")


def _check_stage(stage: object, url: object) -> None:
    """Raise InvalidSpec naming ``stage`` or ``image_encoder_url`` (and the flag that fixes it) when they do not fit
    together: a front needs the pool's ``host:port``; the other stages must not have one."""
    if not isinstance(stage, Stage):
        raise InvalidSpec("stage", f"must be one of {[s.value for s in Stage]}, got {stage!r}")
    if not isinstance(url, str):
        raise InvalidSpec("image_encoder_url", f"must be a string (host:port), got {url!r}")
    if stage is not Stage.FRONT:
        if url:
            raise InvalidSpec("image_encoder_url", f"must be empty for stage {stage.value}: only a front calls the "
                                                   f"image encoder pool, got {url!r}; drop --image-encoder-url or use "
                                                   "--stage front")
        return
    if not url:
        raise InvalidSpec("image_encoder_url", "required for stage front: the host:port of the image encoder pool's "
                                               "KServe v2 gRPC endpoint, e.g. 10.96.0.12:8001; set "
                                               "--image-encoder-url")
    match = _HOST_PORT.match(url)
    if match is None or not 1 <= int(match.group(1)) <= 65535:
        raise InvalidSpec("image_encoder_url", f"must be host:port of the image encoder pool's KServe v2 gRPC "
                                               f"endpoint (no scheme, no path; port 1-65535), e.g. 10.96.0.12:8001, "
                                               f"got {url!r}")


FASTEST_IMAGE_INT8_MIN_SIDE_PIXELS = 160
"""``image_int8_min_side_pixels`` of the ``fastest`` preset, chosen by measurement (``docs/benchmarks.md``, "INT8 image
encoder"; ``benchmarks/runtime_capacity.py --image-int8-table``): image-feature cosine to torch FP32 on 235 fidelity
crops min 0.9952 on the 145 with a shorter side of 160 px or more, but 0.989 at 128 px and 0.982 at 96 px."""

PRESETS: dict[str, RuntimeConfig] = {
    "naive": RuntimeConfig(instance_count=2, intra_op_threads=1, max_batch_size=0, dynamic_batching=False,
                           modality_aware_batching=False, response_cache=False, embedding_cache=False,
                           precision=Precision.FP32),
    "default": RuntimeConfig(),
    "fastest": RuntimeConfig(instance_count=2, intra_op_threads=1, max_batch_size=0, dynamic_batching=False,
                             modality_aware_batching=False, response_cache=False, embedding_cache=True,
                             precision=Precision.INT8, engine=Engine.OPENVINO,
                             image_int8_min_side_pixels=FASTEST_IMAGE_INT8_MIN_SIDE_PIXELS),
}
"""Named configurations (``runtime serve --preset``, the benchmarks' variant names):

* ``naive``: the baseline every speed-up is measured against: FP32, every request alone (``max_batch_size 0``),
  no router or modality queues, no caches; 2 instances x 1 thread (one process per core of the 2-core machines
  the figures come from).
* ``default``: what an InferenceService with no ``spec.runtime`` fields gets (the CRD defaults).
* ``fastest``: the configuration behind the runtime's headline figure in ``docs/benchmarks.md``; an InferenceService
  gets it with ``spec.runtime`` ``{engine: openvino, precision: INT8, instanceCount: 2, intraOpThreads: 1,
  maxBatchSize: 0, dynamicBatching: {enabled: false}, modalityAwareBatching: false}`` (the other fields at their
  defaults). ``engine: openvino, precision: INT8`` alone gives the ``default`` layout (router, modality queues,
  dynamic batching) with fastest's encoders.
"""


def preset_flags(name: str) -> list[str]:
    """The explicit ``runtime serve`` flags equivalent to preset ``name`` (every config field the CLI can set).

    Raises:
        KeyError: Unknown preset.
    """
    return config_flags(PRESETS[name])


def config_flags(cfg: RuntimeConfig) -> list[str]:
    """The explicit ``runtime serve`` flags that give ``cfg`` (every config field the CLI can set)."""

    def flag(on: bool, option: str) -> str:
        return f"--{option}" if on else f"--no-{option}"

    flags = ["--model-name", cfg.model_name, "--instance-count", str(cfg.instance_count),
             "--intra-op-threads", str(cfg.intra_op_threads), "--max-batch-size", str(cfg.max_batch_size),
             flag(cfg.dynamic_batching, "dynamic-batching")]
    if cfg.preferred_batch_sizes:
        flags += ["--preferred-batch-sizes", ",".join(str(b) for b in cfg.preferred_batch_sizes)]
    flags += ["--max-queue-delay-us", str(cfg.max_queue_delay_microseconds),
              flag(cfg.modality_aware_batching, "modality-aware-batching"), flag(cfg.response_cache, "response-cache"),
              flag(cfg.embedding_cache, "embedding-cache"), "--precision", cfg.precision.value,
              "--engine", cfg.engine.value]
    if cfg.image_int8_min_side_pixels:
        flags += ["--image-int8-min-side-pixels", str(cfg.image_int8_min_side_pixels)]
    if cfg.stage is not Stage.ALL:
        flags += ["--stage", cfg.stage.value]
    if cfg.image_encoder_url:
        flags += ["--image-encoder-url", cfg.image_encoder_url]
    return flags
