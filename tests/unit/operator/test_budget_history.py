"""Spend-anomaly history across a restart (pure parts): the Prometheus queries and answers, the alerted set in
status, and the planner holding its decisions while the history could not be read.

Prices as in test_budget_plan: one nvidia-l4 replica of ``make_isvc`` costs 0.600125239 USD/h.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from modalscale.costmodel.anomaly import AnomalyConfig, AnomalyState, BurnSample
from modalscale.costmodel.budget import AlertKind, FiringAlert
from modalscale.operator.budget.history import (
    BURN_METRIC,
    PRICE_METRIC,
    REPLICAS_METRIC,
    BurnGauges,
    HistoryUnavailable,
    history_queries,
    merge_history,
    parse_history,
)
from modalscale.operator.budget.plan import plan_policy
from modalscale.operator.budget.spend_anomalies import HistoryRead
from modalscale.operator.conditions import get
from modalscale.operator.settings import ConfigError, Settings
from tests.factories import anomalies_json, read_budget
from tests.unit.operator.test_budget_plan import CATALOG, T0, make_isvc, make_pod, make_policy, observed, persisted

PRICE = 0.600125239
KEY = ("ml", "vc")


def matrix(*series: tuple[dict[str, str], list[tuple[float, float]]], **extra: Any) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[ts, str(v)] for ts, v in values]} for labels, values in series]}, **extra}


LABELS = {"policy_namespace": "ml", "policy": "daily", "namespace": "ml", "inferenceservice": "vc"}


def test_queries_read_the_dense_window_at_the_interval_and_older_seasons_at_300_s() -> None:
    cfg = AnomalyConfig()  # 7 seasons of a day, 1 h slots, 1 h recent window
    qs = history_queries("ml", "daily", T0, cfg, 60)
    assert [q[0] for q in qs] == [BURN_METRIC] * 2 + [REPLICAS_METRIC] * 2 + [PRICE_METRIC] * 2
    metric, query, start, end, step = qs[0]
    assert query == f'last_over_time({BURN_METRIC}{{policy_namespace="ml",policy="daily"}}[60s])'
    assert (start, end, step) == (T0 - dt.timedelta(hours=1), T0, 60.0)
    _, query, start, end, step = qs[1]
    assert query.endswith("[300s])") and step == 300.0
    # 7 days + one slot back, up to one step before the dense window: about 2,000 points, under Prometheus' 11,000
    assert (start, end) == (T0 - dt.timedelta(days=7, hours=1), T0 - dt.timedelta(hours=1, seconds=300))
    assert (T0 - start).total_seconds() / step < 11_000
    # a label value with a quote cannot break out of the selector
    assert 'policy="a\\"b"' in history_queries("ml", 'a"b', T0, cfg, 60)[0][1]


def test_answers_join_the_three_gauges_per_service_and_time() -> None:
    t = T0.timestamp()
    ans = [(BURN_METRIC, matrix((LABELS, [(t - 120, 1.2), (t - 60, 6.0), (t - 30, 6.0)]))),
           (REPLICAS_METRIC, matrix((LABELS, [(t - 120, 2), (t - 60, 10)]))),
           (PRICE_METRIC, matrix((LABELS, [(t - 120, PRICE), (t - 60, PRICE)])))]
    out = parse_history(ans)
    # t - 30 has a burn rate but no replicas: that point is left out, not guessed
    assert out == {KEY: [BurnSample(T0 - dt.timedelta(seconds=120), 1.2, 2, PRICE),
                         BurnSample(T0 - dt.timedelta(seconds=60), 6.0, 10, PRICE)]}


@pytest.mark.parametrize("body, words", [
    ({"status": "error", "errorType": "timeout", "error": "query timed out"}, "query timed out"),
    (matrix((LABELS, [(1.0, 1.0)]), warnings=["partial response: store unavailable"]), "partial result"),
    ({"status": "success", "data": {"resultType": "vector", "result": []}}, "malformed"),
    (matrix(({"namespace": "ml"}, [(1.0, 1.0)])), "malformed"),
    (matrix((LABELS, [(1.0, float("nan"))])), "malformed"),
    ("<html>", "status is not success"),
])
def test_an_answer_that_is_not_the_whole_history_is_refused(body: Any, words: str) -> None:
    with pytest.raises(HistoryUnavailable, match=words):
        parse_history([(BURN_METRIC, body)])


def test_merge_keeps_memory_and_adds_only_older_samples_from_prometheus() -> None:
    old = [BurnSample(T0 - dt.timedelta(seconds=s), 1.0, 1, 1.0) for s in (300, 200, 100)]
    mem = [BurnSample(T0 - dt.timedelta(seconds=150), 2.0, 2, 1.0)]
    assert merge_history({KEY: old}, {KEY: mem}) == {KEY: old[:2] + mem}
    assert merge_history({KEY: old}, {}) == {KEY: old}


def test_the_alerted_set_round_trips_through_status_and_a_bad_item_names_its_field() -> None:
    state = AnomalyState({KEY: T0, ("ml", "b"): T0 + dt.timedelta(seconds=1.5)},
                         {KEY: T0 + dt.timedelta(minutes=3)})
    items = anomalies_json(state)
    assert items == [{"namespace": "ml", "name": "b", "since": "2026-11-30T10:00:01Z"},
                     {"namespace": "ml", "name": "vc", "since": "2026-11-30T10:00:00Z",
                      "calmSince": "2026-11-30T10:03:00Z"}]
    back = read_budget({"spendAnomalies": items}).anomaly_state
    assert back.active[KEY] == T0 and back.calm_since == {KEY: T0 + dt.timedelta(minutes=3)}
    assert read_budget({}).anomaly_state == AnomalyState()
    bad = read_budget({"spendAnomalies": [{"namespace": "ml", "name": "vc", "since": "yesterday"}]})
    assert bad.problem is not None and "status.spendAnomalies[0].since" in bad.problem


def test_an_unreadable_spend_anomalies_item_holds_the_policy_as_invalid_status() -> None:
    policy = persisted(make_policy(), {"spendAnomalies": [{"namespace": "ml", "name": "vc"}]})
    plan = plan_policy(policy, observed(make_isvc()), CATALOG, [], T0)
    ready = get(plan.status_patch["conditions"], "Ready")
    assert ready is not None and ready["reason"] == "InvalidStatus" and "spendAnomalies[0]" in ready["message"]
    assert plan.alerts == ()


def steady(minutes: int = 40) -> dict[tuple[str, str], list[BurnSample]]:
    return {KEY: [BurnSample(T0 - dt.timedelta(minutes=minutes - i), 2 * PRICE, 2, PRICE) for i in range(minutes)]}


TEN = observed(make_isvc(), pods={"ml": [make_pod("vc", n) for n in range(10)]})
ROOM = [{"name": "room", "type": "Slack", "secretRef": {"name": "hook"}}]


def test_a_restart_during_an_anomaly_does_not_alert_it_again() -> None:
    policy = make_policy(notifications=ROOM)
    first = plan_policy(policy, TEN, CATALOG, [], T0, history=steady())
    assert [a.kind.value for a in first.alerts] == ["SpendAnomaly"]
    stored = persisted(policy, first.status_patch)
    # A new operator: its history is what Prometheus gave back (the same samples, plus the spike), its memory empty.
    reloaded = steady()
    reloaded[KEY].append(first.burn_samples[KEY])
    after = plan_policy(stored, TEN, CATALOG, [], T0 + dt.timedelta(minutes=1), history=reloaded,
                        history_read=HistoryRead(True, "Read 41 samples"))
    assert after.alerts == () and KEY in after.anomaly_state.active
    cond = get(after.status_patch["conditions"], "SpendAnomalyHistory")
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "HistoryRead")
    # The same restart without status.spendAnomalies (the old, in-memory way) alerts the same anomaly twice.
    forgot = persisted(stored, {"spendAnomalies": None})
    twice = plan_policy(forgot, TEN, CATALOG, [], T0 + dt.timedelta(minutes=1), history=reloaded,
                        history_read=HistoryRead(True, "Read 41 samples"))
    assert [a.kind.value for a in twice.alerts] == ["SpendAnomaly"]


def test_a_history_that_could_not_be_read_decides_nothing_and_says_so() -> None:
    policy = make_policy(notifications=ROOM)
    held = plan_policy(policy, TEN, CATALOG, [], T0, history=steady(),
                       history_read=HistoryRead(False, "Prometheus at http://p did not answer"))
    assert held.alerts == () and held.anomaly_state == AnomalyState()
    cond = get(held.status_patch["conditions"], "SpendAnomalyHistory")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "HistoryUnavailable")
    assert "http://p did not answer" in cond["message"]
    assert KEY in held.burn_samples  # still recorded (and exported): the next read includes it
    # An anomaly in status is held as stored, neither cleared nor alerted, while the history is unreadable.
    stored = persisted(policy, {"spendAnomalies": [{"namespace": "ml", "name": "vc", "since": "2026-11-30T09:00:00Z"}]})
    two = observed(make_isvc())
    calm = plan_policy(stored, two, CATALOG, [], T0 + dt.timedelta(hours=2), history=steady(),
                       history_read=HistoryRead(False, "down"))
    assert KEY in calm.anomaly_state.active and calm.alerts == ()
    assert "spendAnomalies" not in calm.status_patch or calm.status_patch["spendAnomalies"] == \
        stored["status"]["spendAnomalies"]


def spiked(cfg: AnomalyConfig) -> tuple[dict[str, Any], Any, dict[tuple[str, str], list[BurnSample]]]:
    """A policy with a room whose service went from 2 to 10 replicas at T0 over a steady history: (the policy as
    persisted after that evaluation, its plan, the history)."""
    policy = make_policy(notifications=ROOM)
    hist = steady()
    p = plan_policy(policy, TEN, CATALOG, [], T0, history=hist, anomaly_config=cfg)
    return persisted(policy, p.status_patch), p, hist


def test_the_anomaly_clears_from_status_once_calm_for_clear_after_s() -> None:
    cfg = AnomalyConfig(clear_after_s=60)
    stored, p, hist = spiked(cfg)
    two = observed(make_isvc())
    assert [a.kind for a in p.alerts] == [AlertKind.SPEND_ANOMALY]
    for i, t in enumerate(T0 + dt.timedelta(seconds=s) for s in (150, 180, 240)):
        hist[KEY].append(p.burn_samples[KEY])
        p = plan_policy(stored, two, CATALOG, [], t, history=hist, anomaly_config=cfg)
        stored = persisted(stored, p.status_patch)
        if i < 2:  # calm, not yet for clear_after_s
            assert p.alerts == ()
        if i == 0:
            assert stored["status"]["spendAnomalies"][0]["calmSince"] == "2026-11-30T10:02:30Z"
    assert stored["status"]["spendAnomalies"] == []
    # Its end resolves the SpendAnomaly alert (else its incident stays open in an Alertmanager-style receiver):
    # once, with the identity it fired with, and kept in the outbox until delivered.
    (recovered,) = p.alerts
    assert recovered.kind is AlertKind.RECOVERED and not recovered.new_period
    assert recovered.resolves == (FiringAlert(AlertKind.SPEND_ANOMALY, None, T0),)
    assert recovered.title == "Budget ml/daily: no spend anomaly left (ml/vc back to baseline)"
    pending = stored["status"]["pendingAlerts"][-1]
    assert (pending["kind"], pending["resolves"]) == ("Recovered", [{"kind": "SpendAnomaly",
                                                                      "startsAt": "2026-11-30T10:00:00Z"}])
    hist[KEY].append(p.burn_samples[KEY])
    p = plan_policy(stored, two, CATALOG, [], T0 + dt.timedelta(seconds=270), history=hist, anomaly_config=cfg)
    assert p.alerts == ()


def test_gauges_export_each_sample_and_drop_services_no_longer_sampled() -> None:
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry()
    g = BurnGauges(reg)
    labels = {"policy_namespace": "ml", "policy": "daily", "namespace": "ml", "inferenceservice": "vc"}
    g.export("ml", "daily", {KEY: BurnSample(T0, 6.0, 10, 0.6), ("ml", "b"): BurnSample(T0, 1.0, 1, 1.0)})
    assert reg.get_sample_value(BURN_METRIC, labels) == 6.0
    assert reg.get_sample_value(REPLICAS_METRIC, labels) == 10
    assert reg.get_sample_value(PRICE_METRIC, labels) == 0.6
    g.export("ml", "daily", {("ml", "b"): BurnSample(T0, 1.0, 1, 1.0)})
    assert reg.get_sample_value(BURN_METRIC, labels) is None
    g.forget("ml", "daily")
    assert reg.get_sample_value(BURN_METRIC, {**labels, "inferenceservice": "b"}) is None


def test_the_ledgers_spend_is_exported_with_the_evaluations_own_time() -> None:
    """Showback reads the ledger's running total per service (``SPEND_METRIC``) between evaluations; stamped with
    the evaluation's time, not the scrape's, so Prometheus places each total where the ledger computed it."""
    from prometheus_client import CollectorRegistry, generate_latest

    from modalscale.operator.budget.history import SPEND_METRIC

    reg = CollectorRegistry()
    g = BurnGauges(reg)
    day = T0.replace(hour=0)
    labels = {"policy_namespace": "ml", "policy": "daily", "namespace": "ml", "inferenceservice": "vc",
              "period_start": day.strftime("%Y-%m-%dT%H:%M:%SZ")}
    g.export("ml", "daily", {KEY: BurnSample(T0, 6.0, 10, 0.6)}, {KEY: Decimal("12.345678901")}, T0, day)
    assert reg.get_sample_value(SPEND_METRIC, labels) == 12.345678901
    text = generate_latest(reg).decode()
    line = next(ln for ln in text.splitlines() if ln.startswith(SPEND_METRIC + "{"))
    assert line.endswith(f" 12.345678901 {int(T0.timestamp() * 1000)}"), line
    assert f"# TYPE {SPEND_METRIC} counter" in text
    g.export("ml", "daily", {}, None)  # a hold: the figures stay as they were
    assert reg.get_sample_value(SPEND_METRIC, labels) == 12.345678901
    g.export("ml", "daily", {}, {}, T0, day)  # nothing in the ledger any more
    assert reg.get_sample_value(SPEND_METRIC, labels) is None
    g.export("ml", "daily", {}, {KEY: Decimal(1)}, T0, day)
    g.forget("ml", "daily")
    assert reg.get_sample_value(SPEND_METRIC, labels) is None
    with pytest.raises(ValueError, match="at"):
        g.export("ml", "daily", {}, {KEY: Decimal(1)})
    with pytest.raises(ValueError, match="period_start"):
        g.export("ml", "daily", {}, {KEY: Decimal(1)}, T0)


def test_settings_take_detector_fields_and_name_a_bad_one() -> None:
    s = Settings.from_env({"MODALSCALE_SPEND_ANOMALY": "recent_s=60, smooth_s=6,min_recent_samples=10"})
    assert (s.spend_anomaly.recent_s, s.spend_anomaly.smooth_s, s.spend_anomaly.min_recent_samples) == (60, 6, 10)
    assert Settings.from_env({}).spend_anomaly == AnomalyConfig()
    for raw, words in (("recent=60", "field=value with a field among"), ("seasons=two", "is not a int"),
                       ("clear_after_s=0", "greater than 0")):
        with pytest.raises(ConfigError, match=words):
            Settings.from_env({"MODALSCALE_SPEND_ANOMALY": raw})


def test_prometheus_that_does_not_answer_is_history_unavailable_naming_it() -> None:
    import socket

    from modalscale.operator.budget.history import PrometheusHistory

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(HistoryUnavailable, match=f"Prometheus at {url} did not answer"):
        PrometheusHistory(url, timeout_s=2).read("ml", "daily", T0, AnomalyConfig(), 60)


def test_each_evaluation_exports_the_ledgers_spend_written_or_not_and_a_hold_exports_none() -> None:
    """The figures exported (``PolicyPlan.ledger_spent_usd``) are the ledger's per-service spend at this evaluation:
    the stored ``spent`` when it writes, and the same figure computed from the stored ledger when it does not."""
    policy = make_policy()
    first = plan_policy(policy, TEN, CATALOG, [], T0)
    stored = persisted(policy, first.status_patch)
    entry = stored["status"]["ledger"]["services"][0]
    assert first.ledger_spent_usd == {KEY: Decimal(entry["spent"])} and first.ledger_observed_time == T0
    minute = plan_policy(stored, TEN, CATALOG, [], T0 + dt.timedelta(seconds=60))  # past a cent: shown in cents
    stored = persisted(stored, minute.status_patch)
    entry = stored["status"]["ledger"]["services"][0]
    later = T0 + dt.timedelta(seconds=62)
    quiet = plan_policy(stored, TEN, CATALOG, [], later)  # nothing material changed: the status is not written
    assert quiet.status_patch == {}
    ten_replicas_usd = Decimal(entry["costUSDPerHour"]) * 2 / 3600
    assert quiet.ledger_spent_usd is not None and quiet.ledger_observed_time == later
    assert abs(quiet.ledger_spent_usd[KEY] - Decimal(entry["spent"]) - ten_replicas_usd) < Decimal("1e-8")
    held = plan_policy(persisted(stored, {"spendAnomalies": [{"namespace": "ml", "name": "vc"}]}), TEN, CATALOG,
                       [], later)
    assert held.ledger_spent_usd is None


def test_the_evaluation_that_closes_a_period_exports_its_final_spend_at_the_periods_end() -> None:
    """Showback reads the spend between two samples of the running total; a drop is a new period whose value after
    it is the increase. The evaluation that crossed midnight exported the new period's 30 s at 00:00:30, so the old
    period's tail (23:59:30 -> midnight, charged to the closed period) was in no sample: a window over midnight lost
    it (with hourly evaluations up to an hour of spend). It now exports the closed period's final spend per service
    stamped at the period's end; the next evaluation exports the new period's from there."""
    from modalscale.operator.showback import spend_over_window

    policy = make_policy()
    before = T0.replace(hour=23, minute=59, second=30)
    first = plan_policy(policy, TEN, CATALOG, [], T0)  # 10:00: the day's spend is far above a minute's
    stored = persisted(policy, first.status_patch)
    last_of_day = plan_policy(stored, TEN, CATALOG, [], before)
    stored = persisted(stored, last_of_day.status_patch)
    midnight = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    rollover = plan_policy(stored, TEN, CATALOG, [], midnight + dt.timedelta(seconds=30))
    stored = persisted(stored, rollover.status_patch)
    after = plan_policy(stored, TEN, CATALOG, [], midnight + dt.timedelta(seconds=90))
    rate_usd_per_s = Decimal(stored["status"]["ledger"]["services"][0]["costUSDPerHour"]) / 3600
    assert last_of_day.ledger_spent_usd is not None and rollover.ledger_spent_usd is not None
    assert rollover.ledger_observed_time == midnight
    assert rollover.ledger_period_start == midnight - dt.timedelta(days=1) and after.ledger_period_start == midnight
    assert abs(rollover.ledger_spent_usd[KEY] - last_of_day.ledger_spent_usd[KEY] - 30 * rate_usd_per_s) < Decimal(
        "1e-8")
    assert after.ledger_observed_time == midnight + dt.timedelta(seconds=90)
    assert after.ledger_spent_usd is not None and abs(after.ledger_spent_usd[KEY] - 90 * rate_usd_per_s) < Decimal(
        "1e-8")
    # The reader over [23:59:30, 00:01:30]: 120 s of spend, the tail included (it read 90 s).
    samples = [(p.ledger_observed_time.timestamp(), float(p.ledger_spent_usd[KEY]))
               for p in (first, last_of_day, rollover, after)
               if p.ledger_observed_time is not None and p.ledger_spent_usd is not None]
    usd, _ = spend_over_window(samples, before.timestamp(), samples[-1][0], None)
    assert abs(Decimal(repr(usd)) - 120 * rate_usd_per_s) < Decimal("1e-7")


def test_the_history_kept_and_read_back_covers_the_recent_window_scaled_to_the_policys_interval() -> None:
    """At evaluationIntervalSeconds 3600 the recent baseline needs 5 samples, so its window is 120 s + 6 h; the
    read-back after a restart covered only the configured hour (1 sample) densely. The handler scales the settings
    as the planner does; an interval that does not read leaves them as configured (the planner reports the spec)."""
    from modalscale.operator.budget.handlers import _anomaly_config

    cfg = _anomaly_config(AnomalyConfig(), {"spec": {"evaluationIntervalSeconds": 3600}})
    assert (cfg.recent_s, cfg.min_recent_samples) == (120 + 6 * 3600, 5)
    dense = [q for q in history_queries("ml", "daily", T0, cfg, 3600) if q[3] == T0]
    assert dense and all(q[2] == T0 - dt.timedelta(seconds=21_720) for q in dense)
    assert _anomaly_config(AnomalyConfig(), {"spec": {"evaluationIntervalSeconds": "soon"}}) == AnomalyConfig()


def test_a_failed_history_read_is_tried_again_after_the_configured_retry_not_at_every_evaluation() -> None:
    import logging
    import time

    from modalscale.operator.budget.handlers import _anomaly_history
    from modalscale.operator.budget.runtime import BudgetRuntime

    class Down:
        shown_url = "http://p"
        reads = 0

        def read(self, *_: Any) -> Any:
            Down.reads += 1
            raise HistoryUnavailable("Prometheus at http://p did not answer")

    assert AnomalyConfig().history_retry_s == 30.0
    assert Settings.from_env({"MODALSCALE_SPEND_ANOMALY": "history_retry_s=5"}).spend_anomaly.history_retry_s == 5.0
    runtime = BudgetRuntime(observer=None, history_source=Down())  # type: ignore[arg-type]
    policy = {"metadata": {"uid": "u1"}, "spec": {"evaluationIntervalSeconds": 1}}
    cfg, log = AnomalyConfig(history_retry_s=5.0), logging.getLogger("test")
    before = time.monotonic()
    _, read = _anomaly_history(runtime, "ml", "daily", policy, T0, cfg, log)
    assert read is not None and not read.ok and "retried every 5 s" in read.message and Down.reads == 1
    assert before + 5.0 <= runtime.history_retry_at["u1"] <= time.monotonic() + 5.0
    _anomaly_history(runtime, "ml", "daily", policy, T0, cfg, log)  # the next evaluation: not read again
    assert Down.reads == 1
    runtime.history_retry_at["u1"] = time.monotonic() - 1  # the retry time has come
    _anomaly_history(runtime, "ml", "daily", policy, T0, cfg, log)
    assert Down.reads == 2
