"""Request traces for the simulator: the project's CSV format, Azure's public LLM trace, and a generator.

Trace CSV (modalscale's format; one row per request, header required, rows in any order)::

    arrival_s,image_count,image_width,image_height,text_tokens[,service_ms]

``arrival_s`` seconds since the trace start (at most 7 days, :data:`MAX_TRACE_SPAN_S`; not an absolute timestamp);
every value a finite number >= 0; ``image_count`` images in the request (0 = text only);
``image_width``/``image_height`` pixels of each image (all images of one request share the size; 0 when there
are none); ``text_tokens`` prompt tokens; optional ``service_ms`` the known service time of the request (the
simulator otherwise draws it from its service-time law).

Azure LLM inference trace (Azure/AzurePublicDataset, ``AzureLLMInferenceTrace_{conv,code}.csv``, CC BY 4.0,
cite Patel et al., "Splitwise", ISCA 2024): columns ``TIMESTAMP`` (``YYYY-MM-DD HH:MM:SS.fffffff``),
``ContextTokens``, ``GeneratedTokens``. It is text only: ``ContextTokens`` become ``text_tokens`` (the service
law models prefill, so ``GeneratedTokens`` are ignored) and images are attached from an :class:`ImageMix`.

Generator parameters cite ServeGen (Xiang et al., "ServeGen: Workload Characterization of Large Language Model
Serving in Production", arXiv 2505.09999, 2025; data alibaba/ServeGen ``data/multimodal/mm-image``, Qwen-VL
production traffic, mixture over clients weighted by requests), rounded from the published distributions:

- images per image-carrying request: 1 image 80.3 %, 2: 6.7 %, 3: 7.6 %, 4: 2.1 %, 5: 1.0 %, p99 = 9;
- image tokens per image: median 405, p90 1,224, max ~1,280 (about 28 x 28 = 784 px per token for
  Qwen2-VL-style encoders, so the median image is ~0.32 MP and the p90 ~0.96 MP);
- text tokens per request: median 106, p90 1,914, p99 3,064;
- per-client inter-arrival CV: median ~1.0 (Poisson-like), upper quartile ~1.8 (bursty);
- summed request rate over a day: 4.9-13.3 req/s (peak/trough ~2.7).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from modalscale.autoscaler.features import features_from_columns, modality_codes

TRACE_COLUMNS: tuple[str, ...] = ("arrival_s", "image_count", "image_width", "image_height", "text_tokens")
"""Required columns of a trace CSV, in file order (``service_ms`` may follow)."""

AZURE_COLUMNS: tuple[str, ...] = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
"""Columns of Azure's public LLM inference trace."""

SERVEGEN_IMAGE_COUNT_PMF: tuple[tuple[int, float], ...] = (
    (1, 0.803), (2, 0.0668), (3, 0.0764), (4, 0.0209), (5, 0.0100),
    (6, 0.0064), (7, 0.0035), (8, 0.0024), (9, 0.0019), (12, 0.0087),
)
"""Images per image-carrying request (ServeGen mm-image, rounded; ``12`` stands for the 10-49 tail, 0.87 %)."""

SERVEGEN_IMAGE_TOKEN_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.0, 4), (0.1, 6), (0.2, 25), (0.3, 180), (0.4, 252), (0.5, 405), (0.6, 576),
    (0.7, 972), (0.8, 1196), (0.9, 1224), (0.95, 1242), (0.99, 1269), (1.0, 1280),
)
"""(quantile, image tokens per image), ServeGen mm-image, rounded."""

SERVEGEN_TEXT_TOKEN_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.0, 29), (0.1, 41), (0.2, 75), (0.3, 79), (0.4, 90), (0.5, 106), (0.6, 186),
    (0.7, 474), (0.8, 1227), (0.9, 1914), (0.95, 2346), (0.99, 3064), (1.0, 4242),
)
"""(quantile, text tokens per request), ServeGen mm-image, rounded."""

PIXELS_PER_IMAGE_TOKEN = 784
"""28 x 28 px per image token (Qwen2-VL-style patch merging), to turn image tokens into pixels."""


@dataclass(frozen=True)
class Trace:
    """Requests in arrival order (all arrays shape ``(n,)``).

    Attributes:
        arrival_s: Arrival time, s since trace start, non-decreasing.
        image_count: Images per request.
        image_width: Width of each image of the request, px (0 without images).
        image_height: Height, px (0 without images).
        text_tokens: Prompt text tokens.
        service_ms: Known service time per request, ms; None = the simulator draws it from its law.
        name: Label for reports.
    """

    arrival_s: NDArray[np.float64]
    image_count: NDArray[np.int64]
    image_width: NDArray[np.int64]
    image_height: NDArray[np.int64]
    text_tokens: NDArray[np.int64]
    service_ms: NDArray[np.float64] | None = None
    name: str = "trace"

    def __post_init__(self) -> None:
        n = self.arrival_s.shape[0]
        arrays: list[NDArray[Any]] = [self.image_count, self.image_width, self.image_height, self.text_tokens]
        if self.service_ms is not None:
            arrays.append(self.service_ms)
        if any(a.shape != (n,) for a in arrays):
            raise ValueError("trace columns must all have shape (n,)")
        if n and (np.diff(self.arrival_s) < 0).any():
            raise ValueError("arrival_s must be non-decreasing")
        if n and (self.arrival_s[0] < 0 or min(a.min() for a in arrays) < 0):
            raise ValueError("trace values must be >= 0")
        if n and ((self.image_count > 0) != (self.image_width * self.image_height > 0)).any():
            raise ValueError("requests with images need image_width and image_height > 0, and vice versa")

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def image_pixels(self) -> NDArray[np.int64]:
        """Pixels summed over each request's images, shape ``(n,)``."""
        return self.image_count * self.image_width * self.image_height

    @property
    def modality(self) -> NDArray[np.int64]:
        """Index into ``features.MODALITIES`` per request, shape ``(n,)``."""
        return modality_codes(self.image_count, self.text_tokens)

    @property
    def duration_s(self) -> float:
        """Time of the last arrival, s (0 for an empty trace)."""
        return float(self.arrival_s[-1]) if len(self) else 0.0

    def features(self) -> NDArray[np.float64]:
        """``make_features`` matrix, shape ``(n, len(FEATURES))``, batch size 1."""
        return features_from_columns(self.image_pixels, self.image_count, self.text_tokens)


MAX_TRACE_SPAN_S = 7 * 86400
"""The latest ``arrival_s`` a trace CSV may hold: 7 days (the simulator replays every minute from 0; a larger value is
nearly always an absolute timestamp such as Unix time)."""


def _trace_from_rows(rows: list[dict[str, str]], path: str | Path, name: str) -> Trace:
    has_service = bool(rows) and "service_ms" in rows[0]
    cols: dict[str, list[float]] = {c: [] for c in TRACE_COLUMNS + (("service_ms",) if has_service else ())}
    for line, row in enumerate(rows, start=2):
        for c in cols:
            where = f"{path}: line {line}: column {c}={row.get(c)!r}"
            try:
                value = float(row[c])
            except (TypeError, ValueError):
                raise ValueError(f"{where} is not a number") from None
            if not math.isfinite(value):
                raise ValueError(f"{where} is not a finite number")
            if value < 0:
                raise ValueError(f"{where} must be >= 0")
            if c == "arrival_s" and value > MAX_TRACE_SPAN_S:
                raise ValueError(f"{where} is more than 7 days ({MAX_TRACE_SPAN_S} s) after the trace start: "
                                 "arrival_s is seconds since the trace start; subtract the first timestamp")
            cols[c].append(value)
        images, width, height = (round(cols[c][-1]) for c in ("image_count", "image_width", "image_height"))
        if images > 0 and width * height <= 0:
            raise ValueError(f"{path}: line {line}: column image_count={row['image_count']!r} needs image_width and "
                             "image_height > 0")
        if images <= 0 and width * height > 0:
            c = "image_width" if width > 0 else "image_height"
            raise ValueError(f"{path}: line {line}: column {c}={row[c]!r} needs image_count > 0 (0 without images)")
    order = np.argsort(np.asarray(cols["arrival_s"]), kind="stable")

    def ints(c: str) -> NDArray[np.int64]:
        return cast(NDArray[np.int64], np.rint(np.asarray(cols[c])[order]).astype(np.int64))

    return Trace(
        arrival_s=np.asarray(cols["arrival_s"], dtype=np.float64)[order],
        image_count=ints("image_count"),
        image_width=ints("image_width"),
        image_height=ints("image_height"),
        text_tokens=ints("text_tokens"),
        service_ms=np.asarray(cols["service_ms"], dtype=np.float64)[order] if has_service else None,
        name=name,
    )


def read_trace_csv(path: str | Path) -> Trace:
    """Read a trace in modalscale's CSV format (see the module docstring); rows are sorted by arrival.

    Raises:
        ValueError: missing columns (named); a cell that is not a finite number >= 0, an ``arrival_s`` past
            :data:`MAX_TRACE_SPAN_S`, or images without a size (each with the line and column named).
    """
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in TRACE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: trace CSV lacks column(s) {missing}; expected {list(TRACE_COLUMNS)}")
        rows = list(reader)
    return _trace_from_rows(rows, path, Path(path).stem)


def write_trace_csv(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` in modalscale's CSV format (with ``service_ms`` when the trace has it)."""
    header = list(TRACE_COLUMNS) + (["service_ms"] if trace.service_ms is not None else [])
    with Path(path).open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for i in range(len(trace)):
            row = [f"{trace.arrival_s[i]:.6f}", int(trace.image_count[i]), int(trace.image_width[i]),
                   int(trace.image_height[i]), int(trace.text_tokens[i])]
            if trace.service_ms is not None:
                row.append(f"{trace.service_ms[i]:.3f}")
            writer.writerow(row)


@dataclass(frozen=True)
class ImageMix:
    """How images are attached to requests (used by the generator and for text-only traces such as Azure's).

    Attributes:
        image_fraction: Fraction (0..1) of requests that carry images.
        image_count_pmf: ``(images, probability)`` for image-carrying requests (normalised on use).
        tokens_per_image_quantiles: ``(quantile, image tokens)`` of one image; sampled by linear interpolation
            of the inverse CDF. Pixels = tokens x ``PIXELS_PER_IMAGE_TOKEN`` x ``pixel_scale``.
        pixel_scale: Multiplier on pixels per image (4.0 = a 4x resolution shift).
        aspect_ratio: Width / height of generated images.
        image_only_fraction: Fraction of image-carrying requests with no text (ServeGen: 0; all carry a prompt).
    """

    image_fraction: float = 0.5
    image_count_pmf: tuple[tuple[int, float], ...] = SERVEGEN_IMAGE_COUNT_PMF
    tokens_per_image_quantiles: tuple[tuple[float, float], ...] = SERVEGEN_IMAGE_TOKEN_QUANTILES
    pixel_scale: float = 1.0
    aspect_ratio: float = 4.0 / 3.0
    image_only_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not (0 <= self.image_fraction <= 1 and 0 <= self.image_only_fraction <= 1):
            raise ValueError("image_fraction and image_only_fraction must be in [0, 1]")
        if self.pixel_scale <= 0 or self.aspect_ratio <= 0:
            raise ValueError("pixel_scale and aspect_ratio must be > 0")
        if not self.image_count_pmf or any(c < 1 or p < 0 for c, p in self.image_count_pmf):
            raise ValueError("image_count_pmf needs counts >= 1 and probabilities >= 0")

    def sample(
        self, n: int, rng: np.random.Generator
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_]]:
        """Draw images for ``n`` requests.

        Returns:
            ``(image_count, image_width, image_height, image_only)``, each shape ``(n,)``; ``image_only`` marks
            image-carrying requests that should get no text.
        """
        has = rng.random(n) < self.image_fraction
        counts = np.array([c for c, _ in self.image_count_pmf])
        probs = np.array([p for _, p in self.image_count_pmf], dtype=np.float64)
        image_count = np.where(has, rng.choice(counts, size=n, p=probs / probs.sum()), 0)
        tokens = _sample_quantiles(self.tokens_per_image_quantiles, n, rng)
        pixels = np.maximum(tokens * PIXELS_PER_IMAGE_TOKEN * self.pixel_scale, 1.0)
        width = np.maximum(1, np.rint(np.sqrt(pixels * self.aspect_ratio))).astype(np.int64)
        height = np.maximum(1, np.rint(pixels / width)).astype(np.int64)
        width = np.where(has, width, 0)
        height = np.where(has, height, 0)
        image_only = has & (rng.random(n) < self.image_only_fraction)
        return image_count.astype(np.int64), width, height, image_only


def _sample_quantiles(table: tuple[tuple[float, float], ...], n: int, rng: np.random.Generator) -> NDArray[np.float64]:
    q = np.array([a for a, _ in table], dtype=np.float64)
    v = np.array([b for _, b in table], dtype=np.float64)
    if q[0] != 0 or q[-1] != 1 or (np.diff(q) <= 0).any() or (np.diff(v) < 0).any():
        raise ValueError("quantile table must run from 0 to 1 with increasing quantiles and non-decreasing values")
    return np.interp(rng.random(n), q, v)


@dataclass(frozen=True)
class TraceSpec:
    """Parameters of a generated trace (see :func:`generate_trace`).

    Attributes:
        duration_s: Trace length, s.
        mean_rate_rps: Mean request rate, req/s.
        rate_swing_ratio: Amplitude of a sinusoidal rate swing relative to the mean (0.45 ~ ServeGen's daily
            4.9-13.3 req/s range, compressed into one ``rate_period_s``).
        rate_period_s: Period of the swing, s (None = ``duration_s``).
        arrival_cv: Coefficient of variation of inter-arrival times (gamma renewal; 1 = Poisson).
        mix: Image mix before ``shift_at_s``.
        shift_at_s: Time of a modality shift; None = none.
        mix_after_shift: Image mix after ``shift_at_s``.
        text_token_quantiles: ``(quantile, tokens)`` of prompt text tokens.
        random_state: Seed.
        name: Label for reports.
    """

    duration_s: float = 3600.0
    mean_rate_rps: float = 20.0
    rate_swing_ratio: float = 0.45
    rate_period_s: float | None = None
    arrival_cv: float = 1.0
    mix: ImageMix = field(default_factory=ImageMix)
    shift_at_s: float | None = None
    mix_after_shift: ImageMix | None = None
    text_token_quantiles: tuple[tuple[float, float], ...] = SERVEGEN_TEXT_TOKEN_QUANTILES
    random_state: int = 0
    name: str = "generated"


def generate_trace(spec: TraceSpec = TraceSpec()) -> Trace:
    """Generate a trace: a gamma renewal process time-warped to a sinusoidal rate, with ServeGen-shaped requests.

    ``rate(t) = mean_rate_rps * (1 + rate_swing_ratio * sin(2 pi t / rate_period_s))``; arrivals are a unit-rate
    gamma renewal process (CV ``arrival_cv``) mapped through the inverse cumulative rate.

    Raises:
        ValueError: ``rate_swing_ratio`` outside [0, 1), non-positive rate/duration/CV.
    """
    if spec.duration_s <= 0 or spec.mean_rate_rps <= 0 or spec.arrival_cv <= 0 or not 0 <= spec.rate_swing_ratio < 1:
        raise ValueError(f"invalid trace spec {spec!r}")
    rng = np.random.default_rng(spec.random_state)
    period = spec.rate_period_s or spec.duration_s
    grid = np.linspace(0.0, spec.duration_s, int(spec.duration_s) * 4 + 1)
    rate = spec.mean_rate_rps * (1 + spec.rate_swing_ratio * np.sin(2 * math.pi * grid / period))
    cumulative = np.concatenate([[0.0], np.cumsum(0.5 * (rate[1:] + rate[:-1]) * np.diff(grid))])
    expected = cumulative[-1]
    shape = 1.0 / spec.arrival_cv**2
    n_draw = int(expected + 10 * math.sqrt(expected) * spec.arrival_cv + 100)
    unit_times = np.cumsum(rng.gamma(shape, 1.0 / shape, size=n_draw))
    unit_times = unit_times[unit_times < expected]
    arrival = np.interp(unit_times, cumulative, grid)
    n = arrival.shape[0]

    count, width, height, image_only = spec.mix.sample(n, rng)
    if spec.shift_at_s is not None:
        after = spec.mix_after_shift or spec.mix
        count2, width2, height2, only2 = after.sample(n, rng)
        late = arrival >= spec.shift_at_s
        count = np.where(late, count2, count)
        width = np.where(late, width2, width)
        height = np.where(late, height2, height)
        image_only = np.where(late, only2, image_only)
    tokens = np.rint(_sample_quantiles(spec.text_token_quantiles, n, rng)).astype(np.int64)
    tokens = np.where(image_only, 0, np.maximum(tokens, 1))
    return Trace(arrival, count, width, height, tokens, None, spec.name)


def modality_shift_trace(
    duration_s: float = 3600.0,
    rate_rps: float = 20.0,
    shift_at_s: float = 1800.0,
    image_fraction_before: float = 0.10,
    image_fraction_after: float = 0.70,
    pixel_scale_after: float = 4.0,
    random_state: int = 1,
) -> Trace:
    """A constant-rate Poisson trace whose mix shifts at ``shift_at_s`` from few, small images to many, large ones.

    Defaults: 10 % -> 70 % image-carrying requests and 4x pixels per image, at a constant 20 req/s.
    """
    spec = TraceSpec(
        duration_s=duration_s,
        mean_rate_rps=rate_rps,
        rate_swing_ratio=0.0,
        arrival_cv=1.0,
        mix=ImageMix(image_fraction=image_fraction_before),
        shift_at_s=shift_at_s,
        mix_after_shift=ImageMix(image_fraction=image_fraction_after, pixel_scale=pixel_scale_after),
        random_state=random_state,
        name="modality-shift",
    )
    return generate_trace(spec)


def read_azure_llm_trace(
    path: str | Path, mix: ImageMix | None = None, random_state: int = 0, name: str | None = None
) -> Trace:
    """Read Azure's public LLM inference trace and attach images from ``mix`` (format in the module docstring).

    Args:
        path: CSV with ``TIMESTAMP, ContextTokens, GeneratedTokens`` (extra columns are ignored).
        mix: Image mix to attach (default ``ImageMix()``: half the requests carry ServeGen-shaped images).
        random_state: Seed of the image draw.
    Returns:
        A trace with arrivals relative to the first request, sorted.
    Raises:
        ValueError: missing columns or an unparsable cell (line named).
    """
    mix = mix or ImageMix()
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in AZURE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: Azure LLM trace lacks column(s) {missing}; expected {list(AZURE_COLUMNS)}")
        times: list[float] = []
        tokens: list[int] = []
        for line, row in enumerate(reader, start=2):
            try:
                times.append(datetime.fromisoformat(row["TIMESTAMP"].strip()).replace(tzinfo=timezone.utc).timestamp())
                tokens.append(int(row["ContextTokens"]))
            except ValueError:
                raise ValueError(f"{path}: line {line}: cannot parse TIMESTAMP/ContextTokens {row!r}") from None
    t = np.asarray(times)
    order = np.argsort(t, kind="stable")
    arrival = t[order] - (t[order][0] if t.size else 0.0)
    text = np.maximum(np.asarray(tokens, dtype=np.int64)[order], 0)
    count, width, height, image_only = mix.sample(arrival.shape[0], np.random.default_rng(random_state))
    text = np.where(image_only, 0, np.maximum(text, 1))
    return Trace(arrival, count, width, height, text, None, name or Path(path).stem)


MOONCAKE_COLUMNS: tuple[str, ...] = ("timestamp_ms", "input_length")
"""Columns of the Mooncake conversation trace (CSV cut of kvcache-ai/Mooncake ``conversation_trace.jsonl``)."""

SERVEGEN_RATE_COLUMNS: tuple[str, ...] = ("client_id", "window_start_s", "rate_rps", "cv", "arrival_dist",
                                          "dist_param1", "dist_param2")
"""Columns of ServeGen's per-client rate windows (alibaba/ServeGen ``data/multimodal/mm-image``)."""


def read_mooncake_trace(
    path: str | Path, mix: ImageMix | None = None, random_state: int = 0, name: str | None = None
) -> Trace:
    """Read the Mooncake (FAST'25) conversation trace as CSV and attach images from ``mix``.

    Arrivals are replayed exactly as recorded (``timestamp_ms`` since the first request); ``input_length``
    (prompt tokens) become ``text_tokens``. Cite Qin et al., "Mooncake", FAST 2025 (Apache-2.0).

    Raises:
        ValueError: missing columns or an unparsable cell (line named).
    """
    mix = mix or ImageMix()
    arrival, text, _ = _read_mooncake_columns(path)
    count, width, height, image_only = mix.sample(arrival.shape[0], np.random.default_rng(random_state))
    text = np.where(image_only, 0, np.maximum(text, 1))
    return Trace(arrival, count, width, height, text, None, name or Path(path).stem)


def _renewal(rng: np.random.Generator, dist: str, p1: float, p2: float, cv: float, rate_rps: float,
             length_s: float) -> NDArray[np.float64]:
    """Arrival offsets in ``[0, length_s)`` of a renewal process with ServeGen's fitted inter-arrival law, rescaled
    so that its mean rate is exactly ``rate_rps`` (the fitted parameters keep their shape, i.e. the CV)."""
    expected = rate_rps * length_s
    n = int(expected + 10 * math.sqrt(expected + 1) * max(1.0, cv) + 20)
    if dist == "Gamma" and p1 > 0:
        gaps = rng.gamma(p1, 1.0, size=n) / p1
    elif dist == "Weibull" and p1 > 0:
        gaps = rng.weibull(p1, size=n) / math.gamma(1.0 + 1.0 / p1)
    elif cv > 0:  # no fitted law: a gamma with the window's CV
        shape = 1.0 / cv**2
        gaps = rng.gamma(shape, 1.0, size=n) / shape
    else:
        gaps = rng.exponential(1.0, size=n)
    gaps /= rate_rps  # mean gap 1 / rate
    times = np.cumsum(gaps) - rng.random() * gaps[0]  # a random phase at the window start
    return cast(NDArray[np.float64], times[(times >= 0) & (times < length_s)])


def _servegen_arrivals(path: str | Path, start_s: float, duration_s: float, rng: np.random.Generator,
                       client_id: str | None = None) -> NDArray[np.float64]:
    """Arrivals (s since ``start_s``, sorted) of every client (or only ``client_id``) of ServeGen's rate windows
    in ``[start_s, start_s + duration_s)``: :func:`servegen_trace`'s generator."""
    end_s = start_s + duration_s
    parts: list[NDArray[np.float64]] = []
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in SERVEGEN_RATE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: ServeGen rate windows lack column(s) {missing}; "
                             f"expected {list(SERVEGEN_RATE_COLUMNS)}")
        for line, row in enumerate(reader, start=2):
            if client_id is not None and row["client_id"] != client_id:
                continue
            try:
                w0, rate = float(row["window_start_s"]), float(row["rate_rps"])
                cv = float(row["cv"] or 0.0)
                p1, p2 = float(row["dist_param1"] or 0.0), float(row["dist_param2"] or 0.0)
            except (TypeError, ValueError):
                raise ValueError(f"{path}: line {line}: cannot parse {row!r}") from None
            lo, hi = max(w0, start_s), min(w0 + 600.0, end_s)
            if rate <= 0 or hi <= lo:
                continue
            offsets = _renewal(rng, (row["arrival_dist"] or "").strip(), p1, p2, cv, rate, 600.0)
            absolute = w0 + offsets
            parts.append(absolute[(absolute >= lo) & (absolute < hi)] - start_s)
    arrival = np.sort(np.concatenate(parts)) if parts else np.zeros(0)
    if arrival.size == 0:
        who = "" if client_id is None else f" for client {client_id!r}"
        raise ValueError(f"{path}: no traffic{who} in [{start_s:g}, {end_s:g}) s")
    return arrival


def servegen_trace(
    path: str | Path, start_s: float = 36000.0, duration_s: float = 3600.0, mix: ImageMix | None = None,
    random_state: int = 0, name: str | None = None,
) -> Trace:
    """Generate arrivals from ServeGen's per-client rate windows (``servegen_mm_image_rate_windows.csv``).

    For every client and 600 s window overlapping ``[start_s, start_s + duration_s)``, arrivals are a renewal
    process with that window's fitted inter-arrival law (``Gamma(shape=dist_param1, scale=dist_param2)`` or
    ``Weibull(shape=dist_param1, scale=dist_param2)``; a gamma with the window's ``cv`` when no law is given),
    rescaled to the window's ``rate_rps``; the clients are superposed. Requests get ServeGen-shaped images and
    text from ``mix`` (default ``ImageMix()``) and the ServeGen text-token quantiles. Default: the busiest hour
    of the day (10:00-11:00, 13.3 req/s summed). Cite Xiang et al., arXiv 2505.09999 (Apache-2.0).

    Raises:
        ValueError: missing columns, an unparsable cell (line named), or no traffic in the span.
    """
    mix = mix or ImageMix()
    rng = np.random.default_rng(random_state)
    arrival = _servegen_arrivals(path, start_s, duration_s, rng)
    n = arrival.shape[0]
    count, width, height, image_only = mix.sample(n, rng)
    tokens = np.rint(_sample_quantiles(SERVEGEN_TEXT_TOKEN_QUANTILES, n, rng)).astype(np.int64)
    tokens = np.where(image_only, 0, np.maximum(tokens, 1))
    return Trace(arrival, count, width, height, tokens, None, name or f"servegen@{start_s / 3600:g}h")


SPLITWISE_COLUMNS: tuple[str, ...] = ("model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time",
                                      "token_time", "tensor_parallel")
"""Columns of Splitwise's performance model (Mutinifni/splitwise-sim ``data/perf_model.csv``) that are read."""


@dataclass(frozen=True)
class LLMServiceTime:
    """LLM-style service time of one request alone on a replica (batch size 1), from a measured performance model:
    ``prompt_ms(prompt tokens) + output tokens x token_ms``.

    Attributes:
        prompt_tokens: Prompt sizes the model was measured at, tokens, increasing.
        prompt_ms: Median prompt (prefill) time at each size, ms.
        token_ms: Median time per generated token, ms.
        source: Where the figures come from (for reports).
    """

    prompt_tokens: tuple[float, ...]
    prompt_ms: tuple[float, ...]
    token_ms: float
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.prompt_tokens) < 2 or len(self.prompt_tokens) != len(self.prompt_ms):
            raise ValueError("LLMServiceTime needs >= 2 prompt sizes, each with a prompt time")
        if (np.diff(self.prompt_tokens) <= 0).any() or min(self.prompt_ms) <= 0 or self.token_ms <= 0:
            raise ValueError("prompt sizes must increase; prompt and token times must be > 0")

    def service_ms(self, prompt_tokens: NDArray[Any], output_tokens: NDArray[Any]) -> NDArray[np.float64]:
        """Service time per request, ms, shape ``(n,)``: the prompt time interpolated linearly between measured
        sizes (the smallest size's time below it; beyond the largest, extended along the last segment: a lower
        bound, since attention grows faster than linearly) plus ``output_tokens x token_ms``."""
        x = np.asarray(prompt_tokens, dtype=np.float64)
        sizes, times = np.asarray(self.prompt_tokens), np.asarray(self.prompt_ms)
        prompt = np.interp(x, sizes, times)
        slope = (times[-1] - times[-2]) / (sizes[-1] - sizes[-2])
        prompt = np.where(x > sizes[-1], times[-1] + slope * (x - sizes[-1]), prompt)
        return cast(NDArray[np.float64], prompt + np.asarray(output_tokens, dtype=np.float64) * self.token_ms)


def read_splitwise_perf_model(path: str | Path, model: str = "llama2-70b", hardware: str = "a100-80gb",
                              tensor_parallel: int = 8) -> LLMServiceTime:
    """Read Splitwise's measured performance model (Patel et al., "Splitwise", ISCA 2024; MIT) for one setting.

    Rows with ``batch_size == 1`` of ``model`` on ``hardware`` at ``tensor_parallel``: the median ``prompt_time``
    (ms) per ``prompt_size``, and the median ``token_time`` (ms per generated token) over all of them. Defaults:
    Llama-2-70B on one 8-GPU DGX-A100 (tensor parallel 8), the machine unit of Splitwise's own study.

    Raises:
        ValueError: missing columns, an unparsable cell (line named), or no rows for the setting (the settings the
            file has are named).
    """
    prompt: dict[float, list[float]] = {}
    token: list[float] = []
    settings: set[tuple[str, str, int]] = set()
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in SPLITWISE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: Splitwise perf model lacks column(s) {missing}; "
                             f"expected {list(SPLITWISE_COLUMNS)}")
        for line, row in enumerate(reader, start=2):
            try:
                tp, batch = int(float(row["tensor_parallel"])), int(float(row["batch_size"]))
                size, p_ms, t_ms = float(row["prompt_size"]), float(row["prompt_time"]), float(row["token_time"])
            except (TypeError, ValueError):
                raise ValueError(f"{path}: line {line}: cannot parse {row!r}") from None
            settings.add((row["model"], row["hardware"], tp))
            if (row["model"], row["hardware"], tp, batch) == (model, hardware, tensor_parallel, 1):
                prompt.setdefault(size, []).append(p_ms)
                token.append(t_ms)
    if len(prompt) < 2:
        raise ValueError(f"{path}: no batch-size-1 rows at >= 2 prompt sizes for model={model!r} "
                         f"hardware={hardware!r} tensor_parallel={tensor_parallel}; the file has {sorted(settings)}")
    sizes = sorted(prompt)
    return LLMServiceTime(tuple(sizes), tuple(float(np.median(prompt[s])) for s in sizes), float(np.median(token)),
                          f"Splitwise perf model: {model} on {hardware}, tensor parallel {tensor_parallel}, batch 1")


def thinning_fraction(rate_rps: float) -> float:
    """The fraction of requests a long-request trace keeps: ``10 ** -ceil(log10(rate))`` for a rate of at least
    1 req/s (so the kept rate lies in [0.1, 1) req/s), 1 below. A fixed rule, not a fitted one."""
    if rate_rps < 1.0:
        return 1.0
    return float(10.0 ** -math.ceil(math.log10(rate_rps) + 1e-12))


def long_request_trace(path: str | Path, perf: LLMServiceTime, keep_fraction: float | None = None,
                       random_state: int = 0, name: str | None = None) -> Trace:
    """A long-request trace from the Mooncake (FAST'25) conversation trace: independent thinning of its recorded
    arrivals, each request with its own recorded token counts and an LLM-style service time.

    Each request is kept with probability ``keep_fraction`` (default :func:`thinning_fraction` of the trace's mean
    rate: 1/10 for its ~3.4 req/s), seeded by ``random_state``: independent thinning scales the rate by that
    fraction at every instant and keeps the shape of its bursts. ``service_ms`` is
    ``perf.service_ms(input_length, output_length)`` (Splitwise's measured prefill and decode times); the
    requests are text only (``text_tokens = input_length``), so a model of image+text service times knows nothing
    of their length. Cite Qin et al., "Mooncake", FAST 2025 (Apache-2.0) and Patel et al., "Splitwise", ISCA 2024.

    Raises:
        ValueError: missing columns, an unparsable cell (line named), ``keep_fraction`` outside (0, 1], or nothing
            kept.
    """
    arrival, prompt, output = _read_mooncake_columns(path, with_output=True)
    rate = len(arrival) / max(float(arrival[-1]) if arrival.size else 0.0, 1.0)
    keep = thinning_fraction(rate) if keep_fraction is None else keep_fraction
    if not 0 < keep <= 1:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep!r}")
    kept = np.random.default_rng(random_state).random(arrival.shape[0]) < keep
    if not kept.any():
        raise ValueError(f"{path}: no request kept at keep_fraction {keep:g}")
    arrival, prompt, output = arrival[kept], prompt[kept], output[kept]
    arrival = arrival - arrival[0]
    zeros = np.zeros(arrival.shape[0], dtype=np.int64)
    return Trace(arrival, zeros, zeros, zeros, np.maximum(prompt, 1), perf.service_ms(prompt, output),
                 name or f"mooncake-long(1/{round(1 / keep)})")


def _read_mooncake_columns(path: str | Path, with_output: bool = False
                           ) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """``(arrival s since the first request, input_length, output_length)`` of a Mooncake CSV, sorted by arrival
    (output zeros unless ``with_output``, which requires the column)."""
    needed = MOONCAKE_COLUMNS + (("output_length",) if with_output else ())
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in needed if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: Mooncake trace lacks column(s) {missing}; expected {list(needed)}")
        times: list[float] = []
        tokens: list[int] = []
        outputs: list[int] = []
        for line, row in enumerate(reader, start=2):
            try:
                times.append(float(row["timestamp_ms"]) / 1000.0)
                tokens.append(int(float(row["input_length"])))
                outputs.append(int(float(row["output_length"])) if with_output else 0)
            except (TypeError, ValueError):
                raise ValueError(f"{path}: line {line}: cannot parse {'/'.join(needed)} {row!r}") from None
    t = np.asarray(times)
    order = np.argsort(t, kind="stable")
    arrival = t[order] - (t[order][0] if t.size else 0.0)
    return (arrival, np.maximum(np.asarray(tokens, dtype=np.int64)[order], 0),
            np.maximum(np.asarray(outputs, dtype=np.int64)[order], 0))


SERVEGEN_PMF_COLUMNS: tuple[str, ...] = ("client_id", "window_start_s", "field", "value", "prob")
"""Columns of ServeGen's per-client, per-6-h-window distributions (``servegen_mm_image_pmf.csv``)."""


def onoff_hour(path: str | Path, duration_s: float = 3600.0) -> tuple[str, float]:
    """The on/off span of ServeGen's per-client rate windows: over every client and every ``duration_s`` span of
    whole 600 s windows, the one with the most switches between an idle window (rate 0) and a busy one; ties go
    to the larger mean rate, then to the earlier span. A fixed rule, not a fitted one.

    Returns:
        ``(client_id, start_s)``.
    Raises:
        ValueError: missing columns, an unparsable cell, or no client with a switch.
    """
    rates: dict[str, dict[int, float]] = {}
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in SERVEGEN_RATE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: ServeGen rate windows lack column(s) {missing}")
        for line, row in enumerate(reader, start=2):
            try:
                rates.setdefault(row["client_id"], {})[round(float(row["window_start_s"]) / 600.0)] = float(
                    row["rate_rps"] or 0.0)
            except (TypeError, ValueError):
                raise ValueError(f"{path}: line {line}: cannot parse {row!r}") from None
    span = max(1, round(duration_s / 600.0))
    best: tuple[int, float, float, str] | None = None
    for client, windows in rates.items():
        last = max(windows)
        for first in range(min(windows), max(min(windows), last - span + 1) + 1):  # missing windows are idle
            seg = [windows.get(w, 0.0) for w in range(first, first + span)]
            switches = sum(1 for a, b in zip(seg, seg[1:], strict=False) if (a > 0) != (b > 0))
            key = (switches, sum(seg) / span, -first * 600.0, client)
            if switches and (best is None or key[:3] > best[:3]):
                best = key
    if best is None:
        raise ValueError(f"{path}: no client switches between idle and busy windows")
    return best[3], -best[2]


def servegen_aggregate_pmf(path: str | Path, field: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """One field's PMF from ServeGen's aggregate PMF file (``servegen_mm_image_aggregate_pmf.csv``: columns
    ``field``, ``value``, ``prob``), for drawing requests (``rng.choice(values, p=probs)``).

    Args:
        path: The CSV file.
        field: ``image_count``, ``text_tokens``, ...
    Returns:
        ``(values, probabilities)``, the probabilities renormalised to sum to 1.
    Raises:
        SystemExit: The file has no row of ``field`` (a benchmark's argument error, named with the file).
    """
    with Path(path).open() as fh:
        pairs = [(float(r["value"]), float(r["prob"])) for r in csv.DictReader(fh) if r["field"] == field]
    if not pairs:
        raise SystemExit(f"{path}: no rows of field {field!r}")
    values = np.array([v for v, _ in pairs])
    probs = np.array([p for _, p in pairs])
    return values, probs / probs.sum()


def _servegen_pmfs(path: str | Path, client_id: str, at_s: float) -> dict[str, tuple[NDArray[np.float64],
                                                                                    NDArray[np.float64]]]:
    """``{field: (values, probabilities)}`` of one client's 6 h window that holds ``at_s``."""
    table: dict[float, dict[str, tuple[list[float], list[float]]]] = {}
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in SERVEGEN_PMF_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: ServeGen PMFs lack column(s) {missing}; expected {list(SERVEGEN_PMF_COLUMNS)}")
        for line, row in enumerate(reader, start=2):
            if row["client_id"] != client_id:
                continue
            try:
                w0, value, prob = float(row["window_start_s"]), float(row["value"]), float(row["prob"])
            except (TypeError, ValueError):
                raise ValueError(f"{path}: line {line}: cannot parse {row!r}") from None
            values, probs = table.setdefault(w0, {}).setdefault(row["field"], ([], []))
            values.append(value)
            probs.append(prob)
    starts = [w for w in table if w <= at_s]
    if not starts:
        raise ValueError(f"{path}: no distributions for client {client_id!r} at or before {at_s:g} s")
    fields = table[max(starts)]
    need = ("image_count", "image_tokens", "text_tokens", "output_tokens")
    if any(f not in fields for f in need):
        raise ValueError(f"{path}: client {client_id!r} lacks one of {need} at {max(starts):g} s")
    out = {}
    for f in need:
        values, probs = fields[f]
        p = np.asarray(probs, dtype=np.float64)
        out[f] = (np.asarray(values, dtype=np.float64), p / p.sum())
    return out


def servegen_onoff_trace(rate_path: str | Path, pmf_path: str | Path, perf: LLMServiceTime,
                         client_id: str | None = None, start_s: float | None = None, duration_s: float = 3600.0,
                         random_state: int = 0, name: str | None = None) -> Trace:
    """An on/off trace from one ServeGen client: its idle and busy 600 s windows, with LLM-style service times.

    Arrivals are :func:`servegen_trace`'s (the window's fitted law and rate) for that client alone; the span is
    :func:`onoff_hour`'s unless ``client_id`` and ``start_s`` are given. Each request draws its images, image
    tokens per image, text tokens and output tokens from the client's own distributions for the 6 h window that
    holds ``start_s`` (``servegen_mm_image_pmf.csv``); its prompt is its text tokens plus its image tokens, its
    service time ``perf.service_ms(prompt, output)``; pixels are image tokens x ``PIXELS_PER_IMAGE_TOKEN``. Cite
    Xiang et al., arXiv 2505.09999 (Apache-2.0) and Patel et al., "Splitwise", ISCA 2024.

    Raises:
        ValueError: missing columns or cells, or no traffic in the span.
    """
    if client_id is None or start_s is None:
        client_id, start_s = onoff_hour(rate_path, duration_s)
    pmfs = _servegen_pmfs(pmf_path, client_id, start_s)
    rng = np.random.default_rng(random_state)
    arrivals = _servegen_arrivals(rate_path, start_s, duration_s, rng, client_id=client_id)
    n = arrivals.shape[0]

    def draw(f: str, size: int) -> NDArray[np.float64]:
        values, probs = pmfs[f]
        return cast(NDArray[np.float64], rng.choice(values, size=size, p=probs))

    count = np.rint(draw("image_count", n)).astype(np.int64)
    per_image = np.where(count > 0, np.rint(draw("image_tokens", n)), 0.0)
    text = np.rint(draw("text_tokens", n)).astype(np.int64)
    output = draw("output_tokens", n)
    pixels = per_image * PIXELS_PER_IMAGE_TOKEN
    width = np.where(count > 0, np.maximum(1, np.rint(np.sqrt(pixels * 4.0 / 3.0))), 0).astype(np.int64)
    height = np.where(count > 0, np.maximum(1, np.rint(pixels / np.maximum(width, 1))), 0).astype(np.int64)
    count = np.where(width * height > 0, count, 0)
    text = np.where(count > 0, text, np.maximum(text, 1))
    prompt = text + count * per_image
    return Trace(arrivals, count, width, height, text, perf.service_ms(prompt, output),
                 name or f"servegen-onoff(client {client_id}@{start_s / 3600:g}h)")
