"""Settings that the operator writes into Kubernetes objects (label keys and values, object names) are held to
Kubernetes' own syntax at start-up, so a bad one stops the operator naming the variable, not the API server later
refusing each object it writes (reported to users as a fault of their spec)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from modalscale.api.names import LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN, is_label_key, is_label_value
from modalscale.operator.settings import ConfigError, Settings

REPO = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((REPO / "charts" / "modalscale" / "values.schema.json").read_text())

LABELS = [
    ("app.kubernetes.io/name=prometheus", True), ("app=prom", True), ("team=", True), ("a=b,c.d/e_f=G-h.1", True),
    ("x" * 63 + "=" + "y" * 63, True),
    ("bad key!=x y", False), ("team/app!=prom@x", False), ("app=prom@x", False), ("-app=x", False),
    ("app=-x", False), ("a/b/c=x", False), ("Example.com/app=x", False), ("/app=x", False), ("app/=x", False),
    ("x" * 64 + "=y", False), ("app=" + "y" * 64, False), ("a..b/app=x", False),
]
"""(``MODALSCALE_METRICS_SCRAPER_LABELS``, whether Kubernetes takes every pair as a label)."""


@pytest.mark.parametrize(("raw", "valid"), LABELS, ids=[r[:20] for r, _ in LABELS])
def test_the_scraper_labels_are_taken_exactly_when_kubernetes_takes_them_as_labels(raw: str, valid: bool) -> None:
    """Found by a user trial: 'bad key!=x y' was accepted, and every gateway-enabled InferenceService then went
    Ready=False/InvalidSpec ('fix spec') when the API server refused its NetworkPolicy's podSelector."""
    try:
        labels = Settings.from_env({"MODALSCALE_METRICS_SCRAPER_LABELS": raw}).metrics_scraper_labels
        took = True
    except ConfigError as exc:
        took = False
        text = str(exc)
        assert "MODALSCALE_METRICS_SCRAPER_LABELS" in text
        assert "label" in text and "e.g. app.kubernetes.io/name=prometheus" in text
    assert took is valid, raw
    if valid:
        assert all(is_label_key(k) and is_label_value(v) for k, v in labels.items())


def test_a_bad_scraper_label_names_the_key_or_value_and_the_syntax() -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"MODALSCALE_METRICS_SCRAPER_LABELS": "bad key!=x y,app=ok"})
    text = str(err.value)
    assert "MODALSCALE_METRICS_SCRAPER_LABELS: 'bad key!' is not a label key" in text
    assert "'x y' is not a label value" in text
    assert "63 characters" in text


@pytest.mark.parametrize(("raw", "valid"), LABELS, ids=[r[:20] for r, _ in LABELS])
def test_the_chart_schema_takes_exactly_the_scraper_labels_the_operator_takes(raw: str, valid: bool) -> None:
    node = SCHEMA["properties"]["config"]["properties"]["metricsScraperLabels"]
    assert (re.search(node["pattern"], raw) is not None and len(raw) <= node["maxLength"]) is valid, raw


def test_the_chart_schema_pattern_is_built_from_the_label_patterns() -> None:
    pair = f"{LABEL_KEY_PATTERN[1:-1]}={LABEL_VALUE_PATTERN[1:-1]}"
    node = SCHEMA["properties"]["config"]["properties"]["metricsScraperLabels"]
    assert node["pattern"] == f"^({pair}(,{pair})*)?$"


NAMES = [("modalscale", True), ("ms.peering-1", True), ("0", True), ("x" * 253, True),
         ("Bad Name!", False), ("a..b", False), ("-a", False), ("a-", False), ("Modalscale", False), ("a_b", False),
         ("é", False), ("x" * 254, False)]
"""(name, whether Kubernetes takes it as an object name: a DNS-1123 subdomain)."""


@pytest.mark.parametrize(("name", "valid"), NAMES, ids=[n[:12] for n, _ in NAMES])
def test_the_peering_name_is_taken_exactly_when_kubernetes_takes_it_as_an_object_name(name: str, valid: bool) -> None:
    """Found by a user trial: 'Bad Name!' was accepted, and kopf then failed its start-up activity every 60 s with a
    422 from the API server (the KopfPeering could not be created) and the operator never handled anything."""
    try:
        took = Settings.from_env({"MODALSCALE_PEERING_NAME": name}).peering_name == name
    except ConfigError as exc:
        took = False
        assert f"MODALSCALE_PEERING_NAME={name!r}: not an object name" in str(exc)
        assert "e.g. modalscale" in str(exc)
    assert took is valid


NAMESPACES = [("default", True), ("team-a", True), ("0", True), ("x" * 63, True),
              ("Bad NS", False), ("-a", False), ("a-", False), ("a.b", False), ("é", False), ("x" * 64, False)]
"""(namespace, whether Kubernetes takes it as a namespace name: a DNS-1123 label)."""


@pytest.mark.parametrize(("ns", "valid"), NAMESPACES, ids=[n[:12] for n, _ in NAMESPACES])
@pytest.mark.parametrize("variable", ["MODALSCALE_NAMESPACES", "MODALSCALE_BUDGET_ADMIN_NAMESPACES"])
def test_the_namespace_settings_take_exactly_the_names_kubernetes_takes(variable: str, ns: str, valid: bool) -> None:
    """'-a', 'a-' and 'é' were taken (a hand-written check: '-' read as a letter, str.isalnum and str.islower take
    non-ASCII letters), and watched nothing, or an admin namespace that cannot exist."""
    try:
        settings = Settings.from_env({variable: f"{ns},default"})
        took = ns in (settings.namespaces if variable == "MODALSCALE_NAMESPACES" else settings.budget_admin_namespaces)
    except ConfigError as exc:
        took = False
        assert f"{variable}: {ns!r} is not a namespace name" in str(exc)
    assert took is valid
