"""The demo's measured capacity: windows, scale-up merging, Ready times and the PASS/FAIL of the measured figures."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from modalscale.api.isvc_status import ScalingChange
from modalscale.demo.capacity import (
    PodRecord,
    judge_budget_scale_down,
    judge_scale_ups,
    measure,
    ready_time,
    scale_ups,
    window_stats,
)

T0 = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.UTC).timestamp()


def at(t_s: float) -> str:
    return dt.datetime.fromtimestamp(T0 + t_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def h(t_s: float, frm: int, to: int, reason: str = "ScaleUpForSLO") -> ScalingChange:
    return ScalingChange(dt.datetime.fromtimestamp(T0 + t_s, dt.UTC).replace(microsecond=0), frm, to, reason)


def steady(start_s: float, end_s: float, rps: float, latency_ms: float, ok: bool = True) -> list[Any]:
    n = int((end_s - start_s) * rps)
    return [(start_s + i / rps, latency_ms, "image_text", ok) for i in range(n)]


PODS = [PodRecord("p0", "real-node-0", True, -100.0, -80.0),
        PodRecord("p1", "real-node-0", True, 61.0, 95.0),
        PodRecord("p2", "real-node-0", True, 61.0, 100.0)]


def test_window_counts_offered_by_arrival_and_throughput_by_completion() -> None:
    records = steady(0, 10, 2.0, 1500.0) + [(5.0, 100.0, "text", False)]
    w = window_stats(records, 0.0, 10.0)
    assert (w.sent, w.answered, w.failed) == (21, 20, 1)
    assert w.offered_rps == pytest.approx(2.1)
    assert w.throughput_rps == pytest.approx(17 / 10)  # the last 3 answers complete after 10 s
    assert w.p95_ms == pytest.approx(1500.0)
    assert window_stats(records[:5], 0.0, 10.0).p95_ms is None  # too few to judge
    with pytest.raises(ValueError, match="empty window"):
        window_stats(records, 5.0, 5.0)


def test_ready_time_is_when_the_target_count_is_ready_at_once() -> None:
    assert ready_time(PODS, 3, 60.0) == 100.0
    assert ready_time(PODS, 2, 60.0) == 95.0
    gone = [PODS[0], PODS[1], PodRecord("p2", "n", True, 61.0, 100.0), PodRecord("p3", "n", True, 61.0, None)]
    gone[1] = PodRecord("p1", "n", True, 61.0, 95.0, deleted_s=98.0)
    assert ready_time(gone, 3, 60.0) is None


def test_a_start_from_zero_is_no_scale_up_to_measure_and_does_not_arm_the_budget_story() -> None:
    """A run at c94f82f: the demo's own start from zero (0 -> 1 ``Activated`` before the replay) was taken for a
    measured scale-up, and the budget story armed at t = 0 s (the limit exceeded before the shift)."""
    from modalscale.demo.budget_story import arm_due

    pods = [PodRecord("p0", "real-node-0", True, -140.0, -113.0)]
    history = [h(-140, 0, 1, "Activated"), h(-100, 1, 1, "FixedReplicas")]
    assert scale_ups(history, T0, pods) == []
    assert arm_due(scale_ups(history, T0, pods), 0.0, fallback_s=270.0)[0] is False
    ups = scale_ups([*history, h(130, 1, 3)], T0, [*pods, *PODS[1:]])
    assert [(u.from_replicas, u.to_replicas, u.reasons) for u in ups] == [(1, 3, ["ScaleUpForSLO"])]


def test_decisions_taken_before_the_replicas_were_ready_are_one_scale_up() -> None:
    ups = scale_ups([h(60, 1, 2), h(62, 2, 3, "ScaleUpForBurst"), h(200, 3, 2, "CappedByBudget")], T0, PODS)
    assert len(ups) == 1
    up = ups[0]
    assert (up.from_replicas, up.to_replicas, up.reasons) == (1, 3, ["ScaleUpForSLO", "ScaleUpForBurst"])
    assert (up.decision_s, up.ready_s, up.decision_to_ready_s) == (60.0, 100.0, 40.0)
    assert up.nodes == ["real-node-0"]


def test_a_scale_up_that_lowered_p95_under_the_same_load_passes_one_that_did_not_fails() -> None:
    records = steady(60, 100, 2.0, 4000.0) + steady(100, 200, 2.0, 600.0)
    ups = measure(scale_ups([h(60, 1, 3)], T0, PODS), records, end_s=300.0, budget_cap_s=None)
    up = ups[0]
    assert up.before is not None and up.after is not None
    assert (up.before.start_s, up.before.end_s) == (60.0, 100.0)
    assert (up.after.start_s, up.after.end_s) == (115.0, 145.0)
    ok, seen = judge_scale_ups(ups, slo_ms=800)
    assert ok, seen
    assert "p95 4000 -> 600 ms" in seen

    worse = measure(scale_ups([h(60, 1, 3)], T0, PODS), steady(60, 100, 2.0, 4000.0) + steady(100, 200, 2.0, 5000.0),
                    end_s=300.0, budget_cap_s=None)
    ok, seen = judge_scale_ups(worse, slo_ms=800)
    assert not ok and "NOT lowered" in seen

    other_load = measure(scale_ups([h(60, 1, 3)], T0, PODS), steady(60, 100, 2.0, 4000.0) + steady(100, 200, 1.0, 600),
                         end_s=300.0, budget_cap_s=None)
    ok, seen = judge_scale_ups(other_load, slo_ms=800)
    assert not ok and "offered load differs" in seen
    # Seen in a demo run: a 9 s window after one scale-up (cut by the next decision) counted 21 arrivals of a
    # constant-rate trace, 2.33 req/s against 2.90 req/s in the 21 s before: within its counting noise.
    short = measure(scale_ups([h(84, 1, 2), h(129, 2, 3)], T0,
                              [PODS[0], PodRecord("p1", "n", True, 84.0, 105.0), PodRecord("p2", "n", True, 129, 149)]),
                    steady(84, 105, 2.9, 6400.0) + steady(105, 129, 2.33, 420.0) + steady(129, 200, 3.0, 500.0),
                    end_s=300.0, budget_cap_s=None)
    ok, seen = judge_scale_ups(short[:1], slo_ms=800)
    assert ok, seen


def test_no_measurable_scale_up_fails_and_a_headroom_scale_up_is_not_judged() -> None:
    ok, seen = judge_scale_ups([], slo_ms=800)
    assert not ok and "no scale-up was measured" in seen
    calm = measure(scale_ups([h(60, 1, 3)], T0, PODS), steady(60, 200, 2.0, 300.0), end_s=300.0, budget_cap_s=None)
    ok, seen = judge_scale_ups(calm, slo_ms=800)
    assert not ok and "not judged" in seen
    # The budget's cap right after Ready leaves no 'after' window: not measured, not passed.
    capped = measure(scale_ups([h(60, 1, 3)], T0, PODS), steady(60, 200, 2.0, 4000.0), end_s=300.0,
                     budget_cap_s=104.0)
    assert capped[0].after is None
    assert not judge_scale_ups(capped, slo_ms=800)[0]


def test_budget_scale_down_passes_only_with_a_real_pod_removed_and_every_request_answered() -> None:
    history = [h(60, 1, 3), h(200, 3, 2, "CappedByBudget"), h(240, 2, 1, "CappedByBudget")]
    pods = [PodRecord("p0", "real-node-0", True, -100, -80), PodRecord("p1", "real-node-0", True, 61, 95, 201.0),
            PodRecord("p2", "real-node-0", True, 61, 100, 241.0)]
    ok, seen = judge_budget_scale_down(history, T0, pods, sent=500, answered=500, failed=0)
    assert ok, seen
    assert "2 on the real node" in seen and "3->2, 2->1" in seen
    assert not judge_budget_scale_down(history, T0, pods, sent=500, answered=499, failed=1)[0]
    assert not judge_budget_scale_down(history, T0, pods, sent=500, answered=498, failed=0)[0]  # lost, unanswered
    kwok = [PodRecord(p.name, "kwok-0", False, p.created_s, p.ready_s, p.deleted_s) for p in pods]
    assert not judge_budget_scale_down(history, T0, kwok, sent=500, answered=500, failed=0)[0]
    assert not judge_budget_scale_down(history[:1], T0, pods, sent=500, answered=500, failed=0)[0]


def test_offered_rates_overload_one_replica_after_the_shift_and_not_before() -> None:
    from modalscale.demo.capacity import OVERLOAD_FACTOR, PRE_SHIFT_UTILIZATION, plan_offered_rate

    # Measured in a demo run (load average 6-10): 19.27 req/s pre-shift mix, 5.13 req/s post-shift mix.
    plan = plan_offered_rate(pre_capacity_rps=19.27, post_capacity_rps=5.13)
    assert plan.rate_after_rps == pytest.approx(round(OVERLOAD_FACTOR * 5.13, 2))
    assert plan.rate_before_rps == pytest.approx(round(PRE_SHIFT_UTILIZATION * 19.27, 2))
    assert plan.overload == pytest.approx(OVERLOAD_FACTOR, abs=0.01) and plan.overload > 1
    assert plan.pre_utilization == pytest.approx(PRE_SHIFT_UTILIZATION, abs=0.01)
    # The pre-shift rate never exceeds the post-shift one (a pre-shift mix barely cheaper than the post-shift one).
    close = plan_offered_rate(pre_capacity_rps=6.0, post_capacity_rps=0.5)
    assert close.rate_before_rps == close.rate_after_rps == pytest.approx(0.65)


@pytest.mark.parametrize(("pre", "post", "field"), [(0.0, 2.0, "pre_capacity_rps"), (10.0, 0.0, "post_capacity_rps"),
                                                    (float("nan"), 2.0, "pre_capacity_rps"),
                                                    (10.0, -1.0, "post_capacity_rps")])
def test_offered_rate_refuses_an_unmeasured_capacity(pre: float, post: float, field: str) -> None:
    from modalscale.demo.capacity import plan_offered_rate

    with pytest.raises(ValueError, match=field):
        plan_offered_rate(pre, post)
    with pytest.raises(ValueError, match="overload"):
        plan_offered_rate(10.0, 2.0, overload=1.0)
    with pytest.raises(ValueError, match="pre_utilization"):
        plan_offered_rate(10.0, 2.0, pre_utilization=1.0)


def test_the_report_states_how_the_offered_rates_were_sized() -> None:
    from modalscale.demo.capacity import plan_offered_rate
    from modalscale.demo.report import plan_summary

    line = plan_summary(plan_offered_rate(pre_capacity_rps=19.27, post_capacity_rps=5.13))
    assert line == ("2.89 req/s before the shift (15% of one replica's measured capacity on the pre-shift mix, "
                    "19.27 req/s), 6.67 req/s from the shift on (1.30x one replica's measured capacity on the "
                    "post-shift mix, 5.13 req/s)")


def test_the_trace_steps_up_its_rate_at_the_shift_and_keeps_the_post_shift_arrivals() -> None:
    from modalscale.demo.run import default_trace

    full = default_trace(300.0, 6.0, 75.0)
    stepped = default_trace(300.0, 6.0, 75.0, rate_before_rps=3.0)
    before = [r for r in stepped if r.arrival_s < 75.0]
    # Thinning keeps each pre-shift arrival with probability 1/2: about 225 of ~450, well inside 4 sigma (~42).
    assert abs(len(before) - 0.5 * sum(1 for r in full if r.arrival_s < 75.0)) < 45
    assert len(before) / 75.0 == pytest.approx(3.0, rel=0.2)
    assert [r for r in stepped if r.arrival_s >= 75.0] == [r for r in full if r.arrival_s >= 75.0]
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(stepped, stepped[1:]))
    with pytest.raises(ValueError, match="rate_before_rps"):
        default_trace(300.0, 6.0, 75.0, rate_before_rps=7.0)


def test_on_the_real_node_the_shift_comes_a_minute_after_the_autoscaler_turns_on() -> None:
    from modalscale.demo.run import DemoConfig, shift_at_s

    assert shift_at_s(DemoConfig(duration_s=300), real=False) == 75.0
    assert shift_at_s(DemoConfig(duration_s=300), real=True) == 120.0  # autoscaler on at 60 s, + 60 s
    assert shift_at_s(DemoConfig(duration_s=600), real=True) == 150.0  # the ratio, when later
    with pytest.raises(ValueError, match="--duration 240 or more"):
        shift_at_s(DemoConfig(duration_s=200), real=True)


def test_a_merged_scale_up_whose_last_replica_never_started_is_measured_at_the_replicas_that_did() -> None:
    # Seen in a demo run: 1->2 at 131 s, 2->3 at 161 s (before the 2nd pod was Ready at 166 s); the 3rd pod was
    # still starting when the budget removed it at 280 s. The 2nd replica's capacity was added and is measured.
    pods = [PodRecord("p0", "real-node-0", True, -165.0, -130.0),
            PodRecord("p1", "real-node-0", True, 131.0, 166.0, deleted_s=305.0),
            PodRecord("p2", "real-node-0", True, 161.0, None, deleted_s=280.0)]
    (up,) = scale_ups([h(131, 1, 2, "ScaleUpForPanic"), h(161, 2, 3, "ScaleUpForPanic"),
                       h(220, 3, 2, "CappedByBudget")], T0, pods)
    assert (up.from_replicas, up.to_replicas, up.ready_replicas, up.ready_s) == (1, 3, 2, 166.0)
    records = steady(120, 166, 3.0, 9000.0) + steady(166, 220, 3.0, 600.0)
    (up,) = measure([up], records, 300.0, budget_cap_s=220.0)
    assert up.before is not None and up.after is not None
    assert (up.before.start_s, up.before.end_s, up.after.start_s, up.after.end_s) == (131.0, 166.0, 181.0, 211.0)
    assert judge_scale_ups([up], 800)[0]
    # Nothing added at all: not measured (and the judge fails).
    (none,) = scale_ups([h(131, 1, 2, "ScaleUpForPanic")], T0, pods[:1] + [PodRecord("p1", "n", True, 131.0)])
    assert (none.ready_s, none.ready_replicas) == (None, None)
    assert not judge_scale_ups(measure([none], records, 300.0, None), 800)[0]
