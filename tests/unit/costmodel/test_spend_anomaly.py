"""Spend-anomaly detector: injected spikes are found once with their driver; quiet series stay quiet."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

import pytest

from modalscale.costmodel.anomaly import AnomalyConfig, AnomalyState, BurnSample, detect, replay, score

T0 = datetime(2026, 11, 1, tzinfo=UTC)
PRICE = 0.754276239  # one L4 replica (4 CPU, 16Gi), USD/h
STEP_S = 300


def daily_series(days: int, seed: int = 0, spike: tuple[float, float, float] | None = None,
                 price_change_at_h: float | None = None) -> list[BurnSample]:
    """5-minute samples of a service whose replicas follow a daily cycle (2 at night, 6 at 14:00) with +/-1 noise.

    spike: (start hour since T0, hours, replica factor); price_change_at_h: from then on the price is 4x.
    """
    rng = random.Random(seed)
    out = []
    for i in range(int(days * 86_400 / STEP_S)):
        t = T0 + timedelta(seconds=i * STEP_S)
        hour = i * STEP_S / 3600
        replicas = max(1, round(4 - 2 * math.cos(2 * math.pi * (hour - 2) / 24) + rng.choice((-1, 0, 0, 1))))
        if spike and spike[0] <= hour < spike[0] + spike[1]:
            replicas = round(replicas * spike[2])
        price = PRICE * (4 if price_change_at_h is not None and hour >= price_change_at_h else 1)
        out.append(BurnSample(t, replicas * price, replicas, price))
    return out


def test_a_quiet_week_raises_no_alarm() -> None:
    # 8 days, 2304 samples at 5 min: the first day decides nothing (12 samples an hour are too few for the
    # recent baseline), then the seasonal baseline has 13 same-phase samples a day.
    assert replay(daily_series(8, seed=1)) == []


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_an_injected_replica_spike_is_found_at_once_once_and_blamed_on_replicas(seed: int) -> None:
    spike_h = 7 * 24 + 14  # day 8, 14:00, the daily peak: 3 x the replicas for 40 min
    series = daily_series(8, seed=seed, spike=(spike_h, 40 / 60, 3.0))
    (found,) = replay(series)
    delay_s = (found.sample.time - (T0 + timedelta(hours=spike_h))).total_seconds()
    assert delay_s == 0  # the first spiked sample (5-min samples: the 120 s smoothing window holds only it)
    assert found.driver == "replicas" and found.score.baseline == "seasonal"
    assert found.name == "svc" and "driver: replicas" in found.describe()


def test_a_price_change_is_blamed_on_the_price() -> None:
    series = daily_series(8, seed=5, price_change_at_h=7 * 24 + 3)  # day 8, 03:00: the GPU got 4x dearer
    (found,) = replay(series)  # one alert for the whole shifted day: it stays an anomaly, no flapping
    assert found.driver == "price" and "price 0.7543 -> 3.017 USD/replica-hour" in found.describe()
    assert 0 <= (found.sample.time - (T0 + timedelta(hours=7 * 24 + 3))).total_seconds() <= 15 * 60


def test_a_new_service_uses_its_recent_hour_and_an_anomaly_alerts_once_until_it_clears() -> None:
    flat = [BurnSample(T0 + timedelta(minutes=i), 2 * PRICE, 2, PRICE) for i in range(60)]
    high = [BurnSample(T0 + timedelta(minutes=60 + i), 8 * PRICE, 8, PRICE) for i in range(5)]
    state, alerts = AnomalyState(), []
    for i in range(len(flat) + len(high)):
        found, state = detect({("ml", "vc"): (flat + high)[: i + 1]}, state)
        alerts += found
    (a,) = alerts
    assert a.score.baseline == "recent" and a.driver == "replicas" and ("ml", "vc") in state.active
    # Back to normal: calm from minute 66 (the 120 s window then holds only normal samples), cleared 30 min later.
    series = flat + high
    for minutes in (65, 66, 80, 97):
        series = series + [BurnSample(T0 + timedelta(minutes=minutes), 2 * PRICE, 2, PRICE)]
        found, state = detect({("ml", "vc"): series}, state)
        assert found == []
    assert state.active == {}


def test_too_little_history_decides_nothing_and_small_services_stay_quiet() -> None:
    few = [BurnSample(T0 + timedelta(minutes=i), 1.0, 1, 1.0) for i in range(29)]
    assert score(few[:-1], few[-1]) is None
    tiny = [BurnSample(T0 + timedelta(minutes=i), 0.05, 1, 0.05) for i in range(40)]
    tiny.append(BurnSample(T0 + timedelta(minutes=40), 0.5, 10, 0.05))  # 10x, but only +0.45 USD/h
    assert replay(tiny) == []
    with pytest.raises(ValueError, match="timezone-aware"):
        score(few, BurnSample(datetime(2026, 1, 1), 1.0, 1, 1.0))


def _simulated(hours: int, seed: int) -> list[BurnSample]:
    from modalscale.autoscaler.simulate import SimulationConfig, run_simulation
    from modalscale.autoscaler.traces import TraceSpec, generate_trace

    trace = generate_trace(TraceSpec(duration_s=hours * 3600, mean_rate_rps=1, rate_period_s=3600, random_state=seed))
    run = run_simulation(trace, SimulationConfig(policies=("predictive",), random_state=seed))["predictive"]
    return [BurnSample(T0 + timedelta(seconds=t), r * PRICE, r, PRICE)
            for t, r in zip(run["decision_times_s"], run["ready_replicas"])]


def test_on_a_simulated_replica_timeline_quiet_stays_quiet_and_an_injected_spike_is_found() -> None:
    # The predictive autoscaler's ready replicas every 15 s over a 3 h trace whose rate cycles hourly: the
    # season is the hour.
    cfg = AnomalyConfig(season_s=3600, slot_s=600, seasons=2, recent_s=900)
    quiet = _simulated(3, seed=7)
    # In the first season only the recent 15 min are a baseline, and the first hourly peak (1 -> 3 replicas) is
    # new to it: one warm-up alarm. Once a season of history exists, the quiet trace raises none.
    alarms = replay(quiet, cfg)
    assert all(a.score.baseline == "recent" and a.sample.time < quiet[0].time + timedelta(hours=1) for a in alarms)
    assert len(alarms) <= 1
    start = len(quiet) * 3 // 4  # at 2:15, in the third season: 8 replicas more for 5 min
    spiked = [BurnSample(s.time, (s.replicas + 8) * PRICE, s.replicas + 8, PRICE)
              if start <= i < start + 20 else s for i, s in enumerate(quiet)]
    (found,) = [a for a in replay(spiked, cfg) if a not in alarms]
    assert found.driver == "replicas" and found.score.baseline == "seasonal"
    # found once the spike fills half of the 120 s smoothing window: the 4th or 5th sample of 15 s
    assert 45 <= (found.sample.time - quiet[start].time).total_seconds() <= 60


def test_an_active_anomaly_without_a_sample_now_is_held_while_in_scope_and_forgotten_out_of_it() -> None:
    flat = [BurnSample(T0 + timedelta(minutes=i), 2 * PRICE, 2, PRICE) for i in range(60)]
    high = [BurnSample(T0 + timedelta(minutes=60 + i), 8 * PRICE, 8, PRICE) for i in range(2)]
    found, state = detect({("ml", "vc"): flat + high}, AnomalyState())
    assert len(found) == 1 and ("ml", "vc") in state.active
    # The next evaluation could not read its burn rate: no sample, still selected -> held, not ended.
    found, held = detect({}, state, in_scope={("ml", "vc")})
    assert found == [] and held == state
    # No longer selected: forgotten (as without in_scope, whose default is the services with samples).
    assert detect({}, state, in_scope=set())[1] == AnomalyState()
    assert detect({}, state)[1] == AnomalyState()


def _first_decision_s(interval_s: float, cfg: AnomalyConfig, days: float = 8) -> float | None:
    """The review's measurement: a flat series at ``interval_s``, kept as the operator keeps it (``trim_history``),
    scored at every evaluation; seconds from the first sample to the first decision (None: none in ``days``)."""
    from modalscale.costmodel.anomaly import trim_history

    history: list[BurnSample] = []
    for i in range(int(days * 86_400 / interval_s)):
        now = BurnSample(T0 + timedelta(seconds=i * interval_s), 2 * PRICE, 2, PRICE)
        if score(history, now, cfg) is not None:
            return i * interval_s
        history = trim_history([*history, now], now.time, cfg)
    return None


@pytest.mark.parametrize(("interval_s", "decided_by_s"), [
    (60, 1_860), (116, 3_600), (117, 3_600), (300, 3_600), (1_800, 3 * 3_600), (2_400, 4 * 3_600),
    (3_600, 6 * 3_600)])
def test_every_evaluation_interval_the_crd_allows_reaches_a_decision_within_hours(interval_s: int,
                                                                                  decided_by_s: float) -> None:
    """With the fixed minimums (30 recent, 10 same-phase samples) the first decision came after a day at 117 s,
    after about 4 days at 1800 s and never from about 2400 s (the recent hour holds 3600 / interval samples).
    The minimums now scale with the interval (``for_interval``), floored at 5 samples."""
    from modalscale.costmodel.anomaly import MIN_BASELINE_SAMPLES, for_interval

    cfg = for_interval(AnomalyConfig(), interval_s)
    first = _first_decision_s(interval_s, cfg)
    assert first is not None and first <= decided_by_s
    assert MIN_BASELINE_SAMPLES <= cfg.min_recent_samples <= 30 and MIN_BASELINE_SAMPLES <= cfg.min_baseline_samples
    assert for_interval(cfg, interval_s) == cfg  # idempotent: the handler and the planner may both apply it


def test_the_interval_rule_keeps_the_defaults_where_the_hour_holds_them_and_a_lower_setting_is_kept() -> None:
    from modalscale.costmodel.anomaly import for_interval

    assert for_interval(AnomalyConfig(), 60) == AnomalyConfig()
    wide = for_interval(AnomalyConfig(), 1_800)
    # 1 sample in the last hour: the window widens to hold 5 (and one spare interval), the seasonal minimum is 5.
    assert (wide.min_recent_samples, wide.recent_s, wide.min_baseline_samples) == (5, 120 + 6 * 1_800, 5)
    assert for_interval(AnomalyConfig(min_recent_samples=3), 3_600).min_recent_samples == 3
    with pytest.raises(ValueError, match="evaluationIntervalSeconds"):
        for_interval(AnomalyConfig(), 0)


def test_the_anomaly_text_shows_burn_rates_as_money_is_shown_everywhere() -> None:
    """A service scaled to zero burns only its two gateway pods, 0.0084 USD/h, then 10 replicas: the baseline read
    '0.01 USD/h' (float .2f: rounded up, and a real 0.004 read 0.00) where the status and the alerts show an amount
    under a cent to 2 significant digits (money.display_usd): '0.0084'."""
    from modalscale.costmodel.anomaly import Anomaly, Score

    now = BurnSample(T0, 10 * PRICE + 0.0084, 10, PRICE)
    found = Anomaly("ml", "vc", now, Score(400.0, 10 * PRICE + 0.0084, 0.0084, 0.0021, "recent", 30, 0.0, PRICE),
                    "replicas")
    text = found.describe()
    assert "burns 7.55 USD/h (median of the last samples 7.55) against a recent baseline of 0.0084 USD/h" in text
    assert "replicas 0 -> 10" in text
