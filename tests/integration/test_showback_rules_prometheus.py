"""The chart's showback recording rules (``charts/modalscale/files/showback-rules.yaml``) on a real Prometheus give
the figures of ``modalscale cost showback``: per (tenant, modality) and idle, for a service with idle capacity, an
oversubscribed one (its requests used more replica-seconds than ran) and one without requests.

What is real: the Prometheus server (``PrometheusProcess``) loading the rule file, its scrapes and rule
evaluations; the operator's burn-rate gauges and ledger spend (``BurnGauges``, exported once a second as
BudgetPolicy evaluations would, ``tests.integration._evaluations``); the CLI's
reader and allocation (``PrometheusShowback.read`` + ``build_showback``, i.e. ``costmodel.showback.allocate``).
What stands in: the gateway is a local exporter whose accounting counters grow at fixed rates (value = rate x
seconds since start), scraped with the labels the chart's gateway PodMonitor gives (``namespace``,
``inferenceservice``). No Kubernetes cluster.

The shipped file's window is 5 minutes; a test cannot wait for that, so the file is loaded twice: as shipped (its
syntax and names are checked by Prometheus loading it, its figures only for presence) and with ``[5m]`` replaced
by ``[20s]``, ``offset 5m`` by ``offset 20s`` and its record names prefixed ``w20s:`` instead of ``modalscale:``
(the only changes), whose figures are compared. The shipped file's own figures, 5-minute window and all, are
checked at steady state by Prometheus's rule-test runner (``promtool test rules``) on synthetic series.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from modalscale.costmodel.money import quantize_ledger_usd
from modalscale.costmodel.showback import (
    IDLE,
    REQUESTS_METRIC,
    SERVICE_SECONDS_METRIC,
    ServiceWindow,
    TenantUsage,
    aggregate,
    allocate,
)
from modalscale.devenv.kube import wait_for
from modalscale.devenv.prometheus import PrometheusProcess, ScrapeTarget
from modalscale.operator.budget.history import BurnGauges
from modalscale.operator.showback import PrometheusShowback, build_showback
from tests.integration._evaluations import Evaluations

RULES = Path(__file__).resolve().parents[2] / "charts" / "modalscale" / "files" / "showback-rules.yaml"
NS = "ml"
WINDOW_S = 20
# service -> (replicas, USD/h, {(tenant, modality): (replica-seconds used per second, requests per second)})
SERVICES: dict[str, tuple[int, float, dict[tuple[str, str], tuple[float, float]]]] = {
    # 2 replicas, 0.8 used: acme 0.6/2 x 36 = 10.8 USD/h, globex 3.6, idle 1.2/2 x 36 = 21.6.
    "vc": (2, 36.0, {("acme", "image"): (0.6, 20.0), ("globex", "text"): (0.2, 40.0)}),
    # 1 replica, 1.5 used (concurrency): shares of the used seconds, acme 1.2/1.5 x 18 = 14.4, globex 3.6, idle 0.
    "busy": (1, 18.0, {("acme", "image"): (1.2, 10.0), ("globex", "text"): (0.3, 30.0)}),
    # No gateway series at all: all idle, 18 USD/h.
    "quiet": (1, 18.0, {}),
}
REFUSED_PER_S = {"429": 5.0, "503": 3.0, "RESOURCE_EXHAUSTED": 2.0}
"""Requests per second each tenant also sends that the gateway refuses (tenant over budget, admission): counted by
``modalscale_gateway_requests_total`` under these codes (429 with modality ``none``, as the gateway records a
tenant refusal before reading the body), never in USD per request (they cost no replica time)."""
NOT_INFERENCE_PER_S = {"200": 6.0, "400": 4.0}
"""Calls per second each tenant also sends that are no inference on a replica, recorded with modality ``none``:
health, metadata and other non-infer calls the gateway passes on (200), infer requests the gateway itself refuses
as malformed before any replica (400). Never rows of their own, never in USD per request (issue 22: they diluted
a tenant's USD per request)."""
RULES_VS_CLI_TOLERANCE_USD_PER_HOUR = 1e-6
"""Same Prometheus, same instant, same window: only the CLI's rounding to 1e-9 USD (x 3600/20 per hour) differs."""
LATE_SCRAPE_INSTANTS = 3
"""Rule evaluations tried as T before the rules-vs-CLI comparison fails (a scrape stored after the evaluation it
predates makes one instant incomparable; see the test)."""
RULES_VS_TRUE_TOLERANCE_RATIO = 0.01
"""Against the exporter's exact rates: the scrape timestamp vs the instant the exporter computes a value (ms over
a 20 s window) enters through ``rate()``'s extrapolation."""


class LinearCounters(Collector):
    """The gateway's accounting counters of one service, growing at fixed rates since construction."""

    def __init__(self, rates: dict[tuple[str, str], tuple[float, float]]) -> None:
        self.rates = rates
        self.t0 = time.time()

    def collect(self) -> Iterator[CounterMetricFamily]:
        elapsed = time.time() - self.t0
        seconds = CounterMetricFamily(SERVICE_SECONDS_METRIC, "replica-seconds used", labels=["tenant", "modality"])
        requests = CounterMetricFamily(REQUESTS_METRIC, "requests", labels=["tenant", "modality", "code"])
        for (tenant, modality), (s_per_s, req_per_s) in self.rates.items():
            seconds.add_metric([tenant, modality], s_per_s * elapsed)
            requests.add_metric([tenant, modality, "2xx"], req_per_s * elapsed)
            for code, refused_per_s in REFUSED_PER_S.items():
                requests.add_metric([tenant, "none" if code == "429" else modality, code], refused_per_s * elapsed)
            for code, calls_per_s in NOT_INFERENCE_PER_S.items():
                requests.add_metric([tenant, "none", code], calls_per_s * elapsed)
        yield seconds
        yield requests


def query(url: str, promql: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": promql} | ({"time": f"{at:.3f}"} if at is not None else {})
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def by_key(result: list[dict[str, Any]]) -> dict[tuple[str, ...], float]:
    """(inferenceservice, tenant, modality) or (inferenceservice,) -> value."""
    out: dict[tuple[str, ...], float] = {}
    for s in result:
        m = s["metric"]
        assert m["namespace"] == NS, m
        key = (m["inferenceservice"], m["tenant"], m["modality"]) if "tenant" in m else (m["inferenceservice"],)
        out[key] = float(s["value"][1])
    return out


def windowed_rules(tmp_path: Path) -> Path:
    text = RULES.read_text()
    assert text.count("[5m]") == 4 and text.count("offset 5m") == 2 and text.count("modalscale:showback") > 8
    out = tmp_path / "showback-rules-20s.yaml"
    out.write_text(text.replace("[5m]", f"[{WINDOW_S}s]").replace("offset 5m", f"offset {WINDOW_S}s")
                   .replace("modalscale:showback", "w20s:showback")
                   .replace("name: modalscale-showback", "name: w20s-showback"))
    return out


def true_allocation() -> tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], float]]:
    """``allocate`` of the exporter's exact rates over one hour: (request rows, idle rows) in USD/h."""
    rows: dict[tuple[str, ...], float] = {}
    idle: dict[tuple[str, ...], float] = {}
    for svc, (replicas, usd_per_hour, rates) in SERVICES.items():
        result = allocate(ServiceWindow(NS, svc, quantize_ledger_usd(Decimal(repr(usd_per_hour))), replicas * 3600),
                          [TenantUsage(t, m, s * 3600, r * 3600) for (t, m), (s, r) in rates.items()])
        for row in result.rows:
            if row.kind == IDLE:
                idle[(svc,)] = float(row.usd)
            else:
                rows[(svc, str(row.tenant), str(row.modality))] = float(row.usd)
    return rows, idle


def _labels(**labels: str) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def test_the_shipped_rules_at_steady_state_equal_allocate_under_promtool(tmp_path: Path) -> None:
    """The shipped file, 5-minute window unchanged, in Prometheus's own rule-unit-test runner (``promtool test
    rules``, from the same Debian package): 10 minutes of 1-minute samples, expectations from ``allocate()``."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus (scripts/env.sh installs it)"
    step_s = 60
    series = []
    for svc, (replicas, usd, rates) in SERVICES.items():
        for policy in ("budget", "team-cap"):  # two policies selecting one service: counted once (max)
            ledger = {"policy_namespace": NS, "policy": policy, "namespace": NS, "inferenceservice": svc}
            series += [{"series": f"modalscale_budget_service_burn_usd_per_hour{_labels(**ledger)}",
                        "values": f"{usd}x10"},
                       {"series": f"modalscale_budget_service_spend_usd_total{_labels(**ledger)}",
                        "values": f"0+{usd * step_s / 3600}x10"},
                       {"series": f"modalscale_budget_service_replicas{_labels(**ledger)}", "values": f"{replicas}x10"}]
        for (tenant, modality), (s_per_s, req_per_s) in rates.items():
            for pod in ("gw-0", "gw-1"):  # two gateway pods, each with half of the tenant's traffic
                where = {"namespace": NS, "inferenceservice": svc, "tenant": tenant, "modality": modality,
                         "pod": pod}
                series += [{"series": f"{SERVICE_SECONDS_METRIC}{_labels(**where)}",
                            "values": f"0+{s_per_s * step_s / 2}x10"},
                           {"series": f"{REQUESTS_METRIC}{_labels(**where, code='2xx')}",
                            "values": f"0+{req_per_s * step_s / 2}x10"}]
                for code, refused_per_s in REFUSED_PER_S.items():  # refused: not in USD per request
                    refused = where | {"modality": "none"} if code == "429" else where
                    series.append({"series": f"{REQUESTS_METRIC}{_labels(**refused, code=code)}",
                                   "values": f"0+{refused_per_s * step_s / 2}x10"})
                for code, calls_per_s in NOT_INFERENCE_PER_S.items():  # no inference: not in USD per request
                    series.append({"series": f"{REQUESTS_METRIC}{_labels(**where | {'modality': 'none'}, code=code)}",
                                   "values": f"0+{calls_per_s * step_s / 2}x10"})
    # Two services without requests where the ledger's running total and the rate in force differ. "draining": the
    # ledger charges a terminating pod the rate in force leaves out (spend grows at 27 USD/h, the rate says 18):
    # the spend rate is the ledger's. "newperiod": a period ended 3 minutes ago at 2.1 USD and the new one's first
    # figure is 5 USD (a burst after midnight): each period is its own series (label period_start), so the old one's
    # slope is 18 USD/h and the new one has none yet; one series across the periods read 5 > 2.1 as no reset and
    # its slope as (5.6 - 1.5) USD in 5 minutes, 49.2 USD/h. "dropped": the same with the new figure below the old
    # final (0.3): 18 either way.
    for svc, spend_values in (("draining", [(None, f"0+{27.0 * step_s / 3600}x10")]),
                              ("newperiod", [("2026-12-01T00:00:00Z", f"0+{18.0 * step_s / 3600}x7 _x2"),
                                             ("2026-12-02T00:00:00Z", f"_x7 5+{18.0 * step_s / 3600}x2")]),
                              ("dropped", [("2026-12-01T00:00:00Z", f"0+{18.0 * step_s / 3600}x7 _x2"),
                                           ("2026-12-02T00:00:00Z", f"_x7 0+{18.0 * step_s / 3600}x2")])):
        ledger = {"policy_namespace": NS, "policy": "budget", "namespace": NS, "inferenceservice": svc}
        series += [{"series": f"modalscale_budget_service_burn_usd_per_hour{_labels(**ledger)}", "values": "18x10"},
                   {"series": f"modalscale_budget_service_replicas{_labels(**ledger)}", "values": "1x10"}]
        series += [{"series": "modalscale_budget_service_spend_usd_total"
                              f"{_labels(**ledger, **({} if period is None else {'period_start': period}))}",
                    "values": values} for period, values in spend_values]
    # "zero": scaled to zero for the whole window, its two gateway pods still charged with it (0.0084 USD/h): no
    # replica-second ran and no request came, so all of its spend is idle (it had no idle series: 0.0084 USD/h lost
    # from the tenants + idle sum).
    ledger = {"policy_namespace": NS, "policy": "budget", "namespace": NS, "inferenceservice": "zero"}
    series += [{"series": f"modalscale_budget_service_burn_usd_per_hour{_labels(**ledger)}", "values": "0.0084x10"},
               {"series": f"modalscale_budget_service_replicas{_labels(**ledger)}", "values": "0x10"},
               {"series": f"modalscale_budget_service_spend_usd_total{_labels(**ledger)}",
                "values": f"0+{0.0084 * step_s / 3600}x10"}]
    true_rows, true_idle = true_allocation()
    true_idle |= {("draining",): 27.0, ("newperiod",): 18.0, ("dropped",): 18.0, ("zero",): 0.0084}
    requests: dict[tuple[str, ...], float] = {(svc, t, m): r for svc, (_, _, rates) in SERVICES.items()
                                              for (t, m), (_, r) in rates.items()}

    def rounded(values: dict[tuple[str, ...], float], to_nearest: float) -> list[dict[str, object]]:
        """Expected samples of ``round(series, to_nearest)`` (Debian's promtool 2.42 compares floats exactly; the
        rules and allocate() differ in the last bits), rounded as PromQL's round() does."""
        inverse = 1.0 / to_nearest
        out: list[dict[str, object]] = []
        for key, value in sorted(values.items()):
            names = ("inferenceservice", "tenant", "modality")[:len(key)]
            out.append({"labels": _labels(namespace=NS, **dict(zip(names, key))),
                        "value": math.floor(value * inverse + 0.5) / inverse})
        return out

    spend: dict[tuple[str, ...], float] = {(svc,): usd for svc, (_, usd, _) in SERVICES.items()}
    spend |= {("draining",): 27.0, ("newperiod",): 18.0, ("dropped",): 18.0, ("zero",): 0.0084}
    tests = [{"expr": f"round({name}, {q})", "eval_time": "10m", "exp_samples": rounded(values, q)}
             for name, values, q in (
                 ("modalscale:showback_usd_per_hour", true_rows, 1e-9),
                 ("modalscale:showback_idle_usd_per_hour", true_idle, 1e-9),
                 ("modalscale:showback_spend_usd_per_hour", spend, 1e-9),
                 ("modalscale:showback_usd_per_request",
                  {k: v / (requests[k] * 3600) for k, v in true_rows.items()}, 1e-15))]
    spec = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]}
    path = tmp_path / "showback-rules-test.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def last_evaluation(url: str) -> float:
    """The instant of the showback rules' last evaluation (the timestamp of one recorded sample), s."""
    (stamp,) = query(url, 'timestamp(w20s:showback_spend_usd_per_hour{inferenceservice="vc"})')
    return float(stamp["value"][1])


def test_recording_rules_equal_the_cli_allocation_and_sum_to_the_spend_rate(tmp_path: Path) -> None:
    operator_registry = CollectorRegistry()
    services = {(NS, svc): (replicas, usd) for svc, (replicas, usd, _) in SERVICES.items()}
    # A second policy selecting one service exports the same figures: counted once (max over policies).
    evaluations = Evaluations(BurnGauges(operator_registry),
                              {("ml", "budget"): services, ("ml", "team-cap"): {(NS, "vc"): services[(NS, "vc")]}})
    evaluations.start()
    servers = [start_http_server(0, addr="127.0.0.1", registry=operator_registry)[0]]
    targets = [ScrapeTarget(f"127.0.0.1:{servers[0].server_address[1]}", job="modalscale-operator")]
    for svc, (_, _, rates) in SERVICES.items():
        if rates:
            registry = CollectorRegistry()
            registry.register(LinearCounters(rates))
            servers.append(start_http_server(0, addr="127.0.0.1", registry=registry)[0])
            targets.append(ScrapeTarget(f"127.0.0.1:{servers[-1].server_address[1]}",
                                        {"namespace": NS, "inferenceservice": svc, "component": "gateway"},
                                        job="gateway"))
    prom = PrometheusProcess(tmp_path / "prometheus", scrape_interval_s=0.5,
                             rule_files=(RULES, windowed_rules(tmp_path)))
    try:
        prom.start(targets)
        wait_for(lambda: len(query(prom.url, "up == 1")) == len(targets), 30, "all targets scraped")
        ready = time.time() + WINDOW_S + 3
        wait_for(lambda: time.time() > ready, WINDOW_S + 10, "a whole window of samples", interval_s=0.5)
        # T: the instant of a rule evaluation; everything below is read at T. A scrape is dated when it starts and
        # stored when it ends: one that started before T and ended after the evaluation at T is missing from the
        # recorded series and present in the CLI's later read of the same window (the likeliest cause of ci73's
        # failure, at a load of 6 on the 2 cores: 'vc' idle 21.5992 USD/h recorded, 21.5949 read; not proven).
        # Such an instant is not comparable, so the next evaluation is taken (at most LATE_SCRAPE_INSTANTS); rules
        # that differ from the CLI differ at every one.
        worst_at: list[float] = []
        at = 0.0
        for _ in range(LATE_SCRAPE_INSTANTS):
            before = at
            wait_for(lambda: last_evaluation(prom.url) > before, 10, "the next rule evaluation", interval_s=0.2)
            at = last_evaluation(prom.url)
            rows = by_key(query(prom.url, "w20s:showback_usd_per_hour", at))
            idle = by_key(query(prom.url, "w20s:showback_idle_usd_per_hour", at))
            spend = by_key(query(prom.url, "w20s:showback_spend_usd_per_hour", at))
            per_request = by_key(query(prom.url, "w20s:showback_usd_per_request", at))

            # 1. The CLI's reading and allocation of the same window ending at T.
            window_start = dt.datetime.fromtimestamp(at - WINDOW_S, dt.UTC)
            window_end = dt.datetime.fromtimestamp(at, dt.UTC)
            ledger, usage = PrometheusShowback(prom.url).read(WINDOW_S, window_end)
            cli = build_showback(ledger, usage, window_start, window_end)
            assert not cli.errors and {s.window.name for s, _ in cli.services} == set(SERVICES), (cli.errors, cli.notes)
            per_hour = 3600 / WINDOW_S
            cli_rows: dict[tuple[str, ...], float] = {(str(r.inferenceservice), str(r.tenant), str(r.modality)):
                                                      float(r.usd) * per_hour for r in cli.rows if r.kind != IDLE}
            cli_idle: dict[tuple[str, ...], float] = {(str(r.inferenceservice),): float(r.usd) * per_hour
                                                      for r in cli.rows if r.kind == IDLE}
            cli_per_request: dict[tuple[str, ...], float] = {
                (str(r.inferenceservice), str(r.tenant), str(r.modality)): float(r.usd_per_request)
                for r in cli.rows if r.kind != IDLE and r.usd_per_request is not None}
            assert set(rows) == set(cli_rows) and set(idle) == set(cli_idle) == {(s,) for s in SERVICES}
            worst_cli = max(abs(a - b) for d, c in ((rows, cli_rows), (idle, cli_idle)) for k in d
                            for a, b in [(d[k], c[k])])
            worst_at.append(worst_cli)
            if worst_cli <= RULES_VS_CLI_TOLERANCE_USD_PER_HOUR:
                break
        print(f"rules vs CLI allocation at T: worst |diff| per instant tried {worst_at} USD/h; rules {rows} {idle}")
        assert worst_cli <= RULES_VS_CLI_TOLERANCE_USD_PER_HOUR, (rows, cli_rows, idle, cli_idle)
        # The CLI rounds USD per request to 1e-9 USD (half-even): within one quantum.
        assert set(per_request) == set(cli_per_request)
        for k, v in per_request.items():
            assert abs(v - cli_per_request[k]) <= 1e-9, (k, v, cli_per_request[k])
        # ... and both divide by the served requests only (the refused ones, as many again, left out).
        served = {(svc, t, m): r for svc, (_, _, rates) in SERVICES.items() for (t, m), (_, r) in rates.items()}
        for k, v in per_request.items():
            assert abs(v * served[k] * 3600 / rows[k] - 1) <= RULES_VS_TRUE_TOLERANCE_RATIO, (k, v, rows[k])
        # ... and a tenant's USD per request over all its modalities (``--by tenant``) too: the calls that were no
        # inference (modality none) neither make rows nor dilute it.
        assert all(r.modality != "none" for r in cli.rows), [r for r in cli.rows if r.modality == "none"]
        for r in aggregate(cli.rows, ("inferenceservice", "tenant")):
            if r.kind != IDLE and r.requests:
                want = sum(n for (svc, t, _), n in served.items() if (svc, t) == (r.inferenceservice, r.tenant))
                assert abs(float(r.requests) / (want * WINDOW_S) - 1) <= RULES_VS_TRUE_TOLERANCE_RATIO, (r, want)

        # 2. allocate() of the exporter's exact rates (what the counters were made from).
        true_rows, true_idle = true_allocation()
        worst_true = max(abs(d[k] / t[k] - 1) if t[k] else abs(d[k])
                         for d, t in ((rows, true_rows), (idle, true_idle)) for k in t)
        print(f"rules vs allocate(exact rates): worst relative diff {worst_true:.3g}")
        assert set(rows) == set(true_rows)
        assert worst_true <= RULES_VS_TRUE_TOLERANCE_RATIO, (rows, true_rows, idle, true_idle)
        assert idle[("busy",)] == 0 and idle[("quiet",)] == spend[("quiet",)]

        # 3. Tenants + idle = the service's spend rate (a float identity, not a tolerance).
        for svc in SERVICES:
            total = sum(v for k, v in rows.items() if k[0] == svc) + idle[(svc,)]
            assert math.isclose(total, spend[(svc,)], rel_tol=1e-12), (svc, total, spend[(svc,)])
            assert math.isclose(spend[(svc,)], SERVICES[svc][1], rel_tol=1e-12)

        # The shipped file (5-minute window) is loaded and records the same series names.
        for name in ("usd_per_hour", "idle_usd_per_hour", "spend_usd_per_hour", "usd_per_request",
                     "used_replicas", "available_replicas"):
            assert query(prom.url, f"modalscale:showback_{name}"), name
        groups = json.loads(urllib.request.urlopen(f"{prom.url}/api/v1/rules", timeout=10).read())["data"]["groups"]
        assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups

        # The dashboard's showback panels run on these series (variables as "All"; the time range as 20 s, so the
        # range panel's 1-minute steps as 1 s: [$__range:1m]) / 60 -> [20s:1s]) / 3600).
        dashboard = json.loads((RULES.parent / "dashboard.json").read_text())
        panels = [p for p in dashboard["panels"] if p["title"].startswith("Showback")]
        assert len(panels) == 3
        range_usd = 0.0
        for panel in panels:
            for target in panel["targets"]:
                expr = (target["expr"].replace("$namespace", ".*").replace("$inferenceservice", ".*")
                        .replace("[$__range:1m])) / 60", f"[{WINDOW_S}s:1s])) / 3600"))
                assert "$" not in expr, expr
                result = query(prom.url, expr, at)
                assert result and all(math.isfinite(float(r["value"][1])) for r in result), (panel["title"], expr)
                if panel["title"] == "Showback over the time range (USD)":
                    range_usd += sum(float(r["value"][1]) for r in result)
        # Tenants + idle over the range = the spend over it (72 USD/h for 20 s), to one 1 s step.
        assert abs(range_usd / (sum(usd for _, usd, _ in SERVICES.values()) * WINDOW_S / 3600) - 1) <= 1 / WINDOW_S
    finally:
        evaluations.stop()
        prom.stop()
        for s in servers:
            s.shutdown()
