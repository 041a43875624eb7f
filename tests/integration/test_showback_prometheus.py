"""``modalscale cost showback`` against a real Prometheus: two tenants with different mixes, rows + idle = spend.

What is real: the Prometheus server (``PrometheusProcess``), its scrapes, its ``increase()``/``resets()`` and range
queries, the operator's own gauges and ledger spend series (``BurnGauges``) and the CLI end to end
(``modalscale.cli.main``). What stands in: for the operator, the evaluations of one BudgetPolicy once a second
(``tests.integration._evaluations``, exporting what ``evaluate_policy`` exports); for the gateway process, a
``prometheus_client`` HTTP server on 127.0.0.1 exporting the gateway's per-tenant accounting counters with the
names of ``modalscale.costmodel.showback``, scraped with the target labels the chart's PodMonitor relabelling gives
a gateway pod (``namespace``, ``inferenceservice``). No Kubernetes cluster is started.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import threading
import time
import urllib.parse
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, start_http_server

from modalscale.cli import main
from modalscale.costmodel.showback import (
    IMAGE_PIXELS_METRIC,
    IMAGES_METRIC,
    REQUESTS_METRIC,
    SERVICE_SECONDS_METRIC,
    TEXT_TOKENS_METRIC,
)
from modalscale.devenv.kube import wait_for
from modalscale.devenv.prometheus import PrometheusProcess, ScrapeTarget
from modalscale.operator.budget.history import BurnGauges
from tests.integration._evaluations import Evaluations

NS, SVC = "ml", "vc"
WINDOW_S = 20
TICK_S = 0.05
# Per tick (20 ticks/s): acme sends one image request using 0.03 replica-s (0.6 replica-s per s), globex two text
# requests using 0.005 replica-s each (0.2 per s). Two replicas run: 2 replica-s per s, so idle is 1.2 per s (60 %).
ACME_S_PER_TICK, GLOBEX_S_PER_TICK = 0.03, 0.01
REPLICAS, USD_PER_REPLICA_HOUR = 2, 18.0


class FakeGateway:
    """The gateway's accounting counters on a registry of their own (``_total`` is added by prometheus_client)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()

        def counter(name: str, labels: list[str]) -> Counter:
            return Counter(name.removesuffix("_total"), name, labels, registry=self.registry)

        self.requests = counter(REQUESTS_METRIC, ["tenant", "modality", "code"])
        self.seconds = counter(SERVICE_SECONDS_METRIC, ["tenant", "modality"])
        self.images = counter(IMAGES_METRIC, ["tenant", "modality"])
        self.pixels = counter(IMAGE_PIXELS_METRIC, ["tenant", "modality"])
        self.tokens = counter(TEXT_TOKENS_METRIC, ["tenant", "modality"])
        # Series exist (at 0) before the first scrape, so increase() counts the first requests too.
        for t, m in (("acme", "image"), ("globex", "text")):
            self.requests.labels(t, m, "2xx")
            for c in (self.seconds, self.images, self.pixels, self.tokens):
                c.labels(t, m)

    def tick(self) -> None:
        self.requests.labels("acme", "image", "2xx").inc()
        self.seconds.labels("acme", "image").inc(ACME_S_PER_TICK)
        self.images.labels("acme", "image").inc()
        self.pixels.labels("acme", "image").inc(640 * 480)
        self.requests.labels("globex", "text", "2xx").inc(2)
        self.seconds.labels("globex", "text").inc(GLOBEX_S_PER_TICK)
        self.tokens.labels("globex", "text").inc(100)


def prom_query(url: str, query: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["cost", "showback", *args])
    return code, out.getvalue(), err.getvalue()


def test_showback_splits_the_ledger_spend_over_two_tenants_and_idle_from_a_real_prometheus(tmp_path: Path) -> None:
    gateway = FakeGateway()
    operator_registry = CollectorRegistry()
    evaluations = Evaluations(BurnGauges(operator_registry),
                              {("ml", "budget"): {(NS, SVC): (REPLICAS, REPLICAS * USD_PER_REPLICA_HOUR)}}).start()
    gw_server, _ = start_http_server(0, addr="127.0.0.1", registry=gateway.registry)
    op_server, _ = start_http_server(0, addr="127.0.0.1", registry=operator_registry)
    prom = PrometheusProcess(tmp_path / "prometheus", scrape_interval_s=0.5)
    stop = threading.Event()

    def send() -> None:
        next_at = time.monotonic()
        while not stop.is_set():
            gateway.tick()
            next_at += TICK_S
            time.sleep(max(0.0, next_at - time.monotonic()))

    sender = threading.Thread(target=send, daemon=True)
    try:
        prom.start([
            ScrapeTarget(f"127.0.0.1:{gw_server.server_address[1]}", {"namespace": NS, "inferenceservice": SVC},
                         job="gateway"),
            ScrapeTarget(f"127.0.0.1:{op_server.server_address[1]}", job="modalscale-operator")])
        wait_for(lambda: len(prom_query(prom.url, "up == 1")) == 2, 30, "both targets scraped")
        sender.start()
        first = dt.datetime.now(dt.UTC)
        # The window starts one second after the first tick and ends WINDOW_S later, on a whole second.
        at = (first + dt.timedelta(seconds=WINDOW_S + 2)).replace(microsecond=0)
        wait_for(lambda: dt.datetime.now(dt.UTC) > at + dt.timedelta(seconds=1), WINDOW_S + 10, "the window to pass",
                 interval_s=0.5)
        stop.set()
        sender.join(5)
        wait_for(lambda: len(prom_query(prom.url, f"timestamp(up) > {at.timestamp() + 0.5}")) == 2, 10,
                 "a scrape of both targets after the window")

        code, out, err = run_cli("--since", f"{WINDOW_S}s", "--at", at.isoformat(), "--prometheus-url", prom.url,
                                 "--format", "json", "--by", "tenant,modality")
        assert code == 0, err
        doc = json.loads(out)
        rows = {(r["tenant"], r["kind"]): r for r in doc["rows"]}
        spend = Decimal(doc["spend_usd"])
        # Rows + idle are the spend to the nano-dollar (the allocation's rule, checked on real answers).
        assert sum(Decimal(r["usd"]) for r in doc["rows"]) == spend == Decimal(doc["total_usd"])
        # The ledger's figures: 36 USD/h for 20 s = 0.2 USD (its running total at the window's two edges), 2
        # replicas x 20 s = 40 replica-s (integrated at 1 s).
        (service,) = doc["services"]
        assert service["ledger_coverage_ratio"] == 1.0
        assert spend == Decimal("0.2")
        assert Decimal(service["available_replica_s"]) == 40
        # Usage: increase() over 20 s of 20 ticks/s (extrapolated at the edges: a few % at most).
        acme, globex, idle = rows[("acme", "request")], rows[("globex", "request")], rows[("", "idle")]
        assert abs(float(acme["replica_s"]) - 0.6 * WINDOW_S) < 0.05 * 0.6 * WINDOW_S, acme
        assert abs(float(globex["replica_s"]) - 0.2 * WINDOW_S) < 0.05 * 0.2 * WINDOW_S, globex
        # The mixes differ: acme's image requests cost 6x globex's text ones per request (0.03 vs 0.005 s each).
        per_acme, per_globex = Decimal(acme["usd_per_request"]), Decimal(globex["usd_per_request"])
        assert abs(per_acme / per_globex - 6) < Decimal("0.1"), (per_acme, per_globex)
        # acme used 3x globex's replica-seconds; idle is about 60 % of the spend, its own row.
        assert abs(Decimal(acme["usd"]) / Decimal(globex["usd"]) - 3) < Decimal("0.05")
        assert abs(Decimal(idle["usd"]) / spend - Decimal("0.6")) < Decimal("0.02"), idle
        assert float(acme["images"]) > 0 and float(globex["text_tokens"]) > 0 and acme["flags"] == ""

        # The same window as a table and as CSV: same totals.
        code, table, _ = run_cli("--since", f"{WINDOW_S}s", "--at", at.isoformat(), "--prometheus-url", prom.url)
        assert code == 0 and "0.20 USD spent by 1 service(s)" in table and "(idle)" in table
        code, text, _ = run_cli("--since", f"{WINDOW_S}s", "--at", at.isoformat(), "--prometheus-url", prom.url,
                                "--format", "csv", "--by", "namespace,inferenceservice,tenant")
        assert code == 0
        assert text.splitlines()[1].startswith(f"{NS},{SVC},acme,request,")
    finally:
        stop.set()
        evaluations.stop()
        prom.stop()
        gw_server.shutdown()
        op_server.shutdown()


def test_showback_says_prometheus_is_unreachable_instead_of_printing_zeros(tmp_path: Path) -> None:
    code, out, err = run_cli("--since", "1h", "--prometheus-url", "http://user:secret@127.0.0.1:9")
    assert code == 1 and out == ""
    assert "did not answer" in err and "secret" not in err


def test_a_gateway_restart_inside_the_window_is_priced_and_flagged_counter_reset(tmp_path: Path) -> None:
    window_s = 10
    operator_registry = CollectorRegistry()
    evaluations = Evaluations(BurnGauges(operator_registry),
                              {("ml", "budget"): {(NS, SVC): (REPLICAS, REPLICAS * USD_PER_REPLICA_HOUR)}}).start()
    op_server, _ = start_http_server(0, addr="127.0.0.1", registry=operator_registry)
    gateway = FakeGateway()
    gw_server, _ = start_http_server(0, addr="127.0.0.1", registry=gateway.registry)
    gw_port = gw_server.server_address[1]
    prom = PrometheusProcess(tmp_path / "prometheus", scrape_interval_s=0.5)
    try:
        prom.start([ScrapeTarget(f"127.0.0.1:{gw_port}", {"namespace": NS, "inferenceservice": SVC}, job="gateway"),
                    ScrapeTarget(f"127.0.0.1:{op_server.server_address[1]}", job="modalscale-operator")])
        wait_for(lambda: len(prom_query(prom.url, "up == 1")) == 2, 30, "both targets scraped")
        at = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=window_s + 2)).replace(microsecond=0)

        def tick_until(g: FakeGateway, until: dt.datetime) -> None:
            next_at = time.monotonic()
            while dt.datetime.now(dt.UTC) < until:
                g.tick()
                next_at += TICK_S
                time.sleep(max(0.0, next_at - time.monotonic()))

        tick_until(gateway, at - dt.timedelta(seconds=window_s / 2))
        # The gateway restarts: a new process, its counters from 0, on the same address.
        gw_server.shutdown()
        gw_server.server_close()
        gateway = FakeGateway()
        gw_server, _ = start_http_server(gw_port, addr="127.0.0.1", registry=gateway.registry)
        tick_until(gateway, at + dt.timedelta(seconds=1))
        wait_for(lambda: len(prom_query(prom.url, f"timestamp(up) > {at.timestamp() + 0.5}")) == 2, 10,
                 "a scrape of both targets after the window")

        code, out, err = run_cli("--since", f"{window_s}s", "--at", at.isoformat(), "--prometheus-url", prom.url,
                                 "--format", "json")
        assert code == 0, err
        doc = json.loads(out)
        assert sum(Decimal(r["usd"]) for r in doc["rows"]) == Decimal(doc["spend_usd"]) == Decimal("0.1")
        rows = {(r["tenant"], r["kind"]): r for r in doc["rows"]}
        for tenant in ("acme", "globex"):
            assert rows[(tenant, "request")]["flags"] == "CounterReset", rows
        assert rows[("", "idle")]["flags"] == ""
        assert doc["services"][0]["partial"] is True
        assert "counter reset inside the window" in err
        # increase() adds the counts on both sides of the restart (a lower bound by at most one scrape's worth).
        acme_s = float(rows[("acme", "request")]["replica_s"])
        assert 0.8 * 0.6 * window_s < acme_s < 1.05 * 0.6 * window_s, acme_s
    finally:
        evaluations.stop()
        prom.stop()
        gw_server.shutdown()
        op_server.shutdown()
