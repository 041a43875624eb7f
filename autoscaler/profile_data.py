"""SYNTHETIC service-time profiles, and the profile CSV format real profiles will use.

Until ``modalscale profile`` measures the real Triton runtime, the regressor is trained and tested on profiles
drawn from an explicit, made-up service-time law (:class:`SyntheticServiceLaw`). Nothing here is a measurement:
the coefficients are chosen to be of the order of a small vision-language model's prefill on one GPU, so that
images dominate text and a modality shift matters. Replace the law's output with a real profile CSV as soon as
one exists; the CSV columns are the same.

Profile CSV (one row per served request), header required::

    time_s,modality,image_count,image_pixels,text_tokens,batch_size,service_ms

``time_s`` seconds since the profile started; ``modality`` one of ``text|image|image_text``; ``image_pixels``
summed over the request's images; ``batch_size`` the server-side batch the request ran in; ``service_ms`` the
time the request occupied an execution slot (queue time excluded), in milliseconds.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from modalscale.autoscaler.features import FEATURES, MODALITIES, features_from_columns, modality_codes

PROFILE_COLUMNS: tuple[str, ...] = (
    "time_s",
    "modality",
    "image_count",
    "image_pixels",
    "text_tokens",
    "batch_size",
    "service_ms",
)
"""Columns of a profile CSV, in file order."""

_I_PIXELS = FEATURES.index("image_pixels")
_I_IMAGES = FEATURES.index("image_count")
_I_TOKENS = FEATURES.index("text_tokens")
_I_BATCH = FEATURES.index("batch_size")


@dataclass(frozen=True, slots=True)
class SyntheticServiceLaw:
    """A made-up but explicit per-request service-time law (SYNTHETIC; not measured).

    For a request with ``P`` pixels (summed over its ``I`` images) and ``T`` text tokens, run in a batch of ``b``::

        solo_ms    = ms_per_image * I + ms_per_megapixel * P / 1e6 + ms_per_kilotoken * T / 1e3
        mean_ms    = overhead_ms / b + solo_ms * (unshared_ratio + (1 - unshared_ratio) / b)
        service_ms = mean_ms * LogNormal(mu=-sigma^2/2, sigma=noise_sigma)        (noise has mean 1)

    The batch's fixed overhead (launch, pre/post-processing) is shared by its ``b`` requests; of each request's
    own compute, ``unshared_ratio`` does not amortise with batching.

    Attributes:
        overhead_ms: Fixed time per batch, ms.
        ms_per_image: Per image (resize, patching, encoder set-up), ms.
        ms_per_megapixel: Vision encoder time per megapixel, ms.
        ms_per_kilotoken: Prefill time per 1000 text tokens, ms.
        unshared_ratio: Fraction (0..1) of per-request compute that batching does not amortise.
        noise_sigma: Sigma of the mean-one lognormal multiplicative noise.
    """

    overhead_ms: float = 60.0
    ms_per_image: float = 50.0
    ms_per_megapixel: float = 400.0
    ms_per_kilotoken: float = 120.0
    unshared_ratio: float = 0.35
    noise_sigma: float = 0.08

    def mean_ms(self, features: NDArray[np.float64]) -> NDArray[np.float64]:
        """Noise-free service time, ms, shape ``(n,)`` for ``features`` of shape ``(n, len(FEATURES))``."""
        x = np.asarray(features, dtype=np.float64)
        batch = x[:, _I_BATCH]
        solo = (
            self.ms_per_image * x[:, _I_IMAGES]
            + self.ms_per_megapixel * x[:, _I_PIXELS] / 1e6
            + self.ms_per_kilotoken * x[:, _I_TOKENS] / 1e3
        )
        return cast(NDArray[np.float64],
                    self.overhead_ms / batch + solo * (self.unshared_ratio + (1.0 - self.unshared_ratio) / batch))

    def sample_ms(self, features: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.float64]:
        """Service times with the law's lognormal noise, ms, shape ``(n,)``."""
        mean = self.mean_ms(features)
        sigma = self.noise_sigma
        return mean * rng.lognormal(-0.5 * sigma * sigma, sigma, size=mean.shape[0])


def generate_profile(
    n_requests: int = 4000,
    law: SyntheticServiceLaw | None = None,
    random_state: int = 0,
    max_megapixels_per_image: float = 4.0,
) -> dict[str, NDArray[Any]]:
    """Draw a SYNTHETIC profile: a design sweep over request shapes, timed by ``law``.

    The sweep covers what a real ``modalscale profile`` run should cover: all three modalities in equal parts,
    1-9 images, 0.005-``max_megapixels_per_image`` MP per image (log-uniform; the ServeGen p90 image is ~1 MP,
    so 4 MP leaves room for a 4x resolution shift), 8-4096 text tokens (log-uniform; ServeGen's p99 is ~3,100)
    and batch sizes 1, 2, 4, 8.

    Args:
        n_requests: Rows to draw.
        law: Service-time law; default :class:`SyntheticServiceLaw`.
        random_state: Seed of the generator (same seed, same profile).
        max_megapixels_per_image: Upper end of the per-image resolution sweep, MP.
    Returns:
        Dict of ``PROFILE_COLUMNS`` -> arrays of shape ``(n_requests,)`` (``modality`` holds str).
    """
    law = law or SyntheticServiceLaw()
    rng = np.random.default_rng(random_state)
    code = rng.integers(0, len(MODALITIES), size=n_requests)
    has_images = code != 0
    has_text = code != 1
    images = np.where(has_images, rng.integers(1, 10, size=n_requests), 0)
    mp_per_image = np.exp(rng.uniform(np.log(0.005), np.log(max_megapixels_per_image), size=n_requests))
    pixels = np.where(has_images, np.rint(images * mp_per_image * 1e6), 0).astype(np.int64)
    tokens = np.where(has_text, np.rint(np.exp(rng.uniform(np.log(8), np.log(4096), size=n_requests))), 0)
    batch = rng.choice(np.array([1, 2, 4, 8]), size=n_requests)
    x = features_from_columns(pixels, images, tokens, batch)
    service = law.sample_ms(x, rng)
    time_s = np.cumsum(rng.exponential(0.05, size=n_requests))
    modality = np.array([MODALITIES[c].value for c in modality_codes(images, tokens)], dtype=object)
    return {
        "time_s": time_s,
        "modality": modality,
        "image_count": images.astype(np.int64),
        "image_pixels": pixels,
        "text_tokens": tokens.astype(np.int64),
        "batch_size": batch.astype(np.int64),
        "service_ms": service,
    }


def write_profile_csv(table: Mapping[str, ArrayLike], path: str | Path) -> None:
    """Write a profile (``PROFILE_COLUMNS`` -> equal-length arrays) as CSV with a header."""
    cols = [np.asarray(table[c]) for c in PROFILE_COLUMNS]
    with Path(path).open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(PROFILE_COLUMNS)
        for t, m, ic, px, tok, b, s in zip(*cols, strict=True):
            writer.writerow([f"{float(t):.3f}", str(m), int(ic), int(px), int(tok), int(b), f"{float(s):.3f}"])


_INT_COLUMNS: dict[str, int] = {"image_count": 0, "image_pixels": 0, "text_tokens": 0, "batch_size": 1}
"""Whole-number columns and their least value."""
_FIX = "correct or remove that row, or measure again with `modalscale profile --out-csv FILE`"


def read_profile_csv(path: str | Path) -> dict[str, NDArray[Any]]:
    """Read a profile CSV (format in the module docstring) and check every cell the fit uses.

    Returns:
        Dict of ``PROFILE_COLUMNS`` -> arrays of shape ``(n_rows,)``.
    Raises:
        ValueError: missing columns (named), no rows, or a cell the fit cannot use, naming the line, the column
            and the fix: a row with too few cells, a value that is not a finite number (NaN, inf), a count that is
            not a whole number >= 0 (``batch_size`` >= 1), ``service_ms`` <= 0, ``time_s`` < 0, or a modality
            other than ``text``, ``image``, ``image_text``.
    """
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in PROFILE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: profile CSV lacks column(s) {missing}; expected {list(PROFILE_COLUMNS)}")
        rows = list(reader)
    if not rows:
        raise ValueError(f"{path}: profile CSV has no rows")
    known = [m.value for m in MODALITIES]
    columns: dict[str, list[Any]] = {c: [] for c in PROFILE_COLUMNS}
    for line, r in enumerate(rows, start=2):
        if None in r or any(r.get(c) is None for c in PROFILE_COLUMNS):  # DictReader: None = a cell too many
            cells = sum(1 for k, v in r.items() if k is not None and v is not None) + len(r.get(None) or ())
            raise ValueError(f"{path}: line {line}: has {cells} cells; expected {len(reader.fieldnames or [])} "
                             f"({_FIX})")
        modality = str(r["modality"]).strip()
        if modality not in known:
            raise ValueError(f"{path}: line {line}: column modality={modality!r} is not one of "
                             f"{', '.join(known)} ({_FIX})")
        columns["modality"].append(modality)
        for col in PROFILE_COLUMNS[2:] + PROFILE_COLUMNS[:1]:
            columns[col].append(_cell(path, line, col, str(r[col])))
    out: dict[str, NDArray[Any]] = {"modality": np.array(columns["modality"], dtype=object)}
    for col in PROFILE_COLUMNS:
        if col != "modality":
            out[col] = np.array(columns[col], dtype=np.int64 if col in _INT_COLUMNS else np.float64)
    return out


def _cell(path: str | Path, line: int, col: str, text: str) -> float | int:
    """One numeric cell of a profile CSV, checked (see :func:`read_profile_csv`)."""
    where = f"{path}: line {line}: column {col}"
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}={text!r} is not a number ({_FIX})") from None
    if not math.isfinite(value):
        raise ValueError(f"{where}={text.strip()!r} is not a finite number ({_FIX})")
    if col in _INT_COLUMNS:
        if not value.is_integer():
            raise ValueError(f"{where}={text.strip()!r} is not a whole number ({_FIX})")
        least = _INT_COLUMNS[col]
        if value < least:
            raise ValueError(f"{where}={int(value)} must be >= {least} ({_FIX})")
        return int(value)
    if col == "service_ms" and value <= 0:
        raise ValueError(f"{where}={value} must be > 0: a request occupies its slot for some time ({_FIX})")
    if col == "time_s" and value < 0:
        raise ValueError(f"{where}={value} must be >= 0 (seconds since the profile started; {_FIX})")
    return value
