"""Spend-anomaly alerts end to end, across an operator restart: real control plane (KWOK nodes only), the real
``modalscale operator`` subprocess, a real Prometheus scraping the operator's ``/metrics``, and a Slack receiver
on 127.0.0.1.

A service runs steady at one 8 x H100 replica (about 84 USD/h, packaged catalog), is scaled to 4 replicas by hand
(a spike: 4x its own baseline), and back. The operator is killed during the anomaly and the next one starts
while Prometheus is down: it holds (decides nothing) until Prometheus is back. The detector runs with short
windows through ``MODALSCALE_SPEND_ANOMALY`` (recent baseline 180 s, scored window 4 s, cleared after 5 s calm, a
failed history read retried after 5 s), the policy every second, Prometheus scraping every second, so the whole
story takes a few minutes. The budget limit is far away: only the anomaly can alert.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modalscale.costmodel.ledger import parse_time
from modalscale.devenv.kube import wait_for
from modalscale.devenv.receivers import ChatReceiver
from tests.integration.operator.test_budget import (
    GPU_TYPE,
    GROUP,
    REPO,
    VERSION,
    condition,
    custom,
    evaluations_after,
    get_policy,
    make_policy,
    make_secret,
    running_pods,
    start_isvc,
)

DETECTOR = "recent_s=180,smooth_s=4,min_recent_samples=10,clear_after_s=5,history_retry_s=5"
BASELINE_SAMPLES = 40
"""Steady samples in Prometheus before the spike: more than the spike adds to the 180 s window before the
restart's checks end (Prometheus down included), so the baseline median stays the steady rate. The spike adds a
sample a second from the patch until Prometheus is stopped (the alert and its delivery: ~10 s) and from Prometheus'
restart to the checks (up to ``history_retry_s`` plus 3 evaluations): ~20. It was 60 while the history read was
retried after the operator's default 30 s (up to ~45 spike samples)."""


@pytest.fixture(scope="module")
def anomaly_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A control plane of its own: the test kills its operator, which must not be the session's."""
    from modalscale.devenv.cluster import running_cluster

    with running_cluster(tmp_path_factory.mktemp("anomaly-cluster"), nodes=0, crd_dir=REPO / "crds") as c:
        c.ensure_gpu_nodes(1, gpus_per_node=64, gpu_type=GPU_TYPE, cpu="1024", memory="16Ti", prefix="kwok-h100-")
        yield c


def prom_query(url: str, query: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def spend_anomalies(api: Any, ns: str) -> list[dict[str, Any]] | None:
    return (get_policy(api, ns, "budget").get("status") or {}).get("spendAnomalies")


def test_a_spike_alerts_once_across_a_restart_and_clears_when_back_to_normal(
        anomaly_cluster: Any, tmp_path: Path) -> None:
    from modalscale.devenv.operator_process import OperatorProcess
    from modalscale.devenv.prometheus import PrometheusProcess, ScrapeTarget
    from modalscale.runtime.server import free_port

    api = anomaly_cluster.api_client()
    ns, svc = "default", "steady"
    metrics_port = free_port()  # both operators serve /metrics here: the one scrape target
    prom = PrometheusProcess(tmp_path / "prometheus", scrape_interval_s=1.0)
    env = {"MODALSCALE_PROMETHEUS_URL": prom.url, "MODALSCALE_METRICS_PORT": str(metrics_port),
           "MODALSCALE_STANDALONE": "true", "MODALSCALE_SPEND_ANOMALY": DETECTOR}
    first = second = None
    with ChatReceiver("Slack") as slack:
        try:
            prom.start([ScrapeTarget(f"127.0.0.1:{metrics_port}", job="modalscale-operator")])
            first = OperatorProcess(anomaly_cluster.kubeconfig, tmp_path / "first.log", env)
            first.wait_healthy()
            make_secret(api, ns, "slack-hook", url=slack.url)
            start_isvc(api, ns, svc, replicas=1)
            custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
                "budget", "100000", [{"percent": 100}],
                [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}]))
            # The first operator read an empty history (Prometheus had none yet): that is a read, not a failure.
            c = wait_for(lambda: condition(get_policy(api, ns, "budget"), "SpendAnomalyHistory"), 60,
                         "SpendAnomalyHistory condition")
            assert (c["status"], c["reason"]) == ("True", "HistoryRead"), c
            burn = (f'modalscale_budget_service_burn_usd_per_hour{{policy_namespace="{ns}",policy="budget",'
                    f'namespace="{ns}",inferenceservice="{svc}"}}')
            wait_for(lambda: any(float(r["value"][1]) >= BASELINE_SAMPLES
                                 for r in prom_query(prom.url, f"count_over_time({burn}[180s])")),
                     240, f"{BASELINE_SAMPLES} steady burn-rate samples in Prometheus", interval_s=1.0)
            steady_usd_per_hour = float(prom_query(prom.url, burn)[0]["value"][1])
            assert slack.received == []

            # ---- the spike: scaled 1 -> 4 by hand
            custom(api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", svc,
                                                       {"spec": {"scaling": {"replicas": 4}}})
            spiked_at = dt.datetime.now(dt.UTC)
            assert slack.wait_for(1, timeout_s=90, accepted_only=True), "no SpendAnomaly alert"
            (msg,) = slack.accepted
            text = msg.room_text()  # as Slack shows it: its mrkdwn escapes (-&gt;) read back
            assert f"spend anomaly in {ns}/{svc}" in text and "driver: replicas 1 -> 4" in text, text
            (item,) = wait_for(lambda: spend_anomalies(api, ns), 30, "status.spendAnomalies")
            assert (item["namespace"], item["name"]) == (ns, svc)
            since = parse_time(item["since"], "since")
            delay_s = (since - spiked_at).total_seconds()
            # Delivery is at least once: killed before the delivered entry leaves status.pendingAlerts, the next
            # operator sends it again (test_budget's restart tests). Killed after, nothing may be sent again.
            wait_for(lambda: not (get_policy(api, ns, "budget")["status"].get("pendingAlerts")), 30,
                     "the SpendAnomaly outbox entry recorded as delivered")

            # ---- the operator dies during the anomaly; the next one starts while Prometheus is down: it holds
            prom.stop()
            first.kill(signal.SIGKILL)
            second = OperatorProcess(anomaly_cluster.kubeconfig, tmp_path / "second.log", env)
            second.wait_healthy()
            held = wait_for(lambda: (p := get_policy(api, ns, "budget")) and (c := condition(p, "SpendAnomalyHistory"))
                            and c["status"] == "False" and p, 60, "SpendAnomalyHistory=False while Prometheus is down")
            c = condition(held, "SpendAnomalyHistory")
            assert c is not None and c["reason"] == "HistoryUnavailable" and prom.url in c["message"], c
            assert [i["since"] for i in held["status"]["spendAnomalies"]] == [item["since"]]  # held as stored
            # ---- Prometheus back: the next retry (history_retry_s after the failed read) reads the history back
            prom.start([ScrapeTarget(f"127.0.0.1:{metrics_port}", job="modalscale-operator")])
            wait_for(lambda: (c := condition(get_policy(api, ns, "budget"), "SpendAnomalyHistory"))
                     and c["status"] == "True", 90, "SpendAnomalyHistory=True once Prometheus is back", interval_s=1.0)
            evaluations_after(api, ns, "budget", dt.datetime.now(dt.UTC), 3)
            p = get_policy(api, ns, "budget")
            c = condition(p, "SpendAnomalyHistory")
            assert c is not None and (c["status"], c["reason"]) == ("True", "HistoryRead"), c
            read = int(c["message"].split("Read ")[1].split(" ")[0])
            assert read >= BASELINE_SAMPLES, c["message"]  # the baseline came back, not a fresh start
            assert running_pods(api, ns, svc) == 4
            assert [(i["namespace"], i["name"], i["since"]) for i in p["status"]["spendAnomalies"]] == \
                [(ns, svc, item["since"])]
            assert "Read the spend-anomaly history from Prometheus" in second.log()
            assert "alerts=1" not in second.log()  # the restarted operator decided no alert
            assert len(slack.received) == 1, [json.dumps(r.payload)[:200] for r in slack.received]

            # ---- back to normal: the anomaly clears (calm for clear_after_s) and its alert is resolved, once
            custom(api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", svc,
                                                       {"spec": {"scaling": {"replicas": 1}}})
            wait_for(lambda: spend_anomalies(api, ns) == [], 120, "status.spendAnomalies empty again",
                     interval_s=1.0)
            assert slack.wait_for(2, timeout_s=30, accepted_only=True), "no recovery of the SpendAnomaly alert"
            evaluations_after(api, ns, "budget", dt.datetime.now(dt.UTC), 3)
            assert len(slack.received) == 2, [json.dumps(r.payload) for r in slack.received[1:]]
            over = slack.accepted[1].room_text()
            assert f"no spend anomaly left ({ns}/{svc} back to baseline)" in over, over
            assert f"SpendAnomaly (since {item['since']})" in over, over
            print(f"\nfigure: steady {steady_usd_per_hour:.2f} USD/h x4 by hand; anomaly started {delay_s:.1f} s "
                  f"after the patch (smooth_s=4, 1 s evaluations); the restarted operator held while Prometheus "
                  f"was down, then read {read} samples back and alerted nothing again (machine shared with other "
                  f"helpers)")
        finally:
            for op in (first, second):
                if op is not None:
                    op.stop()
            prom.stop()
            api.close()
