"""The Helm charts for real: `helm lint`, `helm template` with default and non-default values, server-side
dry-run of every rendered manifest against the real control plane, `helm install`/`uninstall` of the operator
(pods placed on KWOK's fake GPU nodes with ``fake_node_placement()``, so objects and RBAC are checked, not the
container), `kubectl auth can-i` as the operator's ServiceAccount, and the operator process itself running with
that ServiceAccount's token on a control plane of its own, so the chart's RBAC is shown to be enough for what the
code does; and the operator image built from Dockerfile.operator (modalscale images build) installed by `helm
install` with README's local values and running in pods on the session cluster's real node, reconciling with only
the chart's RBAC."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from modalscale.devenv.binaries import ensure_binaries, ensure_helm
from modalscale.devenv.cluster import LocalCluster, fake_node_placement
from modalscale.devenv.kube import wait_for
from modalscale.devenv.operator_process import OperatorProcess
from modalscale.operator.settings import Settings

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "modalscale"
CRD_CHART = REPO / "charts" / "modalscale-crds"
VALUES_UID = yaml.safe_load((CHART / "values.yaml").read_text())["securityContext"]["runAsUser"]

NONDEFAULT = {
    "config": {"namespaces": ["team-a", "team-b"], "logLevel": "DEBUG",
               "prometheusUrl": "http://prometheus.monitoring:9090", "opencostUrl": "http://opencost.opencost:9003"},
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
                "podMonitor": {"enabled": True},
                "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
                "ruleFileConfigMap": {"enabled": True, "namespace": "monitoring"}},
    "pricingCatalog": {"overrides": {"gpuHour": {"nvidia-l4": {"onDemand": {
        "usdPerUnitHour": "0.50", "source": "our contract", "asOf": "2026-01-01"}}}}},
    "notifications": {"secretNames": ["search-slack-webhook", "oncall-dingtalk"]},
}
"""Namespace-scoped install, ServiceMonitor, PodMonitor, showback PrometheusRule and rule-file ConfigMap on, a pricing
catalog override, two notification Secrets."""


def minimal_monitoring_crd(kind: str) -> dict[str, Any]:
    """Stand-in for a Prometheus Operator CRD (absent from the local control plane), so the dry run can check
    the object's apiVersion, kind and namespace; its schema accepts any spec."""
    plural = kind.lower() + "s"
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


# ---------------------------------------------------------------------------------------------- helpers
@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The pinned helm (built once from the Go module proxy), with its config/cache/data in a temp dir."""
    home = tmp_path_factory.mktemp("helm-home")
    saved = {k: os.environ.get(k) for k in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")}
    for k in saved:
        os.environ[k] = str(home / k.lower())
    yield [str(ensure_helm(log=lambda _m: None))]
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def kubectl() -> str:
    return str(ensure_binaries(log=lambda _m: None).kubectl)


def run(cmd: list[str], check: bool = True, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def values_file(tmp_path: Path, values: dict[str, Any], name: str = "values.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values))
    return path


def template(helm: list[str], tmp_path: Path, values: dict[str, Any] | None = None, chart: Path = CHART,
             release: str = "ms", namespace: str = "modalscale-system") -> tuple[str, list[dict[str, Any]]]:
    # No --kube-version: the pinned helm is built with its release ldflags (binaries.helm_ldflags), so its default
    # Kubernetes version meets the charts' kubeVersion, as a user's `helm template` must.
    cmd = [*helm, "template", release, str(chart), "--namespace", namespace]
    if values:
        cmd += ["-f", str(values_file(tmp_path, values, f"values-{uuid.uuid4().hex[:6]}.yaml"))]
    text = run(cmd).stdout
    return text, [d for d in yaml.safe_load_all(text) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def env_of(docs: list[dict[str, Any]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(docs)["env"]}


def rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]


def grants(rule_list: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """(apiGroup, resource, verb, resourceName or '') for every combination a list of rules grants."""
    return {(g, r, v, n) for rule in rule_list for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"] for n in (rule.get("resourceNames") or [""])}


GATEWAY_KINDS = (("", "serviceaccounts"), ("rbac.authorization.k8s.io", "roles"),
                 ("rbac.authorization.k8s.io", "rolebindings"), ("networking.k8s.io", "networkpolicies"),
                 ("policy", "poddisruptionbudgets"))
"""(apiGroup, resource) of the kinds only an InferenceService's gateway adds (operator/isvc/objects.py)."""

NAMESPACED_GRANTS = {
    # kopf watches and patches (progress/diff-base annotations, finalizer); the operator reads and, for budget
    # caps, patches annotations; status goes through the status subresource.
    *{("modalscale.io", r, v, "") for r in ("inferenceservices", "budgetpolicies")
      for v in ("get", "list", "watch", "patch")},
    ("modalscale.io", "inferenceservices/status", "patch", ""),
    ("modalscale.io", "budgetpolicies/status", "patch", ""),
    ("modalscale.io", "inferenceservices/finalizers", "update", ""),  # blockOwnerDeletion on children
    *{("apps", "deployments", v, "") for v in ("get", "create", "patch", "delete")},
    *{("", r, v, "") for r in ("services", "configmaps") for v in ("get", "create", "patch")},
    # The request gateway (spec.gateway.enabled): its objects, deleted again when it is turned off; the gateway's
    # Role grants endpointslices get/list/watch, which the operator must hold to grant (no escalate/bind).
    *{(g, r, v, "") for g, r in GATEWAY_KINDS for v in ("get", "create", "patch", "delete")},
    ("", "services", "delete", ""),
    # The image encoder pool (spec.stages): its ConfigMap is deleted when spec.stages is removed (its Deployment,
    # Service and PodDisruptionBudget by the grants above).
    ("", "configmaps", "delete", ""),
    *{("discovery.k8s.io", "endpointslices", v, "") for v in ("get", "list", "watch")},
    ("", "persistentvolumeclaims", "get", ""),
    ("", "pods", "list", ""), ("", "pods", "watch", ""),
    ("autoscaling", "horizontalpodautoscalers", "list", ""),
    ("", "events", "create", ""),
    ("events.k8s.io", "events", "create", ""),
    # The children's watch caches (operator/isvc/cache.py): one list+watch per kind of child.
    *{(g, r, v, "") for g, r in (("apps", "deployments"), ("", "services"), ("", "configmaps"), *GATEWAY_KINDS)
      for v in ("list", "watch")},
    ("autoscaling", "horizontalpodautoscalers", "watch", ""),
}
"""What the operator's code uses in the namespaces it serves (see templates/rbac.yaml for the call sites)."""


def peering_grants(plural: str, name: str) -> set[tuple[str, str, str, str]]:
    return {("kopf.dev", plural, "list", ""), ("kopf.dev", plural, "watch", ""),
            ("kopf.dev", plural, "create", ""), ("kopf.dev", plural, "patch", name)}


# ---------------------------------------------------------------------------------------------- lint & template
def test_helm_lint_strict_passes_for_both_charts_with_default_and_nondefault_values(
        helm: list[str], tmp_path: Path) -> None:
    out = run([*helm, "lint", "--strict", str(CHART), str(CRD_CHART)]).stdout
    assert "2 chart(s) linted, 0 chart(s) failed" in out
    out = run([*helm, "lint", "--strict", str(CHART), "-f", str(values_file(tmp_path, NONDEFAULT))]).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    out = run([*helm, "lint", "--strict", str(CHART), "-f", str(CHART / "values-local.yaml")]).stdout  # README's
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_default_render_is_a_two_replica_cluster_wide_operator(helm: list[str], tmp_path: Path) -> None:
    _, docs = template(helm, tmp_path)
    assert sorted(d["kind"] for d in docs) == sorted([
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service", "PodDisruptionBudget",
        "ConfigMap", "ConfigMap"])  # dashboard + kube-state-metrics config; no pricing ConfigMap, no ServiceMonitor
    deploy = one(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"] == "ms-modalscale"
    c = container(docs)
    assert c["command"] == ["modalscale", "operator"]
    assert c["image"] == "modalscale/operator:0.1.0"
    env = env_of(docs)
    assert "MODALSCALE_NAMESPACES" not in env and "MODALSCALE_PRICING_CATALOG" not in env
    assert env["MODALSCALE_PEERING_NAME"] == "ms-modalscale" and env["MODALSCALE_STANDALONE"] == "false"
    settings = Settings.from_env(env)  # the operator's own start-up validation accepts the chart's env
    assert settings.namespaces == () and settings.standalone is False and settings.log_level == "INFO"
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ms-modalscale",
                                    "namespace": "modalscale-system"}]
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_default_render_has_locked_down_security_context_and_healthz_probes(helm: list[str], tmp_path: Path) -> None:
    _, docs = template(helm, tmp_path)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    c = container(docs)
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"} == pod["securityContext"]["seccompProfile"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    env = env_of(docs)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"health": int(env["MODALSCALE_HEALTH_PORT"]), "metrics": int(env["MODALSCALE_METRICS_PORT"])}
    for probe in (c["livenessProbe"], c["readinessProbe"]):
        assert probe["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]  # the only writable path
    svc = one(docs, "Service")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]


def test_default_rbac_is_exactly_what_the_operator_uses_with_no_wildcards(helm: list[str], tmp_path: Path) -> None:
    _, docs = template(helm, tmp_path)
    rule_list = rules(docs)
    text = json.dumps(rule_list)
    assert "*" not in text
    assert grants(rule_list) == NAMESPACED_GRANTS | peering_grants("clusterkopfpeerings", "ms-modalscale") | {
        ("apiextensions.k8s.io", "customresourcedefinitions", "list", ""),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch", ""),
        ("", "nodes", "get", ""),  # budget.observe: a pod's node's capacity-type label prices it (SwitchToSpot)
        ("coordination.k8s.io", "leases", "get", "")}  # budget.observe: a silent node's last Lease renewal
    verbs = {v for _, _, v, _ in grants(rule_list)}
    assert not verbs & {"deletecollection", "escalate", "bind", "impersonate"}
    # delete: only the objects of a gateway that is turned off (operator/isvc/plan.py _gateway_writes) and of an
    # image encoder pool whose spec.stages was removed (_image_encoder_writes: its ConfigMap too)
    assert {r for _, r, v, _ in grants(rule_list) if v == "delete"} == {
        "deployments", "services", "configmaps", *(r for _, r in GATEWAY_KINDS)}
    assert {r for _, r, v, _ in grants(rule_list) if v == "update"} == {"inferenceservices/finalizers"}
    assert not [g for g in grants(rule_list) if g[1] == "secrets"]  # no Secret access unless names are given


def test_dashboard_and_kube_state_metrics_configmaps(helm: list[str], tmp_path: Path) -> None:
    _, docs = template(helm, tmp_path)
    maps = {d["metadata"]["name"]: d for d in of_kind(docs, "ConfigMap")}
    dash = maps["ms-modalscale-dashboard"]
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    panels = {p["title"] for p in json.loads(dash["data"]["modalscale-overview.json"])["panels"]}
    assert {"Replicas", "Desired vs actual replicas", "p95 latency vs SLO", "Spend vs budget",
            "Scaling decisions"} <= panels
    ksm = yaml.safe_load(maps["ms-modalscale-kube-state-metrics"]["data"]["custom-resource-state.yaml"])
    assert ksm["kind"] == "CustomResourceStateMetrics"
    _, docs = template(helm, tmp_path, {"dashboard": {"enabled": False},
                                        "kubeStateMetrics": {"customResourceState": False}})
    assert of_kind(docs, "ConfigMap") == []


def test_nondefault_render_is_namespace_scoped_with_servicemonitor_catalog_and_secrets(
        helm: list[str], tmp_path: Path) -> None:
    _, docs = template(helm, tmp_path, NONDEFAULT)
    assert of_kind(docs, "ClusterRole") == [] and of_kind(docs, "ClusterRoleBinding") == []
    roles = {d["metadata"]["namespace"]: d for d in of_kind(docs, "Role")}
    bindings = {d["metadata"]["namespace"]: d for d in of_kind(docs, "RoleBinding")}
    assert set(roles) == set(bindings) == {"team-a", "team-b"}
    for ns in ("team-a", "team-b"):
        assert bindings[ns]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                           "name": "ms-modalscale"}
        assert bindings[ns]["subjects"][0]["namespace"] == "modalscale-system"
        secret_grants = {("", "secrets", "get", n) for n in ("search-slack-webhook", "oncall-dingtalk")}
        assert grants(roles[ns]["rules"]) == NAMESPACED_GRANTS | secret_grants | peering_grants(
            "kopfpeerings", "ms-modalscale")
    assert "*" not in json.dumps(rules(docs))

    env = env_of(docs)
    assert env["MODALSCALE_NAMESPACES"] == "team-a,team-b"
    assert env["MODALSCALE_LOG_LEVEL"] == "DEBUG"
    assert env["MODALSCALE_PROMETHEUS_URL"] == "http://prometheus.monitoring:9090"
    assert env["MODALSCALE_OPENCOST_URL"] == "http://opencost.opencost:9003"
    assert env["MODALSCALE_PRICING_CATALOG"] == "/etc/modalscale/pricing/catalog.yaml"

    # The catalog ConfigMap is mounted where MODALSCALE_PRICING_CATALOG points, and the operator's start-up
    # validation loads it with the override applied.
    pricing = next(d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] == "ms-modalscale-pricing")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "pricing-catalog")
    assert volume["configMap"]["name"] == "ms-modalscale-pricing"
    mount = next(m for m in container(docs)["volumeMounts"] if m["name"] == "pricing-catalog")
    assert mount["readOnly"] is True
    assert f"{mount['mountPath']}/{volume['configMap']['items'][0]['path']}" == env["MODALSCALE_PRICING_CATALOG"]
    catalog_file = tmp_path / "catalog.yaml"
    catalog_file.write_text(pricing["data"]["catalog.yaml"])
    settings = Settings.from_env({**env, "MODALSCALE_PRICING_CATALOG": str(catalog_file)})
    assert settings.namespaces == ("team-a", "team-b")
    from modalscale.costmodel.catalog import PricingTier, load_catalog

    l4 = load_catalog(catalog_file).gpu_hour["nvidia-l4"].figure(PricingTier.ON_DEMAND)
    assert l4 is not None and l4.usd_per_unit_hour == Decimal("0.50")

    sm = one(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True  # autoscaler series keep their namespace label
    svc_labels = one(docs, "Service")["metadata"]["labels"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc_labels.items()

    # The PodMonitors select the Triton pods, the gateway pods and the image encoder pools' pods the operator creates
    # and label their series the way the autoscaler queries them ({namespace, inferenceservice}, component telling
    # the three sources apart).
    from modalscale.api.inferenceservice import parse_isvc
    from modalscale.operator.isvc.objects import (
        GATEWAY_LABEL,
        IMAGE_ENCODER_LABEL,
        SELECTOR_LABEL,
        gateway_labels,
        image_encoder_labels,
        owned_labels,
    )

    monitors = {d["metadata"]["name"]: d for d in of_kind(docs, "PodMonitor")}
    assert set(monitors) == {"ms-modalscale-inferenceservices", "ms-modalscale-gateways",
                             "ms-modalscale-image-encoders"}
    isvc = parse_isvc({"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
                       "metadata": {"name": "vc", "namespace": "team-a", "uid": "1"}, "spec": {}})

    def meta(label: str) -> str:
        return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)

    for name, pod_labels, required, component in (
            ("ms-modalscale-inferenceservices", owned_labels(isvc), SELECTOR_LABEL, "inference-server"),
            ("ms-modalscale-gateways", gateway_labels(isvc), GATEWAY_LABEL, "gateway"),
            ("ms-modalscale-image-encoders", image_encoder_labels(isvc), IMAGE_ENCODER_LABEL, "image-encoder")):
        pm = monitors[name]
        assert pm["apiVersion"] == "monitoring.coreos.com/v1"
        assert pm["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
        assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        assert pm["spec"]["selector"]["matchExpressions"] == [{"key": required, "operator": "Exists"}]
        endpoint = pm["spec"]["podMetricsEndpoints"][0]
        assert endpoint["port"] == "metrics" and int(endpoint["interval"].rstrip("s")) <= 7
        assert {"sourceLabels": [meta(required)], "targetLabel": "inferenceservice"} in endpoint["relabelings"]
        assert {"sourceLabels": ["__meta_kubernetes_namespace"], "targetLabel": "namespace"} in endpoint["relabelings"]
        source = {"sourceLabels": [meta("app.kubernetes.io/component")], "targetLabel": "component"}
        assert source in endpoint["relabelings"] and pod_labels["app.kubernetes.io/component"] == component
    # Each PodMonitor selects only its own pods: no pod carries another PodMonitor's required label.
    required = (SELECTOR_LABEL, GATEWAY_LABEL, IMAGE_ENCODER_LABEL)
    for labels, own in ((owned_labels(isvc), SELECTOR_LABEL), (gateway_labels(isvc), GATEWAY_LABEL),
                        (image_encoder_labels(isvc), IMAGE_ENCODER_LABEL)):
        assert [k for k in required if k in labels] == [own]
    _, docs = template(helm, tmp_path, {"metrics": {"podMonitor": {"enabled": True}}})
    assert [d["spec"]["namespaceSelector"] for d in of_kind(docs, "PodMonitor")] == [{"any": True}] * 3


def test_showback_rules_render_as_a_prometheusrule_and_a_plain_rule_file_only_when_asked(
        helm: list[str], tmp_path: Path) -> None:
    rules_file = (CHART / "files" / "showback-rules.yaml").read_text()
    _, docs = template(helm, tmp_path)
    assert of_kind(docs, "PrometheusRule") == []
    assert not [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] == "ms-modalscale-showback-rules"]
    _, docs = template(helm, tmp_path, NONDEFAULT)
    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["name"] == "ms-modalscale-showback"
    assert rule["metadata"]["namespace"] == "modalscale-system"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # The PrometheusRule's spec is the plain rule file (same groups, same expressions).
    assert rule["spec"] == yaml.safe_load(rules_file)
    records = {r["record"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"modalscale:showback_usd_per_hour", "modalscale:showback_idle_usd_per_hour"} <= records
    cm = next(d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] == "ms-modalscale-showback-rules")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["data"]["showback-rules.yaml"] == rules_file


@pytest.mark.parametrize(("values", "message"), [
    ({"config": {"standalone": True}}, "replicaCount"),
    ({"config": {"logLevel": "verbose"}}, "logLevel"),
    ({"config": {"prometheusUrl": "prometheus:9090"}}, "prometheusUrl"),
    ({"config": {"namespaces": ["Team_A"]}}, "namespaces"),
    ({"config": {"watchEverything": True}}, "watchEverything"),
    ({"securityContext": {"allowPrivilegeEscalation": True}}, "allowPrivilegeEscalation"),
    ({"replicaCount": 0}, "replicaCount"),
], ids=["standalone-with-2-replicas", "log-level", "url-scheme", "namespace-name", "unknown-key",
        "privilege-escalation", "zero-replicas"])
def test_schema_rejects_bad_values(helm: list[str], tmp_path: Path, values: dict[str, Any], message: str) -> None:
    proc = run([*helm, "template", "ms", str(CHART), "-f", str(values_file(tmp_path, values))], check=False)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr and message in proc.stderr


def test_crd_chart_renders_the_crds_folder_unchanged_plus_helm_metadata(helm: list[str], tmp_path: Path) -> None:
    _, docs = template(helm, tmp_path, chart=CRD_CHART, release="crds")
    source = [d for p in sorted((REPO / "crds").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    rendered = {d["metadata"]["name"]: d for d in docs}
    assert set(rendered) == {d["metadata"]["name"] for d in source}
    for src in source:
        out = rendered[src["metadata"]["name"]]
        assert out["spec"] == src["spec"]
        assert {k: v for k, v in out.items() if k != "metadata"} == {k: v for k, v in src.items() if k != "metadata"}
        assert (src["metadata"].get("labels") or {}).items() <= out["metadata"]["labels"].items()
        assert out["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert out["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    _, docs = template(helm, tmp_path, {"kopfPeering": {"install": False}, "keep": False}, chart=CRD_CHART)
    assert {d["metadata"]["name"] for d in docs} == {"inferenceservices.modalscale.io", "budgetpolicies.modalscale.io"}
    assert all("annotations" not in d["metadata"] for d in docs)


# ---------------------------------------------------------------------------------------------- real control plane
@pytest.fixture
def namespaces(api: Any) -> Iterator[Any]:
    """Factory for fresh namespaces (deleted afterwards)."""
    core = client.CoreV1Api(api)
    made: list[str] = []

    def make(prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        core.create_namespace({"metadata": {"name": name}})
        made.append(name)
        return name

    yield make
    for name in made:
        core.delete_namespace(name)


def test_rendered_manifests_pass_server_side_dry_run(helm: list[str], kubectl: str, cluster: Any, api: Any,
                                                     crds_installed: list[str], namespaces: Any,
                                                     tmp_path: Path) -> None:
    ext = client.ApiextensionsV1Api(api)
    monitoring = [minimal_monitoring_crd("ServiceMonitor"), minimal_monitoring_crd("PodMonitor"),
                  minimal_monitoring_crd("PrometheusRule")]
    for crd in monitoring:
        ext.create_custom_resource_definition(crd)
    try:
        for crd in monitoring:
            wait_for(lambda crd=crd: any(c.type == "Established" and c.status == "True" for c in
                                         ext.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions
                                         or []), 30, f"{crd['metadata']['name']} Established")
        release_ns, team_a, team_b = namespaces("ms-dry"), namespaces("team-a"), namespaces("team-b")
        values = json.loads(json.dumps(NONDEFAULT))
        values["config"]["namespaces"] = [team_a, team_b]
        values["metrics"]["ruleFileConfigMap"]["namespace"] = release_ns  # "monitoring" does not exist here
        renders = {
            "crds": template(helm, tmp_path, chart=CRD_CHART, release="crds")[0],
            "default": template(helm, tmp_path, namespace=release_ns)[0],
            "nondefault": template(helm, tmp_path, values, namespace=release_ns)[0],
        }
        for name, text in renders.items():
            path = tmp_path / f"{name}.yaml"
            path.write_text(text)
            # --force-conflicts: the session's CRDs are owned by another field manager; this checks validity only.
            out = run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "apply", "--server-side",
                       "--dry-run=server", "--force-conflicts", "--field-manager=helm-test", "-f", str(path)]).stdout
            count = len([d for d in yaml.safe_load_all(text) if d])
            applied = [line for line in out.splitlines() if "serverside-applied (server dry run)" in line]
            assert len(applied) == count, f"{name}: {out}"
        assert "servicemonitor.monitoring.coreos.com/ms-modalscale serverside-applied" in out
        assert "podmonitor.monitoring.coreos.com/ms-modalscale-inferenceservices serverside-applied" in out
        assert "podmonitor.monitoring.coreos.com/ms-modalscale-gateways serverside-applied" in out
        assert "podmonitor.monitoring.coreos.com/ms-modalscale-image-encoders serverside-applied" in out
        assert "prometheusrule.monitoring.coreos.com/ms-modalscale-showback serverside-applied" in out
    finally:
        for crd in monitoring:
            ext.delete_custom_resource_definition(crd["metadata"]["name"])


def can_i(kubectl: str, kubeconfig: Path, sa: str, *args: str) -> bool:
    proc = run([kubectl, "--kubeconfig", str(kubeconfig), "auth", "can-i", f"--as={sa}", *args], check=False)
    answer = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert answer in ("yes", "no"), f"can-i {args}: {proc.stdout} {proc.stderr}"
    return answer == "yes"


def assert_can(kubectl: str, kubeconfig: Path, sa: str, allowed: list[list[str]], denied: list[list[str]]) -> None:
    wrong = [f"denied: {' '.join(a)}" for a in allowed if not can_i(kubectl, kubeconfig, sa, *a)]
    wrong += [f"allowed: {' '.join(a)}" for a in denied if can_i(kubectl, kubeconfig, sa, *a)]
    assert wrong == []


def _gone(call: Any, *args: Any) -> bool:
    try:
        call(*args)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_helm_install_cluster_wide_brings_up_the_operator_with_least_privilege_rbac(
        helm: list[str], kubectl: str, cluster: Any, api: Any, crds_installed: list[str], namespaces: Any,
        tmp_path: Path) -> None:
    ns, other = namespaces("ms-helm"), namespaces("ms-other")
    kc = cluster.kubeconfig
    release = "op"
    install = [*helm, "install", release, str(CHART), "--namespace", ns, "--kubeconfig", str(kc), "--wait",
               "--timeout", "120s", "-f",
               str(values_file(tmp_path, {**fake_node_placement(),
                                          "notifications": {"secretNames": ["team-webhook"]}}))]
    out = run(install, timeout_s=240).stdout
    assert "STATUS: deployed" in out
    apps, core, rbac = client.AppsV1Api(api), client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    name = "op-modalscale"
    try:
        deploy = apps.read_namespaced_deployment(name, ns)
        assert deploy.spec.replicas == 2
        wait_for(lambda: (apps.read_namespaced_deployment(name, ns).status.ready_replicas or 0) == 2, 60,
                 "2 ready operator replicas")
        pods = core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/instance=op").items
        assert len(pods) == 2
        for pod in pods:
            assert pod.spec.node_name, f"{pod.metadata.name} not scheduled"
            node = core.read_node(pod.spec.node_name)
            # A KWOK fake node (other tests add fake nodes of other GPU types to the session cluster).
            assert (node.metadata.annotations or {}).get("kwok.x-k8s.io/node") == "fake"
            assert pod.spec.service_account_name == name
            assert pod.status.phase == "Running"
        assert core.read_namespaced_service_account(name, ns).metadata.name == name
        assert rbac.read_cluster_role(name).rules
        assert rbac.read_cluster_role_binding(name).subjects[0].namespace == ns

        sa = f"system:serviceaccount:{ns}:{name}"
        assert_can(kubectl, kc, sa, allowed=[
            ["list", "inferenceservices.modalscale.io", "-A"], ["watch", "budgetpolicies.modalscale.io", "-A"],
            ["get", "inferenceservices.modalscale.io", "-n", other],
            ["patch", "inferenceservices.modalscale.io", "-n", other, "--subresource=status"],
            ["patch", "budgetpolicies.modalscale.io", "-n", other, "--subresource=status"],
            ["create", "deployments.apps", "-n", other], ["patch", "deployments.apps", "-n", other],
            ["get", "configmaps", "-n", other], ["create", "services", "-n", other],
            ["list", "pods", "-n", other], ["get", "persistentvolumeclaims", "-n", other],
            ["list", "horizontalpodautoscalers.autoscaling", "-n", other],
            ["create", "events", "-n", other], ["create", "events.events.k8s.io", "-n", other],
            ["get", "secrets/team-webhook", "-n", other],
            ["create", "clusterkopfpeerings.kopf.dev"], ["list", "clusterkopfpeerings.kopf.dev"],
            ["patch", "clusterkopfpeerings.kopf.dev/op-modalscale"],
            ["watch", "customresourcedefinitions.apiextensions.k8s.io"], ["get", "nodes"],
            ["get", "leases.coordination.k8s.io/real-node-1", "-n", "kube-node-lease"],
        ], denied=[
            ["delete", "namespaces"], ["create", "namespaces"], ["list", "secrets", "-A"],
            ["get", "secrets", "-n", other], ["get", "secrets/other-secret", "-n", other],
            ["delete", "inferenceservices.modalscale.io", "-n", other], ["delete", "secrets", "-n", other],
            ["update", "deployments.apps", "-n", other], ["create", "pods", "-n", other],
            ["patch", "clusterkopfpeerings.kopf.dev/someone-elses-peering"],
            ["list", "leases.coordination.k8s.io", "-n", "kube-node-lease"],
            ["patch", "leases.coordination.k8s.io/real-node-1", "-n", "kube-node-lease"],
            ["create", "customresourcedefinitions.apiextensions.k8s.io"],
            ["escalate", "clusterroles.rbac.authorization.k8s.io"], ["bind", "clusterroles.rbac.authorization.k8s.io"],
            ["impersonate", "serviceaccounts", "-n", other], ["create", "kopfpeerings.kopf.dev", "-n", other],
            ["*", "*"],
        ])
    finally:
        out = run([*helm, "uninstall", release, "--namespace", ns, "--kubeconfig", str(kc), "--wait",
                   "--timeout", "60s"]).stdout
    assert f'release "{release}" uninstalled' in out
    wait_for(lambda: _gone(apps.read_namespaced_deployment, name, ns), 30, "Deployment deleted")
    for call, args in [(core.read_namespaced_service_account, (name, ns)), (rbac.read_cluster_role, (name,)),
                       (rbac.read_cluster_role_binding, (name,)),
                       (core.read_namespaced_service, (f"{name}-metrics", ns)),
                       (core.read_namespaced_config_map, (f"{name}-dashboard", ns))]:
        wait_for(lambda call=call, args=args: _gone(call, *args), 30, f"{call.__name__}{args} deleted")
    assert not can_i(kubectl, kc, f"system:serviceaccount:{ns}:{name}", "list", "inferenceservices.modalscale.io", "-A")


def test_helm_install_namespace_scoped_grants_only_the_watched_namespaces(
        helm: list[str], kubectl: str, cluster: Any, api: Any, crds_installed: list[str], namespaces: Any,
        tmp_path: Path) -> None:
    ns, watched_a, watched_b, unwatched = (namespaces("ms-scoped"), namespaces("watched-a"), namespaces("watched-b"),
                                           namespaces("unwatched"))
    kc = cluster.kubeconfig
    values = {**fake_node_placement(), "config": {"namespaces": [watched_a, watched_b]}, "replicaCount": 2}
    run([*helm, "install", "scoped", str(CHART), "--namespace", ns, "--kubeconfig", str(kc), "--wait",
         "--timeout", "120s", "-f", str(values_file(tmp_path, values))], timeout_s=240)
    rbac = client.RbacAuthorizationV1Api(api)
    name = "scoped-modalscale"
    try:
        assert _gone(rbac.read_cluster_role, name) and _gone(rbac.read_cluster_role_binding, name)
        for w in (watched_a, watched_b):
            assert rbac.read_namespaced_role(name, w).rules
            assert rbac.read_namespaced_role_binding(name, w).subjects[0].namespace == ns
        env = {e.name: e.value for e in client.AppsV1Api(api).read_namespaced_deployment(name, ns)
               .spec.template.spec.containers[0].env}
        assert env["MODALSCALE_NAMESPACES"] == f"{watched_a},{watched_b}"
        sa = f"system:serviceaccount:{ns}:{name}"
        allowed = []
        for w in (watched_a, watched_b):
            allowed += [["list", "inferenceservices.modalscale.io", "-n", w], ["create", "deployments.apps", "-n", w],
                        ["create", "kopfpeerings.kopf.dev", "-n", w],
                        ["patch", f"kopfpeerings.kopf.dev/{name}", "-n", w],
                        ["create", "events", "-n", w]]
        assert_can(kubectl, kc, sa, allowed=allowed, denied=[
            ["list", "inferenceservices.modalscale.io", "-A"],
            ["list", "inferenceservices.modalscale.io", "-n", unwatched],
            ["create", "deployments.apps", "-n", unwatched], ["create", "deployments.apps", "-n", ns],
            ["create", "clusterkopfpeerings.kopf.dev"], ["list", "customresourcedefinitions.apiextensions.k8s.io"],
            ["get", "secrets", "-n", watched_a], ["delete", "namespaces"], ["get", "nodes"],
            ["get", "leases.coordination.k8s.io", "-n", "kube-node-lease"],
        ])
    finally:
        run([*helm, "uninstall", "scoped", "--namespace", ns, "--kubeconfig", str(kc), "--wait", "--timeout", "60s"])
    for w in (watched_a, watched_b):
        wait_for(lambda w=w: _gone(rbac.read_namespaced_role, name, w), 30, f"Role in {w} deleted")


# ------------------------------------------------------------------------------ the operator under the chart's RBAC
@pytest.fixture(scope="module")
def own_cluster(helm: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane of its own (the session's cluster-wide test operator would act on the same objects),
    with the CRDs installed for real by the CRD chart (kopf's peering CRDs included)."""
    c = LocalCluster(tmp_path_factory.mktemp("helm-cluster"), log=lambda _m: None)
    try:
        c.up(nodes=2, gpus_per_node=8, gpu_type="nvidia-l4", real_node=False)  # the machine's node is realnode's
        out = run([*helm, "install", "crds", str(CRD_CHART), "--kubeconfig", str(c.kubeconfig), "--wait",
                   "--timeout", "60s"]).stdout
        assert "STATUS: deployed" in out
        api = c.api_client()
        ext = client.ApiextensionsV1Api(api)
        for crd in ("inferenceservices.modalscale.io", "budgetpolicies.modalscale.io", "clusterkopfpeerings.kopf.dev",
                    "kopfpeerings.kopf.dev"):
            wait_for(lambda crd=crd: any(x.type == "Established" and x.status == "True"
                                         for x in ext.read_custom_resource_definition(crd).status.conditions or []),
                     30, f"{crd} Established")
        api.close()
        yield c
    finally:
        c.down()


def token_kubeconfig(cluster: LocalCluster, kubectl: str, namespace: str, sa: str, path: Path) -> Path:
    """A kubeconfig that authenticates as ``namespace/sa`` with a freshly minted token (TokenRequest API)."""
    token = run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "create", "token", sa, "-n", namespace,
                 "--duration=1h"]).stdout.strip()
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    doc["users"] = [{"name": sa, "user": {"token": token}}]
    doc["contexts"][0]["context"]["user"] = sa
    doc["contexts"][0]["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(doc))
    return path


KOPF_OPTIONAL_SCANS = ('cannot list resource "namespaces" in API group "" at the cluster scope',
                       'cannot watch resource "namespaces" in API group "" at the cluster scope',
                       'cannot list resource "customresourcedefinitions" in API group "apiextensions.k8s.io" '
                       'at the cluster scope',
                       'cannot watch resource "customresourcedefinitions" in API group "apiextensions.k8s.io" '
                       'at the cluster scope')
"""Cluster-scope reads kopf tries even when watching fixed namespaces (its observers of namespaces and CRDs).
A namespace-scoped install grants no cluster scope, so kopf retries them (about a minute of backoff), then logs
a warning and goes on with the listed namespaces and the CRDs found at start-up (kopf's documented fallback).
Setting ``settings.scanning.disabled`` in the operator when MODALSCALE_NAMESPACES is set would skip them."""


def refusals(log: str, allowed: tuple[str, ...] = ()) -> list[str]:
    """Log lines about requests the apiserver refused (403), except those matching ``allowed``."""
    return [line for line in log.splitlines()
            if ("Forbidden" in line or "forbidden" in line) and not any(a in line for a in allowed)]


def wait_logged(op: OperatorProcess, predicate: Any, timeout_s: float, what: str) -> None:
    """``wait_for`` that fails with the operator's refusals and log tail, so a missing permission is named."""
    try:
        wait_for(predicate, timeout_s, what)
    except TimeoutError as exc:
        log = op.log()
        raise AssertionError(f"{exc}\nrefused calls:\n" + "\n".join(refusals(log)[:10])
                             + f"\nlog tail:\n{log[-3000:]}") from None


@pytest.mark.parametrize("scope", ["cluster-wide", "namespace-scoped"])
def test_operator_runs_with_only_the_chart_rbac(helm: list[str], kubectl: str, own_cluster: LocalCluster,
                                                tmp_path: Path, scope: str) -> None:
    """The real operator, authenticated as the chart's ServiceAccount, reconciles an InferenceService to Ready
    (Deployment, Service, status, Events, peering) and evaluates a BudgetPolicy, with no request refused."""
    kc = own_cluster.kubeconfig
    api = own_cluster.api_client()
    core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    suffix = "cw" if scope == "cluster-wide" else "ns"
    ns, workload_ns, release = f"ms-{suffix}", f"apps-{suffix}", f"op{suffix}"
    name = f"{release}-modalscale"
    core.create_namespace({"metadata": {"name": workload_ns}})
    values: dict[str, Any] = {**fake_node_placement(), "pricingCatalog": NONDEFAULT["pricingCatalog"],
                              "notifications": {"secretNames": ["team-webhook"]}}
    if scope == "namespace-scoped":
        values["config"] = {"namespaces": [workload_ns]}
    try:
        run([*helm, "install", release, str(CHART), "--namespace", ns, "--create-namespace", "--kubeconfig", str(kc),
             "--wait", "--timeout", "120s", "-f", str(values_file(tmp_path, values))], timeout_s=240)
        deploy = apps.read_namespaced_deployment(name, ns)
        env = {e.name: e.value for e in deploy.spec.template.spec.containers[0].env}
        catalog = tmp_path / "catalog.yaml"
        catalog.write_text(core.read_namespaced_config_map(f"{name}-pricing", ns).data["catalog.yaml"])
        env["MODALSCALE_PRICING_CATALOG"] = str(catalog)  # the ConfigMap mount, as a local file
        for var in ("MODALSCALE_METRICS_PORT", "MODALSCALE_HEALTH_PORT", "MODALSCALE_RESYNC_INTERVAL_SECONDS"):
            env.pop(var)  # OperatorProcess picks free local ports and a short resync

        op = OperatorProcess(token_kubeconfig(own_cluster, kubectl, ns, name, tmp_path / "sa.kubeconfig"),
                             tmp_path / "operator.log", extra_env=env)
        try:
            op.wait_healthy()
            # The operator created its peering object and wrote its own record into it (create + patch).
            if scope == "cluster-wide":
                def peering() -> Any:
                    return custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name)
            else:
                def peering() -> Any:
                    return custom.get_namespaced_custom_object("kopf.dev", "v1", workload_ns, "kopfpeerings", name)
            # Namespace-scoped: kopf first retries its optional cluster-scope scans for about a minute.
            wait_logged(op, lambda: peering().get("status") or None, 30 if scope == "cluster-wide" else 150,
                        "the operator's peering record")

            isvc = {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
                    "metadata": {"name": "rbac-check", "labels": {"team": "search"}},
                    "spec": {"resources": {"cpu": "1", "memory": "2Gi", "gpu": {"count": 1, "type": "nvidia-l4"}},
                             "scaling": {"mode": "Fixed", "replicas": 2, "minReplicas": 1, "maxReplicas": 4},
                             "gateway": {"enabled": False}}}  # the direct Service; rbac-gateway below has the gateway
            custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", workload_ns, "inferenceservices", isvc)

            def isvc_status() -> dict[str, Any]:
                obj = custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", workload_ns,
                                                          "inferenceservices", "rbac-check")
                return obj.get("status") or {}

            def ready() -> bool:
                return any(c["type"] == "Ready" and c["status"] == "True"
                           for c in isvc_status().get("conditions") or [])

            wait_logged(op, ready, 90, "InferenceService Ready under the chart's RBAC")
            child = apps.read_namespaced_deployment("rbac-check", workload_ns)
            assert child.spec.replicas == 2 and child.metadata.owner_references[0].kind == "InferenceService"
            assert core.read_namespaced_service("rbac-check", workload_ns).spec.ports
            # The override's L4 price reached the operator through the chart's ConfigMap: 2 running replicas x
            # (1 core x 0.031611 + 2 GiB x 0.004237 + 1 L4 x 0.50) = 2 x 0.540085 = 1.08017 -> 1.0802 USD/h.
            wait_logged(op, lambda: isvc_status().get("costUSDPerHour") == "1.0802", 60,
                        "costUSDPerHour from the overridden L4 price")

            budget = yaml.safe_load((REPO / "crds/examples/budgetpolicy-daily.yaml").read_text())
            budget["spec"]["notifications"] = [{"name": "team", "type": "Webhook",
                                                "secretRef": {"name": "team-webhook"}}]
            custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", workload_ns, "budgetpolicies", budget)

            def budget_evaluated() -> bool:
                obj = custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", workload_ns, "budgetpolicies",
                                                          budget["metadata"]["name"])
                status = obj.get("status") or {}
                return status.get("state") in ("Ok", "Warning", "Exceeded") and "spent" in status

            wait_logged(op, budget_evaluated, 90, "BudgetPolicy evaluated under the chart's RBAC")

            # The request gateway: its Role grants what the operator must hold itself (RBAC escalation check), and
            # turning it off deletes what it made.
            gateway = {**isvc, "metadata": {"name": "rbac-gateway"},
                       "spec": {**isvc["spec"], "gateway": {"enabled": True}, "placement": fake_node_placement()}}
            custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", workload_ns, "inferenceservices",
                                                   gateway)

            def network_policy() -> bool:
                names = [n.metadata.name for n in client.NetworkingV1Api(api).list_namespaced_network_policy(
                    workload_ns).items]
                return "rbac-gateway-replicas" in names

            wait_logged(op, network_policy, 90, "the gateway's objects and NetworkPolicy under the chart's RBAC")
            assert client.RbacAuthorizationV1Api(api).read_namespaced_role("rbac-gateway-gateway", workload_ns).rules
            custom.patch_namespaced_custom_object("modalscale.io", "v1alpha1", workload_ns, "inferenceservices",
                                                  "rbac-gateway", {"spec": {"gateway": {"enabled": False}}})
            wait_logged(op, lambda: not network_policy(), 60, "the gateway's objects deleted under the chart's RBAC")
            log = op.log()
            if scope == "cluster-wide":
                assert refusals(log) == [] and "Not enough permissions" not in log, log[-4000:]
            else:
                assert refusals(log, KOPF_OPTIONAL_SCANS) == [], log[-4000:]
        finally:
            op.stop()
        run([*helm, "uninstall", release, "--namespace", ns, "--kubeconfig", str(kc), "--wait", "--timeout", "60s"])
    finally:
        api.close()


def test_crd_chart_upgrade_applies_crd_changes_and_uninstall_keeps_them(helm: list[str], own_cluster: LocalCluster,
                                                                       tmp_path: Path) -> None:
    """CRDs are templates, so `helm upgrade` changes them (Helm's crds/ folder is never upgraded), and the keep
    policy leaves them, and the objects in them, in place on uninstall."""
    import shutil

    kc = own_cluster.kubeconfig
    changed = tmp_path / "modalscale-crds"
    shutil.copytree(CRD_CHART, changed)
    path = changed / "files" / "crds" / "budgetpolicies.modalscale.io.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["versions"][0]["additionalPrinterColumns"].append(
        {"name": "Currency", "type": "string", "jsonPath": ".spec.limit.currency"})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    api = own_cluster.api_client()
    ext = client.ApiextensionsV1Api(api)

    def columns() -> list[str]:
        crd = ext.read_custom_resource_definition("budgetpolicies.modalscale.io")
        return [c.name for c in crd.spec.versions[0].additional_printer_columns]

    try:
        assert "Currency" not in columns()
        run([*helm, "upgrade", "crds", str(changed), "--kubeconfig", str(kc), "--wait", "--timeout", "60s"])
        assert columns()[-1] == "Currency"
        run([*helm, "upgrade", "crds", str(CRD_CHART), "--kubeconfig", str(kc), "--wait", "--timeout", "60s"])
        assert "Currency" not in columns()
        out = run([*helm, "uninstall", "crds", "--kubeconfig", str(kc), "--wait", "--timeout", "60s"])
        assert "These resources were kept due to the resource policy" in out.stdout + out.stderr
        for name in ("inferenceservices.modalscale.io", "budgetpolicies.modalscale.io", "kopfpeerings.kopf.dev"):
            assert ext.read_custom_resource_definition(name).metadata.deletion_timestamp is None
    finally:
        api.close()


# ---------------------------------------------------------------------------------------------- the operator in a pod
@pytest.fixture(scope="module")
def operator_image(real_node_cluster: Any) -> Any:
    """The operator image built from Dockerfile.operator (cached by its inputs) and imported into the session
    cluster's real node under the chart's default name."""
    from modalscale.devenv.images import build_images, import_into_cluster

    cluster = real_node_cluster
    image = build_images(["operator"], log=lambda m: print(m, flush=True))[0]
    print(f"operator image {image.full_ref}: {'cached' if image.cached else f'built in {image.build_s:.1f} s'}, "
          f"{image.size_bytes / 1e6:.0f} MB of layers (gzip)")
    seconds = import_into_cluster(image, cluster.workdir, log=lambda m: print(m, flush=True))
    print(f"operator image imported into the real node's containerd in {seconds:.1f} s")
    return image


def test_operator_pod_installed_by_helm_on_the_real_node_reconciles_with_only_the_chart_rbac(
        helm: list[str], kubectl: str, cluster: Any, api: Any, crds_installed: list[str], namespaces: Any,
        tmp_path: Path, operator_image: Any) -> None:
    """A plain `helm install` (default image, 2 replicas with peering, the chart's ServiceAccount, RBAC and
    locked-down securityContext) with README's `-f charts/modalscale/values-local.yaml` (the real node's placement):
    both operator pods run in containers on the real node, and the active one reconciles an InferenceService to
    Ready and evaluates a BudgetPolicy, with no request refused. (In a whole-suite run the session's test operator
    may act on the same objects too; the operator pods' own logs show that they handled them.)"""
    from modalscale.devenv.realnode import NODE_TYPE_LABEL, NODE_TYPE_REAL

    ns, workload = namespaces("ms-pod"), namespaces("apps-pod")
    # README's release name: the chart's Service is then modalscale-metrics, whose Service-link variables
    # (MODALSCALE_METRICS_PORT_9090_TCP, ...) crash-looped both operator pods until the chart turned links off.
    kc, release = cluster.kubeconfig, "modalscale"
    name = release  # the chart's full name: the release name, which holds the chart's
    core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    values = {"config": {"resyncIntervalSeconds": 10}}
    started = time.monotonic()
    out = run([*helm, "install", release, str(CHART), "--namespace", ns, "--kubeconfig", str(kc), "--wait",
               "--timeout", "300s", "-f", str(CHART / "values-local.yaml"), "-f", str(values_file(tmp_path, values))],
              timeout_s=400).stdout
    assert "STATUS: deployed" in out
    print(f"helm install --wait: 2 operator pods Ready on the real node in {time.monotonic() - started:.1f} s")

    def pod_logs() -> dict[str, str]:
        pods = core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/instance={release}").items
        return {p.metadata.name: core.read_namespaced_pod_log(p.metadata.name, ns, container="operator")
                for p in pods}

    def wait_pods(predicate: Any, timeout_s: float, what: str) -> None:
        try:
            wait_for(predicate, timeout_s, what)
        except TimeoutError as exc:
            logs = pod_logs()
            raise AssertionError(f"{exc}\n" + "\n".join(f"--- {n}\n{log[-3000:]}" for n, log in logs.items())) from None

    try:
        pods = core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/instance={release}").items
        assert len(pods) == 2
        for pod in pods:
            node = core.read_node(pod.spec.node_name)
            assert node.metadata.labels.get(NODE_TYPE_LABEL) == NODE_TYPE_REAL, pod.spec.node_name
            assert pod.spec.service_account_name == name and pod.status.phase == "Running"
            status = pod.status.container_statuses[0]
            assert status.ready and status.image.endswith(operator_image.ref), status.image
            assert pod.spec.containers[0].security_context.read_only_root_filesystem is True
        # In the container: a non-root uid, a read-only root and the ServiceAccount's token.
        probe = run([kubectl, "--kubeconfig", str(kc), "exec", "-n", ns, pods[0].metadata.name, "-c", "operator",
                     "--", "python3", "-c",
                     "import os, pathlib\nprint(os.getuid())\ntry:\n    pathlib.Path('/x').write_text('x')\n"
                     "except OSError as e:\n    print(e.errno)\n"
                     "print(pathlib.Path('/var/run/secrets/kubernetes.io/serviceaccount/token').is_file())"]).stdout
        assert probe.split() == [str(VALUES_UID), "30", "True"], probe  # 30: EROFS

        isvc = {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
                "metadata": {"name": "pod-check", "labels": {"team": "search"}},
                "spec": {"resources": {"cpu": "1", "memory": "2Gi", "gpu": {"count": 1, "type": "nvidia-l4"}},
                         "scaling": {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 2}}}
        custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", workload, "inferenceservices", isvc)

        def isvc_ready() -> bool:
            obj = custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", workload, "inferenceservices",
                                                      "pod-check")
            status = obj.get("status") or {}
            return status.get("observedGeneration") == obj["metadata"]["generation"] and any(
                c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])

        wait_pods(isvc_ready, 180, "InferenceService Ready, reconciled by the operator pod")
        assert apps.read_namespaced_deployment("pod-check", workload).metadata.owner_references[0].kind == \
            "InferenceService"

        budget = yaml.safe_load((REPO / "crds/examples/budgetpolicy-daily.yaml").read_text())
        budget["spec"].pop("notifications", None)
        custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", workload, "budgetpolicies", budget)

        def budget_evaluated() -> bool:
            obj = custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", workload, "budgetpolicies",
                                                      budget["metadata"]["name"])
            status = obj.get("status") or {}
            return status.get("state") in ("Ok", "Warning", "Exceeded") and "spent" in status

        wait_pods(budget_evaluated, 180, "BudgetPolicy evaluated by the operator pod")
        # The active pod wrote both statuses itself (the operator's one writer logs every write), no pod was refused.
        logs = pod_logs()
        handled = [n for n, log in logs.items()
                   if f"Wrote kind=inferenceservices verb=patch-status namespace={workload} name=pod-check" in log
                   and f"Wrote kind=budgetpolicies verb=patch-status namespace={workload} "
                       f"name={budget['metadata']['name']}" in log]
        assert handled, "\n".join(f"--- {n}\n{log[-3000:]}" for n, log in logs.items())
        for pod_name, log in logs.items():
            assert refusals(log) == [] and "Not enough permissions" not in log, f"{pod_name}:\n{log[-4000:]}"
    finally:
        run([*helm, "uninstall", release, "--namespace", ns, "--kubeconfig", str(kc), "--wait", "--timeout", "120s"],
            timeout_s=200)
