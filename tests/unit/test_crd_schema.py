"""Static checks of the hand-written CRDs: structural, bounded, typed status, printer columns, subresources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modalscale.devenv.kube import load_crds

REPO = Path(__file__).resolve().parents[2]
CRDS = {d["spec"]["names"]["kind"]: d for d in load_crds(REPO / "crds")}


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for name, sub in (schema.get("properties") or {}).items():
        out += _walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        out += _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _walk(schema["additionalProperties"], f"{path}{{}}")
    for alt in schema.get("anyOf", []):
        # int-or-string alternatives carry only a type; the bounds sit beside anyOf and apply to both.
        out += _walk({**{k: v for k, v in schema.items() if k != "anyOf"}, **alt}, path)
    return out


def _schema(kind: str) -> dict[str, Any]:
    (version,) = CRDS[kind]["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def test_both_kinds_exist_in_group_modalscale_io() -> None:
    assert set(CRDS) == {"InferenceService", "BudgetPolicy"}
    assert {d["spec"]["group"] for d in CRDS.values()} == {"modalscale.io"}


def test_short_names_do_not_collide_with_kserve() -> None:
    assert CRDS["InferenceService"]["spec"]["names"]["shortNames"] == ["msvc"]
    all_short = [s for d in CRDS.values() for s in d["spec"]["names"].get("shortNames", [])]
    assert "isvc" not in all_short


@pytest.mark.parametrize("kind", ["InferenceService", "BudgetPolicy"])
def test_every_string_and_array_field_is_bounded(kind: str) -> None:
    unbounded = []
    for path, s in _walk(_schema(kind)):
        if path in (".apiVersion", ".kind"):
            continue
        if s.get("type") == "string" and not ({"maxLength", "enum", "pattern", "format"} & s.keys()):
            unbounded.append(path)
        if s.get("type") == "array" and "maxItems" not in s:
            unbounded.append(path)
        if s.get("type") == "integer" and path.startswith(".spec") and "maximum" not in s:
            unbounded.append(path)
    assert unbounded == []


@pytest.mark.parametrize("kind", ["InferenceService", "BudgetPolicy"])
def test_status_is_typed_and_never_preserves_unknown_fields(kind: str) -> None:
    schema = _schema(kind)
    assert schema["properties"]["status"]["properties"]["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    assert all("x-kubernetes-preserve-unknown-fields" not in s for _, s in _walk(schema))


@pytest.mark.parametrize("kind", ["InferenceService", "BudgetPolicy"])
def test_categories_status_subresource_and_age_column(kind: str) -> None:
    crd = CRDS[kind]
    (version,) = crd["spec"]["versions"]
    assert crd["spec"]["names"]["categories"] == ["modalscale"]
    assert "status" in version["subresources"]
    assert version["additionalPrinterColumns"][-1]["name"] == "Age"


def test_inferenceservice_scale_subresource_and_printer_columns() -> None:
    (version,) = CRDS["InferenceService"]["spec"]["versions"]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.scaling.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names == ["Ready", "Replicas", "Desired", "P95 SLO", "Cost/h", "Age"]


def test_budgetpolicy_printer_columns() -> None:
    (version,) = CRDS["BudgetPolicy"]["spec"]["versions"]
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names == ["Period", "Limit", "Spent", "Forecast", "State", "Age"]
