"""The pure half of ``modalscale profile``: which requests to send, how Triton's statistics become profile rows,
and how the fitted service-time model is judged.

What is measured. A request's service time is the time it occupied an execution slot of the model that executes
it (``<model>_<modality>`` behind the router of modality-aware batching, else ``<model>``), queueing excluded:
Triton's ``compute_input + compute_infer + compute_output``. Sent one at a time (concurrency 1), each request is
its own batch, so the change of the model's cumulative ``inference_stats`` across the request is exactly its
service time (:func:`sequential_row`). Sent ``c`` at a time, requests share batches: the change of
``batch_stats`` per batch size ``b`` gives the mean batch time ``T_b``, and each request of such a batch is
charged ``T_b / b`` (:func:`batched_rows`; one row per executed batch, all rows of a batch size carrying the
mean). The operator's Prometheus observer computes the same quantity from ``nv_inference_*`` counters, so the
model and its online calibration agree on what a service time is.

How it is judged (:func:`evaluate_profile`): the regressor against ``DummyRegressor`` (training mean) and a
linear model in text tokens, on held-out requests (random 25 % of the rows) and on held-out request shapes (every
repeat of a shape held out together: interpolation to shapes never measured). The repeat spread is the MAPE of
predicting each held-out request by the median of the other measured repeats of its shape: how far a request's
own time strays from its shape's typical time (machine noise, which no model of the features can remove).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from modalscale.autoscaler.features import Modality, features_from_mapping, modality_of
from modalscale.autoscaler.profile_data import PROFILE_COLUMNS
from modalscale.autoscaler.regressor import Evaluation, ServiceTimeRegressor, compare_with_baselines


@dataclass(frozen=True, slots=True)
class RequestShape:
    """One request to send: ``image_count`` photos of ``width`` x ``height`` pixels and/or ``text_tokens`` tokens."""

    image_count: int = 0
    width: int = 0
    height: int = 0
    text_tokens: int = 0

    def __post_init__(self) -> None:
        if self.image_count < 0 or self.text_tokens < 0 or (self.image_count == 0 and self.text_tokens == 0):
            raise ValueError(f"a request needs images or text, with counts >= 0: {self!r}")
        if self.image_count and (self.width < 1 or self.height < 1):
            raise ValueError(f"image width and height must be >= 1: {self!r}")

    @property
    def modality(self) -> Modality:
        """``text``, ``image`` or ``image_text``."""
        return modality_of(self.image_count, self.text_tokens)

    @property
    def image_pixels(self) -> int:
        """Pixels summed over the request's images."""
        return self.image_count * self.width * self.height


@dataclass(frozen=True, slots=True)
class ProfileGrid:
    """The request shapes a profile draws from.

    Attributes:
        image_sizes: ``(width, height)`` choices in pixels. The default covers upload resolutions (longer side
            480 to 1920 px): the runtime scales every image to a 384-pixel longer side before encoding, so above
            that an image takes a constant encoder pass plus decoding that grows with its pixels, which the
            additive model represents exactly. Below 384 px the encoder time ramps with the resolution, which a
            model linear in total pixels and image count cannot follow (measured: 12 ms for 64x64, 63 ms for
            320x240, 67 ms for 1024x768 per image); profile small images with ``kind="boosted"``.
        images_per_request: Image counts of requests with images.
        text_tokens: Token counts of requests with text (the text encoder reads at most 256).
        modalities: Modality classes to draw, in equal parts.
    """

    image_sizes: tuple[tuple[int, int], ...] = ((480, 360), (640, 480), (800, 600), (1024, 768), (1280, 720),
                                                (1600, 1200), (1920, 1080))
    images_per_request: tuple[int, ...] = (1, 2, 4)
    text_tokens: tuple[int, ...] = (8, 32, 64, 128, 256)
    modalities: tuple[Modality, ...] = (Modality.TEXT, Modality.IMAGE, Modality.IMAGE_TEXT)

    def draw(self, n_shapes: int, seed: int = 0) -> list[RequestShape]:
        """``n_shapes`` shapes drawn uniformly from the grid (seeded: same seed, same shapes).

        Raises:
            ValueError: ``n_shapes < 1``.
        """
        if n_shapes < 1:
            raise ValueError("n_shapes must be >= 1")
        rng = np.random.default_rng(seed)
        shapes = []
        for i in range(n_shapes):
            modality = self.modalities[i % len(self.modalities)]  # equal parts, then shuffled below
            images = int(rng.choice(self.images_per_request)) if modality != Modality.TEXT else 0
            w, h = self.image_sizes[int(rng.integers(len(self.image_sizes)))] if images else (0, 0)
            tokens = int(rng.choice(self.text_tokens)) if modality != Modality.IMAGE else 0
            shapes.append(RequestShape(images, w, h, tokens))
        order = rng.permutation(len(shapes))
        return [shapes[i] for i in order]

    def warmup_shapes(self) -> list[RequestShape]:
        """One request per image size and per token count (first runs of a new input shape are slow)."""
        return ([RequestShape(1, w, h, 0) for w, h in self.image_sizes]
                + [RequestShape(0, 0, 0, t) for t in self.text_tokens])


def design(shapes: Sequence[RequestShape], repeats: int, seed: int = 0) -> list[RequestShape]:
    """Every shape ``repeats`` times, in a seeded random order (so drift in the machine spreads over shapes)."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    out = [s for s in shapes for _ in range(repeats)]
    order = np.random.default_rng(seed + 1).permutation(len(out))
    return [out[i] for i in order]


def _ns(stats: Mapping[str, Any], part: str) -> int:
    return int((stats.get(part) or {}).get("ns", 0))


def compute_ns(inference_stats: Mapping[str, Any]) -> int:
    """``compute_input + compute_infer + compute_output`` nanoseconds of Triton's ``inference_stats`` block."""
    return sum(_ns(inference_stats, p) for p in ("compute_input", "compute_infer", "compute_output"))


def sequential_row(shape: RequestShape, before: Mapping[str, Any], after: Mapping[str, Any], time_s: float
                   ) -> dict[str, Any] | None:
    """The profile row of one request sent alone, from the executing model's stats before and after it.

    Args:
        shape: The request.
        before: ``model_stats[0]`` of Triton's statistics API before the request.
        after: The same after its response.
        time_s: Seconds since the profile started.
    Returns:
        A row (``PROFILE_COLUMNS``) with ``batch_size`` 1, or None when the stats moved by anything but one
        request in one execution (something else was served meanwhile).
    """
    requests = int(after.get("inference_count", 0)) - int(before.get("inference_count", 0))
    executions = int(after.get("execution_count", 0)) - int(before.get("execution_count", 0))
    ns = compute_ns(after.get("inference_stats") or {}) - compute_ns(before.get("inference_stats") or {})
    if requests != 1 or executions != 1 or ns <= 0:
        return None
    return _row(shape, 1, ns / 1e6, time_s)


def batched_rows(shape: RequestShape, before: Mapping[str, Any], after: Mapping[str, Any], time_s: float
                 ) -> list[dict[str, Any]]:
    """Rows of requests of one shape sent concurrently, from the change of Triton's ``batch_stats``.

    For each batch size ``b`` that executed ``k`` batches taking ``ns`` in total, ``k`` rows are returned with
    ``batch_size = b`` and ``service_ms = ns / k / b / 1e6`` (each request's share of its batch's mean time).
    """
    def per_size(stats: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
        out = {}
        for entry in stats.get("batch_stats") or []:
            out[int(entry["batch_size"])] = (int((entry.get("compute_infer") or {}).get("count", 0)), compute_ns(entry))
        return out

    old, new = per_size(before), per_size(after)
    rows = []
    for b in sorted(new):
        k = new[b][0] - old.get(b, (0, 0))[0]
        ns = new[b][1] - old.get(b, (0, 0))[1]
        if k > 0 and ns > 0:
            rows += [_row(shape, b, ns / k / b / 1e6, time_s)] * k
    return rows


def _row(shape: RequestShape, batch_size: int, service_ms: float, time_s: float) -> dict[str, Any]:
    return {"time_s": float(time_s), "modality": shape.modality.value, "image_count": shape.image_count,
            "image_pixels": shape.image_pixels, "text_tokens": shape.text_tokens, "batch_size": int(batch_size),
            "service_ms": float(service_ms)}


def to_table(rows: Iterable[Mapping[str, Any]]) -> dict[str, NDArray[Any]]:
    """Rows -> the column table of ``profile_data`` (``PROFILE_COLUMNS`` -> arrays)."""
    rows = list(rows)
    table: dict[str, NDArray[Any]] = {}
    for c in PROFILE_COLUMNS:
        values = [r[c] for r in rows]
        table[c] = np.array(values, dtype=object if c == "modality" else np.int64 if c not in (
            "time_s", "service_ms") else np.float64)
    return table


@dataclass(frozen=True)
class SplitReport:
    """Held-out errors of one split.

    Attributes:
        name: ``requests`` (random rows) or ``shapes`` (all repeats of a shape held out together).
        n_train: Training rows.
        results: ``{"model"|"dummy_mean"|"linear_in_tokens": Evaluation}``.
        model_mape_by_modality: The model's MAPE (ratio) per modality class on the held-out rows.
        noise_floor_mape: MAPE of the median of the other repeats of the same shape (None without repeats).
    """

    name: str
    n_train: int
    results: dict[str, Evaluation]
    model_mape_by_modality: dict[str, float] = field(default_factory=dict)
    noise_floor_mape: float | None = None


def _shape_keys(table: Mapping[str, NDArray[Any]]) -> NDArray[np.str_]:
    return np.array([f"{m}/{i}/{p}/{t}/{b}" for m, i, p, t, b in zip(
        table["modality"], table["image_count"], table["image_pixels"], table["text_tokens"], table["batch_size"],
        strict=True)])


def _noise_floor(keys: NDArray[np.str_], y: NDArray[np.float64], test: NDArray[np.bool_]) -> float | None:
    errors = []
    for i in np.flatnonzero(test):
        others = (keys == keys[i])
        others[i] = False
        if others.any():
            errors.append(abs(float(np.median(y[others])) - y[i]) / y[i])
    return float(np.mean(errors)) if errors else None


def profile_problem(table: Mapping[str, NDArray[Any]]) -> str | None:
    """Why the model's terms cannot be told apart on this profile's request shapes, with the fix; None: they can.

    The additive model splits a request's time into per-megapixel, per-image, per-token and per-modality fixed
    parts (``regressor.TERMS``). A profile in which one of them moves in lockstep with another (every prompt of one
    length, every request with one image, every image of one size) fits its rows as well whatever the split, so
    requests unlike them are predicted by an arbitrary split: held-out rows of the same shapes cannot show it.

    Args:
        table: A profile (``PROFILE_COLUMNS`` -> arrays), each row valid (``read_profile_csv`` checks them).
    Returns:
        A message naming the column and the flags that measure more varied shapes, or None.
    """
    images = np.asarray(table["image_count"], dtype=np.float64)
    pixels = np.asarray(table["image_pixels"], dtype=np.float64)
    tokens = np.asarray(table["text_tokens"], dtype=np.float64)
    with_images, with_text = images > 0, tokens > 0
    classes = [~with_images, with_images & ~with_text, with_images & with_text]  # text, image, image_text
    terms = np.column_stack([pixels / 1e6, images, tokens / 1e3, *(c.astype(np.float64) for c in classes)])
    terms = terms[:, np.abs(terms).max(axis=0) > 0]  # a modality never measured has no term to tell apart
    if terms.shape[0] == 0 or np.linalg.matrix_rank(terms / np.abs(terms).max(axis=0)) == terms.shape[1]:
        return None
    problems = []
    if with_text.any() and np.unique(tokens[with_text]).size == 1:
        problems.append(f"text_tokens is {tokens[with_text][0]:g} in every request with text: the model cannot "
                        "tell the time per token from a fixed time per request; measure several token counts "
                        "(--tokens 8,64,256, or a --trace with varied prompts)")
    if with_images.any() and np.unique(images[with_images]).size == 1:
        problems.append(f"image_count is {images[with_images][0]:g} in every request with images: the model cannot "
                        "tell the time per image from a fixed time per request; measure several image counts "
                        "(--images 1,2,4, or a --trace with varied requests)")
    per_image = pixels[with_images] / images[with_images]
    if with_images.any() and np.unique(per_image).size == 1:
        problems.append(f"every image has {per_image[0]:g} pixels: the model cannot tell the time per megapixel "
                        "from the time per image; measure several image sizes (--image-sizes 640x480,1280x960, or "
                        "a --trace with varied requests)")
    return "; ".join(problems) or ("the request shapes do not vary enough to tell the model's terms apart (time per "
                                   "megapixel, per image, per token, per modality); measure more varied shapes "
                                   "(--shapes, --tokens, --images, --image-sizes)")


def evaluate_profile(table: Mapping[str, NDArray[Any]], kind: str = "additive", test_ratio: float = 0.25,
                     seed: int = 0) -> list[SplitReport]:
    """Fit on a training split and compare with the baselines on the held-out rest, for both splits.

    Args:
        table: A profile (``PROFILE_COLUMNS`` -> arrays), e.g. from :func:`to_table` or ``read_profile_csv``.
        kind: ``ServiceTimeRegressor`` kind.
        test_ratio: Share of rows (or of shapes) held out, in (0, 1).
        seed: Split seed.
    Returns:
        ``[requests split, shapes split]`` (the shapes split is left out when there are fewer than 4 shapes).
    Raises:
        ValueError: fewer than 8 rows, ``test_ratio`` outside (0, 1), or request shapes that cannot tell the
            model's terms apart (:func:`profile_problem`; the message names the column and the fix).
    """
    if not 0 < test_ratio < 1:
        raise ValueError("test_ratio must be in (0, 1)")
    x = features_from_mapping(table)
    y = np.asarray(table["service_ms"], dtype=np.float64)
    n = y.shape[0]
    if n < 8:
        raise ValueError(f"a profile needs at least 8 rows to evaluate, got {n}; measure more requests "
                         "(modalscale profile --shapes, --repeats)")
    problem = profile_problem(table)
    if problem is not None:
        raise ValueError(problem)
    rng = np.random.default_rng(seed)
    keys = _shape_keys(table)
    splits = []
    test_rows = np.zeros(n, dtype=bool)
    test_rows[rng.permutation(n)[: max(1, int(round(test_ratio * n)))]] = True
    splits.append(("requests", test_rows))
    unique = np.unique(keys)
    if unique.size >= 4:
        held = set(rng.permutation(unique)[: max(1, int(round(test_ratio * unique.size)))])
        splits.append(("shapes", np.array([k in held for k in keys])))
    reports = []
    modality = np.asarray(table["modality"]).astype(str)
    for name, test in splits:
        train = ~test
        model = ServiceTimeRegressor(kind=kind)
        results = compare_with_baselines(model, x[train], y[train], x[test], y[test])
        error = np.abs(model.predict(x[test]) - y[test]) / y[test]
        by_modality = {m: float(error[modality[test] == m].mean()) for m in sorted(set(modality[test]))}
        floor = _noise_floor(keys, y, test) if name == "requests" else None
        reports.append(SplitReport(name, int(train.sum()), results, by_modality, floor))
    return reports


def configmap_yaml(name: str, key: str, artifact: bytes, namespace: str | None = None) -> str:
    """A ConfigMap manifest holding ``artifact`` under ``binaryData[key]`` (what ``spec.model.costModelRef`` names).

    Returns:
        YAML text (``kubectl apply -f -`` ready).
    """
    import yaml

    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/part-of": "modalscale"}}
    if namespace:
        metadata["namespace"] = namespace
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                "binaryData": {key: base64.b64encode(artifact).decode("ascii")}}
    return str(yaml.safe_dump(manifest, sort_keys=False, width=1 << 30))
