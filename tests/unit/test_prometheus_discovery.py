"""The devenv Prometheus discovers pods like the chart's PodMonitor: same selection, port and relabelings."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from modalscale.devenv.prometheus import PodDiscovery, PrometheusProcess, ScrapeTarget

PODMONITOR = Path(__file__).resolve().parents[2] / "charts" / "modalscale" / "templates" / "podmonitor.yaml"


def _chart() -> tuple[list[tuple[str, str]], dict[str, str], str]:
    text = PODMONITOR.read_text()
    relabel = re.findall(r"- sourceLabels: \[(\S+)\]\s*\n\s*targetLabel: (\S+)", text)
    block = text.split("matchLabels:")[1].split("matchExpressions:")[0]
    match = dict(re.findall(r"^\s+([\w./-]+): ([\w.-]+)\s*$", block, re.M))
    port = re.search(r"- port: (\S+)", text).group(1)  # type: ignore[union-attr]
    return relabel, match, port


def test_discovery_keeps_the_podmonitor_pods_and_relabels_like_it() -> None:
    relabel, match, port = _chart()
    assert relabel and match and port == "metrics"
    cfg = PodDiscovery("https://127.0.0.1:6443", "/ca", "/crt", "/key", ("team-a",)).scrape_config()
    rules = cfg["relabel_configs"]
    assert isinstance(rules, list)
    renames = [(r["source_labels"][0], r["target_label"]) for r in rules if "target_label" in r]
    assert renames[:len(relabel)] == relabel
    keeps = {r["source_labels"][0]: r["regex"] for r in rules if r.get("action") == "keep"}
    for label, value in match.items():
        assert keeps[f"__meta_kubernetes_pod_label_{re.sub(r'[^A-Za-z0-9]', '_', label)}"] == value
    assert keeps["__meta_kubernetes_pod_labelpresent_modalscale_io_inferenceservice"] == "true"
    assert keeps["__meta_kubernetes_pod_container_port_name"] == port
    sd = cfg["kubernetes_sd_configs"][0]  # type: ignore[index]
    assert sd["role"] == "pod" and sd["namespaces"] == {"names": ["team-a"]}
    assert sd["tls_config"] == {"ca_file": "/ca", "cert_file": "/crt", "key_file": "/key"}


def test_generated_config_holds_the_static_jobs_and_the_discovery_job(tmp_path: Path) -> None:
    prom = PrometheusProcess(tmp_path, discovery=PodDiscovery("https://127.0.0.1:6443", "/ca", "/crt", "/key"))
    prom._write_config([ScrapeTarget("127.0.0.1:8002", {"namespace": "a", "inferenceservice": "b"})])
    cfg = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    assert [j["job_name"] for j in cfg["scrape_configs"]] == ["triton-0", "inferenceservice-pods"]
    assert cfg["scrape_configs"][0]["static_configs"] == [
        {"targets": ["127.0.0.1:8002"], "labels": {"namespace": "a", "inferenceservice": "b"}}]
    assert "namespaces" not in cfg["scrape_configs"][1]["kubernetes_sd_configs"][0]
