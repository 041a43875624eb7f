"""Condition types and CamelCase reasons: a re-export of :mod:`modalscale.api.conditions`, where they live per kind.

Kept so ``from modalscale.operator import reasons as R`` keeps working; new names go in ``modalscale.api.conditions``.
"""

from __future__ import annotations

from modalscale.api.conditions import *  # noqa: F403
from modalscale.api.conditions import __all__  # noqa: F401
