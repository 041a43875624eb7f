"""No pod this project makes gets the Docker-link variables of its namespace's Services (a new-user trial).

The kubelet gives every container, unless its pod sets ``enableServiceLinks: false``, variables for each Service of
its namespace (``pkg/kubelet/envvars``: ``<NAME>_SERVICE_HOST``, ``<NAME>_SERVICE_PORT[_<PORT NAME>]``,
``<NAME>_PORT[_<port>_<PROTO>[_PROTO|_PORT|_ADDR]]``, the name upper-cased with ``-`` as ``_``). A Service named
``modalscale-<x>`` so gives ``MODALSCALE_*`` names, and the operator and the gateway stop on any unknown setting:

* the README's ``helm install modalscale ...`` made the chart's Service ``modalscale-metrics``, and both operator
  pods crash-looped on ``MODALSCALE_METRICS_PORT_9090_TCP: unknown setting`` (``MODALSCALE_METRICS_PORT`` itself,
  a real setting, was ``tcp://<ip>:9090``);
* an InferenceService named ``modalscale-gateway`` made a Service whose links broke every gateway pod of its
  namespace (``MODALSCALE_GATEWAY_PORT: unknown setting``).

Each test below builds the environment the kubelet would give the container and reads its settings from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modalscale.api.inferenceservice import parse_isvc
from modalscale.gateway.settings import GatewaySettings
from modalscale.operator.isvc.objects import build_deployment, build_gateway_deployment, build_service
from modalscale.operator.settings import Settings
from tests.factories import inference_service
from tests.unit.test_chart_render import HELM, template


def service_links(services: list[dict[str, Any]]) -> dict[str, str]:
    """The variables ``pkg/kubelet/envvars.FromServices`` makes of ``services`` (those with a cluster IP)."""
    env: dict[str, str] = {}
    for i, svc in enumerate(services):
        ports = svc["spec"].get("ports") or []
        ip = svc["spec"].get("clusterIP") or f"10.96.0.{10 + i}"
        if ip == "None" or not ports:
            continue
        name = svc["metadata"]["name"].upper().replace("-", "_")
        first = ports[0]
        env[f"{name}_SERVICE_HOST"] = ip
        env[f"{name}_SERVICE_PORT"] = str(first["port"])
        for p in ports:
            if p.get("name"):
                env[f"{name}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p["port"])
        env[f"{name}_PORT"] = f"{first.get('protocol', 'TCP').lower()}://{ip}:{first['port']}"
        for p in ports:
            proto = p.get("protocol", "TCP")
            prefix = f"{name}_PORT_{p['port']}_{proto}"
            env[prefix] = f"{proto.lower()}://{ip}:{p['port']}"
            env[f"{prefix}_PROTO"], env[f"{prefix}_PORT"], env[f"{prefix}_ADDR"] = proto.lower(), str(p["port"]), ip
    return env


def container_env(deployment: dict[str, Any], services: list[dict[str, Any]]) -> dict[str, str]:
    """The first container's environment as the kubelet sets it: the namespace's Service links (unless the pod
    turns them off), then the container's own variables (a ``valueFrom`` one as a placeholder)."""
    pod = deployment["spec"]["template"]["spec"]
    env = {} if pod.get("enableServiceLinks") is False else service_links(services)
    for e in pod["containers"][0].get("env") or []:
        env[e["name"]] = e.get("value", "placeholder")
    return env


@pytest.mark.skipif(HELM is None, reason="no helm binary (build it: modalscale cluster build)")
def test_the_operator_installed_as_the_readme_says_reads_its_settings(tmp_path: Path) -> None:
    """README: ``helm install modalscale charts/modalscale -n modalscale``, plus an InferenceService named
    ``modalscale-gateway`` in the operator's namespace."""
    docs = template(tmp_path, release="modalscale", namespace="modalscale")
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    services = [d for d in docs if d["kind"] == "Service"]
    assert any(s["metadata"]["name"].startswith("modalscale-") for s in services)  # the case the trial hit
    services.append({"metadata": {"name": "modalscale-gateway"},
                     "spec": {"ports": [{"name": "http", "port": 8000}, {"name": "grpc", "port": 8001}]}})
    Settings.from_env(container_env(dep, services))  # raised: MODALSCALE_METRICS_PORT_9090_TCP: unknown setting


@pytest.mark.parametrize("name", ["modalscale-gateway", "modalscale-metrics", "modalscale"])
def test_a_gateway_reads_its_settings_beside_a_service_named_modalscale_anything(name: str) -> None:
    spec = parse_isvc(inference_service(name, "ml", uid="u-1", generation=1))
    other = parse_isvc(inference_service("vc", "ml", uid="u-2", generation=1))
    services = [build_service(spec), build_service(other)]
    for s in (spec, other):
        GatewaySettings.from_env(container_env(build_gateway_deployment(s, "modalscale/operator:1"), services))


def test_no_replica_pod_gets_service_links() -> None:
    spec = parse_isvc(inference_service("modalscale-gateway", "ml", uid="u-1", generation=1))
    dep = build_deployment(spec, 1, {"m/config.pbtxt": 'name: "m"\n'})
    assert dep["spec"]["template"]["spec"]["enableServiceLinks"] is False
