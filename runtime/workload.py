"""Real request content for tests and load: photographs shipped inside Python packages, and arrival traces.

Photographs (all load offline from installed wheels; provenance as stated by the packages): scikit-image's
``astronaut.png`` (NASA, public domain), ``coffee.png`` (Rachel Michetti, CC0), ``chelsea.png`` (Stefan van der
Walt, CC0) and ``rocket.jpg`` (SpaceX, public domain), and scikit-learn's ``china.jpg`` and ``flower.jpg``
(Flickr, CC BY 2.0, see ``sklearn/datasets/images/README.txt``).

Trace CSV format (header required, one row per request, times in seconds from the start):
``arrival_s,image_count,image_width,image_height,text_tokens``; ``image_count`` 0 means text-only,
``text_tokens`` 0 means no text.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import io
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

TRACE_COLUMNS = ("arrival_s", "image_count", "image_width", "image_height", "text_tokens")

WORDS = ("a photo of the cat on a red chair next to a cup of coffee while the man in a white suit "
         "looks at the old stone house near the river and two dogs play on the green grass under the "
         "blue sky in the morning light").split()
"""Common English words, each one WordPiece token in MiniLM's uncased vocabulary."""


def _package_dir(name: str) -> Path:
    """The folder of installed package ``name``, found without importing it (importing scikit-learn's datasets,
    which bring SciPy and joblib, and scikit-image only to locate six files was about 4 s of CPU on a shared 2-core
    machine, before the load generator's first request)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def _photo_paths() -> dict[str, Path]:
    skimage_data = _package_dir("skimage") / "data"
    sklearn_images = _package_dir("sklearn") / "datasets" / "images"
    return {
        "astronaut": skimage_data / "astronaut.png",
        "coffee": skimage_data / "coffee.png",
        "chelsea": skimage_data / "chelsea.png",
        "rocket": skimage_data / "rocket.jpg",
        "china": sklearn_images / "china.jpg",
        "flower": sklearn_images / "flower.jpg",
    }


@functools.cache
def photo_bytes(name: str) -> bytes:
    """The encoded file of photograph ``name`` exactly as shipped (PNG or JPEG).

    Raises:
        KeyError: Unknown name (see :func:`photo_names`).
        FileNotFoundError: The package that ships it is not installed.
    """
    return _photo_paths()[name].read_bytes()


def photo_names() -> tuple[str, ...]:
    """Names accepted by :func:`photo_bytes`."""
    return tuple(_photo_paths())


@functools.lru_cache(maxsize=256)
def photo_at(name: str, width: int, height: int, fmt: str = "JPEG") -> bytes:
    """Photograph ``name`` resized to ``width`` x ``height`` pixels and encoded as ``fmt`` (quality 90)."""
    with Image.open(io.BytesIO(photo_bytes(name))) as image:
        resized = image.convert("RGB").resize((width, height), Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    resized.save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


FIDELITY_TEXT_MODULES = (
    "collections", "functools", "itertools", "os", "pathlib", "re", "string", "textwrap", "datetime", "decimal",
    "fractions", "statistics", "random", "heapq", "bisect", "difflib", "inspect", "typing", "unittest",
    "urllib.parse", "configparser", "pickle", "enum", "dataclasses", "contextlib", "socket", "queue", "tempfile",
    "glob", "codecs", "locale", "calendar", "math", "copy", "pprint", "weakref", "types", "struct",
    "hashlib", "uuid", "base64", "html", "mimetypes", "smtplib", "ftplib", "gzip", "zlib", "sched", "signal",
    "ssl", "asyncio", "concurrent.futures", "multiprocessing", "doctest", "pdb", "timeit", "warnings",
    "traceback", "ast", "dis", "tokenize", "platform", "sysconfig", "shlex", "ipaddress", "numbers", "filecmp",
)
"""Standard-library modules whose docstrings give the fidelity texts; disjoint from the modules of the INT8
calibration texts (``modalscale.runtime.model.calibration``)."""


def docstring_paragraphs(module_names: Sequence[str] = FIDELITY_TEXT_MODULES) -> list[str]:
    """Distinct English paragraphs (>= 40 characters, mostly letters) of the docstrings of ``module_names`` and of
    the public classes and functions each defines (not those it imports), whitespace collapsed, in a deterministic
    order."""
    import importlib
    import inspect
    import re

    out: list[str] = []
    for name in module_names:
        module = importlib.import_module(name)
        objects = [module] + [getattr(module, attr) for attr in sorted(dir(module)) if not attr.startswith("_")]
        for obj in objects:
            if obj is not module and (inspect.ismodule(obj) or getattr(obj, "__module__", None) != name):
                continue
            if not (inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj)):
                continue
            doc = inspect.cleandoc(obj.__doc__) if isinstance(obj.__doc__, str) else ""  # not inherited ones
            for paragraph in re.split(r"\n\s*\n", doc or ""):
                text = " ".join(paragraph.split())
                if (len(text) >= 40 and sum(c.isalpha() for c in text) > 0.7 * len(text)
                        and not text.startswith((">>>", "..", "-"))):
                    out.append(text)
    return list(dict.fromkeys(out))


def fidelity_texts(count: int, seed: int = 0, exclude: Sequence[str] = ()) -> list[str]:
    """``count`` real English texts of 3 to ~300 words (log-uniform lengths: short queries to texts past the
    encoder's 254-token window), cut from :func:`docstring_paragraphs`, none equal to an ``exclude`` text."""
    excluded = set(exclude)
    paragraphs = [p for p in docstring_paragraphs() if p not in excluded]
    words = " ".join(paragraphs).split()
    rng = random.Random(seed)
    texts: list[str] = []
    while len(texts) < count:
        length = int(round(math.exp(rng.uniform(math.log(3), math.log(300)))))
        start = rng.randrange(0, len(words) - length)
        text = " ".join(words[start:start + length])
        if text not in excluded:
            texts.append(text)
    return texts


def text_of_tokens(tokens: int, seed: int = 0) -> str:
    """A text of exactly ``tokens`` MiniLM WordPiece tokens (each word of :data:`WORDS` is one token)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(tokens))


@dataclass(frozen=True)
class TraceRow:
    """One request of an arrival trace."""

    arrival_s: float
    image_count: int
    image_width: int
    image_height: int
    text_tokens: int

    @property
    def modality(self) -> str:
        """``image``, ``text`` or ``image_text`` (the model's MODALITY output for this request)."""
        if self.image_count and self.text_tokens:
            return "image_text"
        return "image" if self.image_count else "text"


def read_trace(path: Path) -> list[TraceRow]:
    """Read a trace CSV (see module docstring), sorted by arrival.

    Raises:
        ValueError: Missing columns or a bad value (message names the line and column).
    """
    with path.open(newline="", encoding="utf-8") as fh:
        return parse_trace(fh)


def parse_trace(lines: Iterable[str]) -> list[TraceRow]:
    """Parse trace CSV lines (pure); see :func:`read_trace`."""
    reader = csv.DictReader(lines)
    missing = [c for c in TRACE_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"trace: missing columns {missing} (need {', '.join(TRACE_COLUMNS)})")
    rows = []
    for number, raw in enumerate(reader, start=2):
        try:
            row = TraceRow(arrival_s=float(raw["arrival_s"]), image_count=int(raw["image_count"]),
                           image_width=int(raw["image_width"] or 0), image_height=int(raw["image_height"] or 0),
                           text_tokens=int(raw["text_tokens"] or 0))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"trace line {number}: {exc}") from None
        if row.arrival_s < 0 or row.image_count < 0 or row.text_tokens < 0:
            raise ValueError(f"trace line {number}: negative value")
        if row.image_count and (row.image_width < 1 or row.image_height < 1):
            raise ValueError(f"trace line {number}: image_width and image_height must be >= 1 with images")
        if not row.image_count and not row.text_tokens:
            raise ValueError(f"trace line {number}: a request needs images or text")
        rows.append(row)
    return sorted(rows, key=lambda r: r.arrival_s)


def write_trace(rows: Sequence[TraceRow], path: Path) -> None:
    """Write ``rows`` as a trace CSV."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(TRACE_COLUMNS)
        for r in rows:
            writer.writerow([f"{r.arrival_s:.6f}", r.image_count, r.image_width, r.image_height, r.text_tokens])


def synthetic_trace(rate_rps: float, duration_s: float, seed: int = 0,
                    mix: Sequence[tuple[str, float]] = (("text", 0.4), ("image", 0.3), ("image_text", 0.3)),
                    sizes: Sequence[tuple[int, int]] = ((224, 224), (640, 480), (320, 240), (1024, 768)),
                    ) -> list[TraceRow]:
    """A Poisson arrival trace with a modality mix (pure, seeded).

    Args:
        rate_rps: Mean arrivals per second.
        duration_s: Length in seconds.
        seed: RNG seed.
        mix: ``(modality, probability)`` pairs.
        sizes: Image ``(width, height)`` choices in pixels.
    Raises:
        ValueError: ``rate_rps`` or ``duration_s`` not > 0 and finite (a negative rate never reached the end).
    """
    if not (math.isfinite(rate_rps) and rate_rps > 0 and math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"rate_rps and duration_s must be > 0 and finite, got {rate_rps!r} and {duration_s!r}")
    rng = random.Random(seed)
    rows: list[TraceRow] = []
    t = 0.0
    names, weights = zip(*mix, strict=True)
    while True:
        t += rng.expovariate(rate_rps)
        if t >= duration_s:
            return rows
        modality = rng.choices(names, weights)[0]
        width, height = rng.choice(list(sizes))
        images = 0 if modality == "text" else rng.choice((1, 1, 1, 2, 4))
        tokens = 0 if modality == "image" else rng.choice((8, 16, 32, 64, 128))
        rows.append(TraceRow(t, images, width if images else 0, height if images else 0, tokens))
