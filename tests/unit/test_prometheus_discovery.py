"""The devenv Prometheus discovers pods like the chart's PodMonitor: same selection, port and relabelings."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from modalscale.devenv.prometheus import (
    GATEWAY_COMPONENT,
    GATEWAY_POD_MONITOR_RELABELINGS,
    IMAGE_ENCODER_COMPONENT,
    IMAGE_ENCODER_POD_MONITOR_RELABELINGS,
    POD_MONITOR_RELABELINGS,
    PodDiscovery,
    PrometheusProcess,
    ScrapeTarget,
    gateway_target,
    image_encoder_target,
)

PODMONITOR = Path(__file__).resolve().parents[2] / "charts" / "modalscale" / "templates" / "podmonitor.yaml"


def _chart() -> list[tuple[list[tuple[str, str]], dict[str, str], str, str]]:
    """Per PodMonitor of the chart's template, in its order: (relabelings, matchLabels, required label, port)."""
    out = []
    for text in PODMONITOR.read_text().split("\n---\n"):
        relabel = re.findall(r"- sourceLabels: \[(\S+)\]\s*\n\s*targetLabel: (\S+)", text)
        block = text.split("matchLabels:")[1].split("matchExpressions:")[0]
        match = dict(re.findall(r"^\s+([\w./-]+): ([\w.-]+)\s*$", block, re.M))
        required = re.search(r"- \{key: (\S+), operator: Exists\}", text).group(1)  # type: ignore[union-attr]
        port = re.search(r"- port: (\S+)", text).group(1)  # type: ignore[union-attr]
        out.append((relabel, match, required, port))
    return out


def test_discovery_keeps_the_podmonitor_pods_and_relabels_like_it() -> None:
    monitors = _chart()
    configs = PodDiscovery("https://127.0.0.1:6443", "/ca", "/crt", "/key", ("team-a",)).scrape_configs()
    assert len(monitors) == len(configs) == 3
    assert [m[2] for m in monitors] == ["modalscale.io/inferenceservice", "modalscale.io/gateway",
                                        "modalscale.io/image-encoder"]
    for (relabel, match, required, port), cfg in zip(monitors, configs, strict=True):
        assert relabel and match and port == "metrics"
        rules = cfg["relabel_configs"]
        assert isinstance(rules, list)
        renames = [(r["source_labels"][0], r["target_label"]) for r in rules if "target_label" in r]
        assert renames[:len(relabel)] == relabel
        assert ("__meta_kubernetes_pod_label_app_kubernetes_io_component", "component") in relabel
        keeps = {r["source_labels"][0]: r["regex"] for r in rules if r.get("action") == "keep"}
        for label, value in match.items():
            assert keeps[f"__meta_kubernetes_pod_label_{re.sub(r'[^A-Za-z0-9]', '_', label)}"] == value
        assert keeps[f"__meta_kubernetes_pod_labelpresent_{re.sub(r'[^A-Za-z0-9]', '_', required)}"] == "true"
        assert keeps["__meta_kubernetes_pod_container_port_name"] == port
        sd = cfg["kubernetes_sd_configs"][0]  # type: ignore[index]
        assert sd["role"] == "pod" and sd["namespaces"] == {"names": ["team-a"]}
        assert sd["tls_config"] == {"ca_file": "/ca", "cert_file": "/crt", "key_file": "/key"}
    assert len({c["job_name"] for c in configs}) == 3


def test_the_discovered_labels_come_from_the_labels_the_operator_puts_on_its_pods() -> None:
    """The replicas' series get component=inference-server, the gateway's component=gateway, the image encoder
    pool's component=image-encoder, all the InferenceService's name as ``inferenceservice`` (the pod labels the
    chart's relabelings read); the values are those the autoscaler's queries tell apart."""
    from modalscale.api.inferenceservice import parse_isvc
    from modalscale.operator.autoscale import observe
    from modalscale.operator.isvc.objects import gateway_labels, image_encoder_labels, owned_labels

    isvc = parse_isvc({"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
                       "metadata": {"name": "vc", "namespace": "team-a", "uid": "1"}, "spec": {}})
    assert (GATEWAY_COMPONENT, IMAGE_ENCODER_COMPONENT) == observe.OTHER_COMPONENTS
    for labels, relabelings, component in ((owned_labels(isvc), POD_MONITOR_RELABELINGS, "inference-server"),
                                           (gateway_labels(isvc), GATEWAY_POD_MONITOR_RELABELINGS, GATEWAY_COMPONENT),
                                           (image_encoder_labels(isvc), IMAGE_ENCODER_POD_MONITOR_RELABELINGS,
                                            IMAGE_ENCODER_COMPONENT)):
        meta = {"__meta_kubernetes_pod_label_" + re.sub(r"[^A-Za-z0-9]", "_", k): v for k, v in labels.items()}
        meta["__meta_kubernetes_namespace"] = "team-a"
        target = {dst: meta[src] for src, dst in relabelings}
        assert target == {"inferenceservice": "vc", "namespace": "team-a", "component": component}
    assert gateway_target("127.0.0.1:9090", "team-a", "vc").labels == {
        "namespace": "team-a", "inferenceservice": "vc", "component": "gateway"}
    assert image_encoder_target("127.0.0.1:8012", "team-a", "vc").labels == {
        "namespace": "team-a", "inferenceservice": "vc", "component": "image-encoder"}


def test_generated_config_holds_the_static_jobs_and_the_discovery_job(tmp_path: Path) -> None:
    prom = PrometheusProcess(tmp_path, discovery=PodDiscovery("https://127.0.0.1:6443", "/ca", "/crt", "/key"))
    prom._write_config([ScrapeTarget("127.0.0.1:8002", {"namespace": "a", "inferenceservice": "b"})])
    cfg = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    assert [j["job_name"] for j in cfg["scrape_configs"]] == ["triton-0", "inferenceservice-pods", "gateway-pods",
                                                              "image-encoder-pods"]
    assert cfg["scrape_configs"][0]["static_configs"] == [
        {"targets": ["127.0.0.1:8002"], "labels": {"namespace": "a", "inferenceservice": "b"}}]
    assert "namespaces" not in cfg["scrape_configs"][1]["kubernetes_sd_configs"][0]
