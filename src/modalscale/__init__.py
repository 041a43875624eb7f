"""modalscale: serve multimodal models on Triton, scale them on learned per-request service times, keep spend in budget.

The code lives in the top-level folders ``operator/``, ``autoscaler/``, ``costmodel/`` and ``runtime/``,
imported only as ``modalscale.<folder>`` through the symlinks beside this file.
"""

__version__ = "0.1.0"

GROUP = "modalscale.io"
"""API group of both CRDs."""
VERSION = "v1alpha1"
"""API version of both CRDs."""
