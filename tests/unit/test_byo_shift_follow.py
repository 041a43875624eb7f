"""How ``benchmarks/byo_shift.py`` counts the decisions a policy took to follow a shift (its figure's one rule)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import byo_shift  # a benchmark script, not a package


def log(*points: tuple[float, int]) -> list[dict[str, Any]]:
    return [{"t_s": t, "replicas": n} for t, n in points]


def test_decisions_to_follow_count_from_the_first_decision_after_the_shift() -> None:
    # shift at 95 s; decisions at 65, 80 (before), 95, 110, 125, 140 (after): 1 -> 4 reached at the second after
    assert byo_shift.follow(log((65, 1), (80, 1), (95, 2), (110, 4), (125, 4), (140, 4)), 95.0) == (1, 4, 2)
    assert byo_shift.follow(log((80, 1), (95, 5), (110, 4), (125, 4)), 95.0) == (1, 4, 1)  # an overshoot counts


def test_a_count_that_never_moved_or_a_missing_side_measures_nothing() -> None:
    assert byo_shift.follow(log((80, 2), (95, 2), (110, 2)), 95.0) == (2, 2, 0)
    assert byo_shift.follow(log((95, 3)), 95.0) == (None, None, None)
    assert byo_shift.follow(log((80, 3), (95, 2), (110, 1)), 95.0) == (3, 1, 2)  # a shift down counts the same way
