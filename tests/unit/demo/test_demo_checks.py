"""The demo's verdict: what counts as the scale-up, the enforcement and one alert per threshold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modalscale.demo.report import Checks


@dataclass
class Msg:
    text: str

    def room_text(self) -> str:
        return self.text


class Room:
    def __init__(self, *texts: str) -> None:
        self.accepted = [Msg(t) for t in texts]


@dataclass
class S:
    t_s: float
    desired: int | None


def statuses(
        history: list[dict[str, Any]], crossed: list[int], enforced: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    isvc = {"status": {"scalingHistory": history}}
    pol = {"status": {"thresholds": [{"percent": p, "crossed": True} for p in crossed]
                      + [{"percent": 100, "crossed": True, "forecast": True}],
                      "enforcedServices": [{"namespace": "demo", "name": "vc", "action": "CapReplicas",
                                            "maxReplicas": 2, "since": "2026-11-30T12:00:00Z"}] if enforced
                      else []}}
    return isvc, pol


def h(frm: int, to: int, reason: str) -> dict[str, Any]:
    return {"time": "2026-11-30T12:00:00Z", "from": frm, "to": to, "reason": reason}


def test_a_run_with_shift_scale_up_cap_and_one_alert_per_threshold_passes() -> None:
    isvc, pol = statuses([h(1, 3, "ScaleUpForSLO"), h(3, 2, "CappedByBudget")], [50, 80], enforced=True)
    room = Room("Budget demo/b crossed 50 % of its daily limit\nSpent: 1 USD (150 %)",
                "Budget demo/b crossed 80 % of its daily limit",
                "Budget demo/b is forecast to reach 100 % of its daily limit")
    checks = Checks.evaluate(isvc, pol, room, shift_at_s=50, samples=[S(10, 1), S(60, 3)])
    assert checks.all_passed, checks.summary()


def test_a_threshold_alerted_twice_or_missing_fails() -> None:
    isvc, pol = statuses([h(1, 3, "ScaleUpForSLO"), h(3, 2, "CappedByBudget")], [50, 80], enforced=True)
    twice = Room("Budget demo/b crossed 50 % of its daily limit", "Budget demo/b crossed 50 %, 80 % of its daily limit")
    checks = Checks.evaluate(isvc, pol, twice, shift_at_s=None)
    assert not checks.all_passed
    assert "50%: 2" in checks.summary() and "80%: 1" in checks.summary()


def test_no_scale_up_after_the_shift_and_no_enforcement_fail() -> None:
    isvc, pol = statuses([h(1, 2, "ScaleUpForSLO")], [50], enforced=False)
    checks = Checks.evaluate(isvc, pol, Room("Budget demo/b crossed 50 % of its daily limit"), shift_at_s=50,
                             samples=[S(10, 2), S(60, 2)])
    failed = {name for name, ok, _ in checks.items if not ok}
    assert failed == {"scale-up after the modality shift", "scale-down enforced at the budget cap"}
