"""The source checkout this modalscale runs from: what the image builds and the demo read besides the package.

``modalscale images`` builds from the Dockerfiles, the chart and the code folders, and ``modalscale demo`` installs
the CRDs from ``crds/``: none of them is in an installed wheel (the package holds the Python code only). Run from
an installed wheel they used to fail with a ``FileNotFoundError`` traceback naming a file three folders above
``site-packages``; :func:`source_root` says instead what is missing and what to do.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
"""Where the checkout's root would be: ``src/modalscale/devenv/`` is three levels below it (an editable install
or a run from the clone). In an installed wheel this is some folder above ``site-packages``."""

MARKERS = ("pyproject.toml", "crds", "charts/modalscale", "Dockerfile.runtime-cpu", "Dockerfile.operator")
"""Paths, relative to the root, that every source checkout of modalscale has."""


class NotACheckoutError(RuntimeError):
    """This modalscale is not run from a source checkout; the message names what is missing and the fix."""


def missing_parts(root: Path | None = None) -> list[str]:
    """The :data:`MARKERS` that ``root`` (default :data:`ROOT`) lacks; empty in a checkout."""
    base = ROOT if root is None else root
    return [m for m in MARKERS if not (base / m).exists()]


def source_root(purpose: str, root: Path | None = None) -> Path:
    """``root`` when it is a source checkout of modalscale.

    Args:
        purpose: What needs the checkout, as the user typed it (``"modalscale images build"``).
        root: The candidate root (default :data:`ROOT`).
    Returns:
        ``root``.
    Raises:
        NotACheckoutError: ``root`` lacks one of :data:`MARKERS`; the message names ``purpose``, the missing
            paths and the fix (run it from a clone).
    """
    root = ROOT if root is None else root
    missing = missing_parts(root)
    if missing:
        raise NotACheckoutError(
            f"{purpose} builds from a source checkout of modalscale, and this one is installed without it "
            f"({root} has no {', '.join(missing)}): clone the repository and run it there (scripts/demo.sh "
            "sets up its .venv with an editable install)")
    return root
