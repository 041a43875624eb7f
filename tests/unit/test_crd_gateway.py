"""The CRD's gateway rules agree with ``modalscale.api`` (issue 19): ``spec.gateway.enabled`` has no CRD default (a
stored default would outlive a later flip) and the CEL rule reads an unset value as ``GATEWAY_ENABLED_DEFAULT``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import GATEWAY_ENABLED_DEFAULT, parse_spec

REPO = Path(__file__).resolve().parents[1].parent


def _spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "inferenceservices.modalscale.io.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"]["properties"]["spec"])


def test_gateway_enabled_has_no_crd_default_and_its_description_says_the_default_and_the_way_out() -> None:
    enabled = _spec_schema()["properties"]["gateway"]["properties"]["enabled"]
    assert "default" not in enabled
    assert f"Default {str(GATEWAY_ENABLED_DEFAULT).lower()}" in enabled["description"]
    assert "false keeps the direct Service" in enabled["description"]


def test_the_min_replicas_rule_reads_an_unset_enabled_as_the_api_default() -> None:
    (rule,) = [r for r in _spec_schema()["x-kubernetes-validations"] if r.get("fieldPath") == ".scaling.minReplicas"]
    unset_means_enabled = ("!has(self.gateway) || !has(self.gateway.enabled) || self.gateway.enabled"
                           in rule["rule"])
    assert unset_means_enabled is GATEWAY_ENABLED_DEFAULT, (
        "GATEWAY_ENABLED_DEFAULT flipped: make the CEL rule read an unset gateway.enabled the same way")
    assert "gateway.enabled: true" in rule["message"]


def test_scaling_no_longer_refuses_min_zero_by_itself() -> None:
    scaling = _spec_schema()["properties"]["scaling"]
    assert not [r for r in scaling["x-kubernetes-validations"] if "self.minReplicas >= 1" in r["rule"]]


def test_the_gateway_cpu_default_is_the_api_default() -> None:
    from modalscale.api.inferenceservice import GATEWAY_CPU_DEFAULT

    cpu = _spec_schema()["properties"]["gateway"]["properties"]["resources"]["properties"]["cpu"]
    assert cpu["default"] == GATEWAY_CPU_DEFAULT == "100m"
    assert f"Default {GATEWAY_CPU_DEFAULT}" in cpu["description"]


def _quantities(schema: dict[str, Any], path: str = "spec") -> list[tuple[str, dict[str, Any]]]:
    """Every int-or-string field (a Kubernetes quantity) under ``schema``, as (dotted path, sub-schema)."""
    out = []
    for name, sub in (schema.get("properties") or {}).items():
        if sub.get("x-kubernetes-int-or-string"):
            out.append((f"{path}.{name}", sub))
        out += _quantities(sub, f"{path}.{name}")
    return out


def test_every_quantity_the_parser_refuses_at_zero_is_refused_at_zero_by_the_crd_too() -> None:
    """``modalscale.api`` refuses a quantity of 0 in every resources field (spec.resources, the encoder pool's and the
    gateway's); the CRD must refuse it at admission as well, or the apiserver stores a spec the operator then
    refuses (Ready=False) with nothing told at ``kubectl apply``."""
    found = _quantities(_spec_schema())
    assert {p for p, _ in found} >= {"spec.gateway.resources.cpu", "spec.gateway.resources.memory",
                                     "spec.resources.cpu", "spec.resources.memory"}
    for path, field in found:
        spec: dict[str, Any] = {"gateway": {"enabled": True}, "stages": {"imageEncoder": {}}}
        parts = path.split(".")[1:]
        node = spec
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = "0"
        with pytest.raises(InvalidSpec, match="greater than 0"):
            parse_spec(spec)
        rules = [r["rule"] for r in field.get("x-kubernetes-validations") or []]
        assert "type(self) == int ? self > 0 : !self.matches('^0*([.]0*)?[a-zA-Z]*$')" in rules, (
            f"{path}: the CRD admits 0, which the operator refuses")
