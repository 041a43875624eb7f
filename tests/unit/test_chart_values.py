"""values.yaml conventions of the operator chart: camelCase keys, a comment starting with each key's name,
the documented defaults, and config.* keys that the operator's Settings actually reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from modalscale.operator.settings import Settings

CHART = Path(__file__).resolve().parents[2] / "charts" / "modalscale"
VALUES_TEXT = (CHART / "values.yaml").read_text()
VALUES = yaml.safe_load(VALUES_TEXT)

PASS_THROUGH = {"resources", "podSecurityContext", "securityContext", "podAnnotations", "podLabels", "nodeSelector",
                "tolerations", "affinity", "annotations", "labels", "overrides", "imagePullSecrets",
                "topologySpreadConstraints"}
"""Keys whose contents are Kubernetes objects or free maps handed through unchanged (their sub-keys are not
chart values)."""

CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")


def keys_with_comments(text: str) -> list[tuple[str, str | None]]:
    """(dotted key, first line of the comment block right above it or None) for every chart value key."""
    out: list[tuple[str, str | None]] = []
    stack: list[tuple[int, str]] = []
    comment: list[str] = []
    skip_below: int | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            comment = []
            continue
        indent = len(line) - len(line.lstrip())
        if stripped.startswith("#"):
            comment.append(stripped)
            continue
        if skip_below is not None and indent > skip_below:
            comment = []
            continue
        skip_below = None
        m = re.match(r"^([A-Za-z0-9_.-]+):", stripped)
        if not m or stripped.startswith("-"):
            comment = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = m.group(1)
        dotted = ".".join([k for _, k in stack] + [key])
        out.append((dotted, comment[0] if comment else None))
        comment = []
        stack.append((indent, key))
        if key in PASS_THROUGH:
            skip_below = indent
    return out


def test_every_value_key_has_a_comment_starting_with_its_name() -> None:
    found = keys_with_comments(VALUES_TEXT)
    assert len(found) > 40
    missing = [k for k, c in found if c is None or not c.startswith(f"# {k} --")]
    assert missing == []


def test_every_value_key_is_camel_case() -> None:
    bad = [k for k, _ in keys_with_comments(VALUES_TEXT) if not all(CAMEL.match(p) for p in k.split("."))]
    assert bad == []


def test_comment_scanner_finds_nested_keys_and_flags_a_missing_comment() -> None:
    text = "# a -- A.\na:\n  # a.b -- B.\n  b: 1\n  c: 2\nresources:\n  limits: {cpu: 1}\n"
    assert keys_with_comments(text) == [("a", "# a -- A."), ("a.b", "# a.b -- B."), ("a.c", None),
                                        ("resources", None)]


def test_defaults_are_two_replicas_cluster_wide_with_rbac_and_a_service_account() -> None:
    assert VALUES["replicaCount"] == 2
    assert VALUES["config"]["standalone"] is False
    assert VALUES["config"]["namespaces"] == []
    assert VALUES["rbac"]["create"] is True
    assert VALUES["serviceAccount"] == {"create": True, "name": "", "annotations": {}}
    assert VALUES["metrics"]["serviceMonitor"]["enabled"] is False
    assert VALUES["notifications"]["secretNames"] == []


def test_default_security_context_is_locked_down() -> None:
    sc, pod = VALUES["securityContext"], VALUES["podSecurityContext"]
    assert sc["runAsNonRoot"] is True and pod["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["runAsUser"] == pod["runAsUser"] != 0


def _env_name(config_key: str) -> str:
    return "MODALSCALE_" + re.sub(r"(?<!^)(?=[A-Z])", "_", config_key).upper()


def test_each_config_key_is_a_setting_the_operator_reads() -> None:
    def text(v: object) -> str:
        return ",".join(map(str, v)) if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v)

    env = {_env_name(k): text(v) for k, v in VALUES["config"].items()}
    assert "MODALSCALE_RESYNC_INTERVAL_SECONDS" in env and "MODALSCALE_PROMETHEUS_URL" in env
    # Settings.from_env rejects unknown MODALSCALE_* names and bad values.
    settings = Settings.from_env(env)
    assert settings.resync_interval_s == 300.0 and settings.standalone is False
    template = (CHART / "templates" / "deployment.yaml").read_text()
    assert [name for name in env if f"name: {name}\n" not in template] == []
    assert "name: MODALSCALE_PRICING_CATALOG\n" in template


# Settings the chart sets another way, or that make no sense in a pod.
_NOT_CHART_VALUES = {
    "MODALSCALE_PRICING_CATALOG": "set by the chart to its pricing ConfigMap's mount (pricing.* values)",
    "MODALSCALE_GATEWAY_IMAGE": "set by the chart to the operator's own image (image.* values)",
    "MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS": "set by the chart to the names of imagePullSecrets (the gateway pods pull "
                                             "the operator's image with them)",
}


def test_every_operator_setting_is_a_chart_value_or_set_by_the_chart() -> None:
    from modalscale.operator.settings import SETTINGS_ENV

    from_values = {_env_name(k) for k in VALUES["config"]}
    assert sorted(SETTINGS_ENV - from_values - set(_NOT_CHART_VALUES)) == []
    assert set(_NOT_CHART_VALUES) <= SETTINGS_ENV


def test_config_defaults_equal_the_operator_defaults() -> None:
    defaults = Settings()
    cfg = VALUES["config"]
    assert cfg["resyncIntervalSeconds"] == defaults.resync_interval_s
    assert cfg["conflictHoldSeconds"] == defaults.conflict_hold_s
    assert cfg["metricsPort"] == defaults.metrics_port
    assert cfg["healthPort"] == defaults.health_port
    assert cfg["logLevel"] == defaults.log_level


def test_schema_lists_exactly_the_top_level_values() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) - {"global"} == set(VALUES)
    assert set(schema["properties"]["config"]["properties"]) == set(VALUES["config"])
