"""One rule for the name of a Kubernetes object the project is given (a Secret, ConfigMap, PVC, ServiceAccount or
KopfPeering): Kubernetes' DNS-1123 subdomain (``IsDNS1123Subdomain`` of k8s.io/apimachinery: dot-separated labels
``[a-z0-9]([-a-z0-9]*[a-z0-9])?``, at most 253 characters), the constants of ``modalscale.api.names``.

The operator's settings (``MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS``), the chart schema (``imagePullSecrets``,
``serviceAccount.name``, ``config.peeringName``, ``pricingCatalog.existingConfigMap``), the CRDs (``secretRef.name``,
``configMap.name``, ``pvc.claimName``, ``costModelRef.name``) and the spec parsers all take the same names: a name the
chart accepts never stops the operator at start-up, and one Kubernetes refuses (``a..b``) fails ``helm install``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from modalscale.api.budgetpolicy import InvalidBudgetSpec, parse_budget_spec
from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import parse_spec
from modalscale.api.names import DNS_SUBDOMAIN_MAX_CHARS, DNS_SUBDOMAIN_PATTERN
from modalscale.devenv.kube import load_crds
from modalscale.operator.settings import ConfigError, Settings
from tests.factories import budget_policy

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "charts" / "modalscale" / "values.schema.json").read_text())
OPTIONAL = f"^(|{DNS_SUBDOMAIN_PATTERN[1:-1]})$"
"""The chart's pattern of a name that may be empty (the chart then makes one)."""

NAMES = [
    ("regcred", True), ("mirror.creds", True), ("0", True), ("a-b.c-d.e", True), ("x" * 253, True),
    ("a..b", False), ("a.-b", False), ("a-.b", False), (".a", False), ("a.", False), ("-a", False),
    ("Regcred", False), ("reg_cred", False), ("x" * 254, False),
]
"""(name, whether Kubernetes takes it as an object name)."""


def _crd_pattern(kind: str, path: tuple[str, ...]) -> Any:
    node = next(c for c in load_crds(REPO / "crds") if c["spec"]["names"]["kind"] == kind)
    node = node["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for step in path:
        node = node["items"] if step == "[]" else node["properties"][step]
    return node["pattern"], node["maxLength"]


def test_the_chart_schema_and_the_crds_use_the_one_pattern_and_bound() -> None:
    defs, props = SCHEMA["definitions"], SCHEMA["properties"]
    assert (defs["dnsSubdomain"]["pattern"], defs["dnsSubdomain"]["maxLength"]) == (DNS_SUBDOMAIN_PATTERN,
                                                                                    DNS_SUBDOMAIN_MAX_CHARS)
    assert props["imagePullSecrets"]["items"]["properties"]["name"] == {"$ref": "#/definitions/dnsSubdomain"}
    for node in (props["serviceAccount"]["properties"]["name"], props["config"]["properties"]["peeringName"],
                 props["pricingCatalog"]["properties"]["existingConfigMap"]):
        assert (node["pattern"], node["maxLength"]) == (OPTIONAL, DNS_SUBDOMAIN_MAX_CHARS)
    spec = ("spec",)
    for kind, path in (("BudgetPolicy", (*spec, "notifications", "[]", "secretRef", "name")),
                       ("InferenceService", (*spec, "model", "configMap", "name")),
                       ("InferenceService", (*spec, "model", "pvc", "claimName")),
                       ("InferenceService", (*spec, "model", "costModelRef", "name")),
                       ("InferenceService", (*spec, "serviceAccountName")),
                       ("InferenceService", (*spec, "imagePullSecrets", "[]", "name"))):
        assert _crd_pattern(kind, path) == (DNS_SUBDOMAIN_PATTERN, DNS_SUBDOMAIN_MAX_CHARS), path


@pytest.mark.parametrize(("name", "valid"), NAMES, ids=[n[:12] + (f"..{len(n)}" if len(n) > 12 else "")
                                                         for n, _ in NAMES])
def test_the_chart_the_settings_and_the_parsers_take_exactly_the_names_kubernetes_takes(name: str,
                                                                                        valid: bool) -> None:
    item = SCHEMA["definitions"]["dnsSubdomain"]
    assert (re.search(item["pattern"], name) is not None and len(name) <= item["maxLength"]) is valid
    optional = SCHEMA["properties"]["config"]["properties"]["peeringName"]["pattern"]
    assert (re.search(optional, name) is not None and len(name) <= DNS_SUBDOMAIN_MAX_CHARS) is valid
    try:
        Settings.from_env({"MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS": name})
        settings_took = True
    except ConfigError as exc:
        assert "MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS" in str(exc)
        settings_took = False
    assert settings_took is valid
    policy = budget_policy(notifications=[{"name": "team", "type": "Slack", "secretRef": {"name": name}}])
    try:
        parse_budget_spec(policy["spec"])
        budget_took = True
    except InvalidBudgetSpec as exc:
        assert "secretRef.name" in str(exc)
        budget_took = False
    assert budget_took is valid
    try:
        parse_spec({"model": {"source": "ConfigMap", "name": "m", "configMap": {"name": name}}})
        isvc_took = True
    except InvalidSpec as exc:
        assert "spec.model.configMap" in str(exc)
        isvc_took = False
    assert isvc_took is valid
    for field, extra in (("spec.serviceAccountName", {"serviceAccountName": name}),
                         ("spec.imagePullSecrets[0].name", {"imagePullSecrets": [{"name": name}]})):
        try:
            parse_spec({"model": {"source": "BuiltIn", "name": "m"}, **extra})
            took = True
        except InvalidSpec as exc:
            assert field in str(exc)
            took = False
        assert took is valid, field
