"""The Grafana dashboard, the kube-state-metrics config and the showback recording rules shipped by the chart: the
required panels exist, every series they query is one that the operator, the runtime, the gateway, Triton, the
chart's own kube-state-metrics config or its recording rules export, and every series the rules read is exported
by the operator or the gateway."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from modalscale.costmodel.showback import PRICED_REQUESTS_MATCHER
from modalscale.gateway.metrics import GatewayMetrics
from modalscale.operator.autoscale.metrics import AutoscalerMetrics
from modalscale.operator.budget.history import BurnGauges
from modalscale.operator.metrics import OperatorMetrics
from modalscale.runtime.model import metrics as runtime_metrics

CHART = Path(__file__).resolve().parents[2] / "charts" / "modalscale"
DASHBOARD = json.loads((CHART / "files" / "dashboard.json").read_text())
KSM = yaml.safe_load((CHART / "files" / "kube-state-metrics-crs.yaml").read_text())
SHOWBACK_RULES = yaml.safe_load((CHART / "files" / "showback-rules.yaml").read_text())
CRDS = Path(__file__).resolve().parents[2] / "crds"

TRITON_SERIES = {"nv_inference_request_success", "nv_inference_request_duration_us", "nv_inference_request_summary_us"}
"""Triton's documented metric names the dashboard uses (Triton metrics docs; the summary needs
``--metrics-config summary_latencies=true``)."""


def _series(name: str, kind: str) -> set[str]:
    if kind == "counter":
        return {name if name.endswith("_total") else name + "_total"}
    if kind == "histogram":
        return {name + s for s in ("_bucket", "_sum", "_count")}
    return {name}


def operator_series() -> set[str]:
    """Series on the operator's registry: its own metrics and the autoscaler's (registered on the same one)."""
    registry = OperatorMetrics().registry
    AutoscalerMetrics(registry)
    out: set[str] = set()
    for family in registry.collect():
        out |= _series(family.name, family.type)
    return out


def registry_series(registry: CollectorRegistry) -> set[str]:
    out: set[str] = set()
    for family in registry.collect():
        out |= _series(family.name, family.type)
    return out


def burn_gauge_series() -> set[str]:
    """The ledger's per-service gauges every BudgetPolicy evaluation exports on the operator's /metrics."""
    registry = CollectorRegistry()
    BurnGauges(registry)
    return registry_series(registry)


def gateway_series() -> set[str]:
    return registry_series(GatewayMetrics(CollectorRegistry()).registry)


def recorded_series() -> list[str]:
    """The showback rule file's record names, in evaluation order."""
    return [r["record"] for g in SHOWBACK_RULES["groups"] for r in g["rules"]]


def runtime_series() -> set[str]:
    names = {v for k, v in vars(runtime_metrics).items() if k.isupper() and isinstance(v, str)
             and v.startswith("modalscale_")}
    return set().union(*(_series(n, "counter" if n.endswith("_total") else "histogram") for n in names))


def ksm_series() -> set[str]:
    return {f"{r['metricNamePrefix']}_{m['name']}" for r in KSM["spec"]["resources"] for m in r["metrics"]}


def queried_series(expr: str) -> set[str]:
    """Metric names in a PromQL expression (label matchers and grouping labels removed first)."""
    bare = re.sub(r"\{[^}]*\}", "", expr)
    bare = re.sub(r"\b(by|without)\s*\([^)]*\)", "", bare)
    return set(re.findall(r"\b((?:modalscale|nv|kube)_[a-zA-Z0-9_]+|modalscale:[a-zA-Z0-9_:]+)", bare))


def targets() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in DASHBOARD["panels"] for t in p["targets"]]


def test_dashboard_has_the_required_panels() -> None:
    titles = {p["title"] for p in DASHBOARD["panels"]}
    assert {"Replicas", "Desired vs actual replicas", "p95 latency vs SLO", "Spend vs budget",
            "Scaling decisions"} <= titles


@pytest.mark.parametrize(("title", "expr"), targets(), ids=[f"{t}:{i}" for i, (t, _) in enumerate(targets())])
def test_every_queried_series_is_exported(title: str, expr: str) -> None:
    known = (operator_series() | runtime_series() | ksm_series() | TRITON_SERIES | gateway_series()
             | set(recorded_series()))
    used = queried_series(expr)
    assert used, f"{title}: no metric found in {expr!r}"
    assert used <= known, f"{title}: not exported by anything: {sorted(used - known)}"


def autoscaler_labels() -> dict[str, set[str]]:
    """Series of ``AutoscalerMetrics`` -> the label names they carry (from one recorded decision)."""
    from modalscale.api.isvc_status import ScalerState
    from modalscale.autoscaler.policy import Decision, Reason, ScalingMode

    registry = CollectorRegistry()
    m = AutoscalerMetrics(registry)
    m.record("ml", "vc", Decision(2, True, Reason.STEADY, "m", {"offered_load_erlangs": 1.0, "text_rps": 1.0,
                                                                  "text_service_ms": 10.0}, ScalerState(),
                                  ScalingMode.PREDICTIVE), True, True, 0.5)
    out: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


@pytest.mark.parametrize(("title", "expr"), [t for t in targets() if "modalscale_autoscaler_" in t[1]])
def test_the_autoscalers_series_are_selected_and_grouped_by_labels_they_carry(title: str, expr: str) -> None:
    """The autoscaler's series carry ``inferenceservice`` (not ``name``) and ``stage`` (front, image-encoder)."""
    labels = autoscaler_labels()
    for metric, matchers in re.findall(r"(modalscale_autoscaler_[a-z_]+)\{([^}]*)\}", expr):
        used = set(re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)", matchers))
        assert used <= labels[metric], f"{title}: {metric} has no label {sorted(used - labels[metric])}"
    grouped = {g.strip() for by in re.findall(r"\bby\s*\(([^)]*)\)", expr) for g in by.split(",")}
    every = set().union(*(labels[m] for m in queried_series(expr) if m in labels))
    assert grouped <= every, f"{title}: grouped by {sorted(grouped - every)}, which no series carries"


def test_series_extraction_ignores_labels_and_grouping() -> None:
    expr = 'sum by (namespace, kube_x) (rate(modalscale_requests_total{namespace=~"nv_foo"}[5m]))'
    assert queried_series(expr) == {"modalscale_requests_total"}


def test_dashboard_has_the_showback_panels_on_the_recorded_series() -> None:
    exprs = {title: " ".join(e for t, e in targets() if t == title) for title, _ in targets()}
    spend = exprs["Showback: spend per tenant and modality"]
    assert "modalscale:showback_usd_per_hour" in spend and "modalscale:showback_idle_usd_per_hour" in spend
    assert "modalscale:showback_usd_per_request" in exprs["Showback: USD per request"]
    assert "modalscale:showback_idle_usd_per_hour" in exprs["Showback over the time range (USD)"]


def test_showback_rules_read_only_exported_series_and_earlier_records() -> None:
    exported = burn_gauge_series() | gateway_series()
    defined: set[str] = set()
    names = recorded_series()
    assert len(names) == len(set(names)), "a series recorded twice"
    for rule in (r for g in SHOWBACK_RULES["groups"] for r in g["rules"]):
        used = queried_series(rule["expr"])
        assert used, rule
        # A rule reads raw series that the operator or gateway export, or series recorded before it in its group
        # (rules of a group are evaluated in order, so it sees this evaluation's values).
        assert used <= exported | defined, f"{rule['record']}: unknown {sorted(used - exported - defined)}"
        defined.add(rule["record"])
    assert {"modalscale_budget_service_burn_usd_per_hour", "modalscale_gateway_service_seconds_total"} <= exported
    assert {"modalscale:showback_usd_per_hour", "modalscale:showback_idle_usd_per_hour",
            "modalscale:showback_usd_per_request"} <= defined


def test_showback_usd_per_request_rule_leaves_out_requests_the_gateway_refused() -> None:
    """The rule divides by the same requests as the CLI: refused ones (429, 503, RESOURCE_EXHAUSTED) cost no
    replica time (``costmodel.showback.PRICED_REQUESTS_MATCHER``)."""
    (rule,) = [r for g in SHOWBACK_RULES["groups"] for r in g["rules"]
               if r["record"] == "modalscale:showback_usd_per_request"]
    assert f"modalscale_gateway_requests_total{{{PRICED_REQUESTS_MATCHER}}}[5m]" in rule["expr"], rule["expr"]
    assert PRICED_REQUESTS_MATCHER == 'modality!="none",code!~"429|503|RESOURCE_EXHAUSTED"'


def test_series_extraction_finds_recorded_names() -> None:
    expr = 'modalscale:showback_usd_per_hour{tenant="a"} / on (namespace) modalscale_x_total'
    assert queried_series(expr) == {"modalscale:showback_usd_per_hour", "modalscale_x_total"}


def test_operator_and_runtime_series_cover_the_decision_and_request_metrics() -> None:
    assert {"modalscale_scaling_decisions_total", "modalscale_autoscaler_desired_replicas"} <= operator_series()
    assert "modalscale_requests_total" in runtime_series()
    assert "modalscale_stage_compute_seconds_bucket" in runtime_series()


def test_panels_use_the_datasource_variable_and_unique_ids_and_grid() -> None:
    variables = {v["name"] for v in DASHBOARD["templating"]["list"]}
    assert {"datasource", "namespace", "inferenceservice"} <= variables
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    for p in DASHBOARD["panels"]:
        assert p["datasource"]["uid"] == "${datasource}"
        assert 0 <= p["gridPos"]["x"] and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
    cells = {(p["gridPos"]["x"], p["gridPos"]["y"]) for p in DASHBOARD["panels"]}
    assert len(cells) == len(ids), "two panels share a grid position"


def _crd_schema(name: str) -> dict:
    return yaml.safe_load((CRDS / f"{name}.modalscale.io.yaml").read_text())["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"]


def _has_path(schema: dict, path: list[str]) -> bool:
    node = schema
    for part in path:
        node = (node.get("properties") or {}).get(part)
        if node is None:
            return False
    return True


def test_kube_state_metrics_paths_exist_in_the_crds() -> None:
    kinds = {"InferenceService": _crd_schema("inferenceservices"), "BudgetPolicy": _crd_schema("budgetpolicies")}
    for resource in KSM["spec"]["resources"]:
        schema = kinds[resource["groupVersionKind"]["kind"]]
        assert resource["groupVersionKind"]["group"] == "modalscale.io"
        assert resource["groupVersionKind"]["version"] == "v1alpha1"
        for metric in resource["metrics"]:
            path = metric["each"]["gauge"]["path"]
            assert _has_path(schema, path), f"{resource['metricNamePrefix']}_{metric['name']}: no field {path}"
        for label, path in resource["labelsFromPath"].items():
            assert path[0] == "metadata" or _has_path(schema, path), f"label {label}: no field {path}"
