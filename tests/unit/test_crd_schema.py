"""Static checks of the hand-written CRDs: structural, bounded, typed status, printer columns, subresources."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from modalscale.devenv.kube import load_crds

REPO = Path(__file__).resolve().parents[2]
ALL_CRDS = load_crds(REPO / "crds")
CRDS = {d["spec"]["names"]["kind"]: d for d in ALL_CRDS if d["spec"]["group"] == "modalscale.io"}


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


def _fields(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every named field (a ``properties`` entry) under ``schema``, as (dotted path, sub-schema)."""
    out = []
    for name, sub in (schema.get("properties") or {}).items():
        out.append((f"{path}.{name}", sub))
        out += _fields(sub, f"{path}.{name}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(schema.get(key), dict):
            out += _fields(schema[key], f"{path}{suffix}")
    return out


def _default_text(value: Any) -> str:
    """How a schema default is written in a description (YAML spelling: true, "", [Alert])."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return '""' if value == "" else str(value)


UNIT_WORDS = {"Seconds": "seconds", "Milliseconds": "milliseconds", "Microseconds": "microseconds",
              "Percent": "percent", "PerHour": "per hour"}
"""A field named with a unit suffix says that unit in words in its description."""


def _schema(kind: str) -> dict[str, Any]:
    (version,) = CRDS[kind]["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def test_both_kinds_exist_in_group_modalscale_io() -> None:
    assert set(CRDS) == {"InferenceService", "BudgetPolicy"}
    assert {d["spec"]["group"] for d in CRDS.values()} == {"modalscale.io"}


def test_crds_folder_carries_kopfs_peering_crds_beside_ours() -> None:
    # `kubectl apply -f crds/` (not recursive) must install everything `modalscale operator` needs with peering on.
    assert {d["metadata"]["name"] for d in ALL_CRDS} == {
        "inferenceservices.modalscale.io", "budgetpolicies.modalscale.io",
        "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"}
    assert not [p for p in (REPO / "crds").iterdir() if p.is_dir() and p.name != "examples"]
    peering = {d["spec"]["names"]["kind"]: d["spec"]["scope"] for d in ALL_CRDS if d["spec"]["group"] == "kopf.dev"}
    assert peering == {"ClusterKopfPeering": "Cluster", "KopfPeering": "Namespaced"}


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
    assert names == ["Ready", "Period", "Limit", "Spent", "Forecast", "State", "Reason", "Age"]


@pytest.mark.parametrize("kind", ["InferenceService", "BudgetPolicy"])
def test_every_field_has_a_description_for_kubectl_explain(kind: str) -> None:
    # The apiserver forbids anything but type on the root's metadata (it is the standard ObjectMeta).
    undescribed = [path for path, s in _fields(_schema(kind))
                   if path != ".metadata" and not str(s.get("description") or "").strip()]
    assert undescribed == [], ("add a description (unit, default, effect); docs/crd-reference.md is generated from "
                              "these: python scripts/gen-crd-reference.py")


@pytest.mark.parametrize("kind", ["InferenceService", "BudgetPolicy"])
def test_every_defaulted_field_states_its_default_and_every_unit_field_its_unit(kind: str) -> None:
    wrong = []
    for path, s in _fields(_schema(kind)):
        text = str(s.get("description") or "")
        if "default" in s and not isinstance(s["default"], dict):
            if "default" not in text.lower() or _default_text(s["default"]) not in text:
                wrong.append(f"{path}: say 'Default {_default_text(s['default'])}'")
        name = path.rsplit(".", 1)[-1]
        wrong += [f"{path}: say the unit ({word})" for suffix, word in UNIT_WORDS.items()
                  if name.endswith(suffix) and word not in text.lower()]
    assert wrong == []


def test_field_walk_sees_nested_items_and_flags_a_missing_description() -> None:
    # The guard's own check: a field deep inside an array of objects is reached, and an empty text counts as none.
    schema = {"properties": {"a": {"type": "array", "description": "x", "items": {"properties": {
        "b": {"type": "string", "description": " "}}}}}}
    assert [p for p, s in _fields(schema) if not str(s.get("description") or "").strip()] == [".a[].b"]


def _rules(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Every CEL rule under ``schema``, as (path of the node that declares it, that node, the rule)."""
    return [(p, node, rule) for p, node in _walk(schema, path) for rule in node.get("x-kubernetes-validations", [])]


@pytest.mark.parametrize("kind", ["InferenceService", "BudgetPolicy"])
def test_every_rule_has_a_message_and_its_field_path_names_a_field_of_its_node(kind: str) -> None:
    wrong = []
    for path, node, rule in _rules(_schema(kind)):
        if not str(rule.get("message") or "").strip():
            wrong.append(f"{path}: {rule['rule']!r} has no message")
        target: dict[str, Any] | None = node
        for name in str(rule.get("fieldPath") or "").split(".")[1:]:
            target = ((target or {}).get("properties") or {}).get(name)
        if target is None:
            wrong.append(f"{path}: fieldPath {rule['fieldPath']!r} is not a field of the node")
    assert wrong == []


def test_runtime_engine_is_the_runtimes_engine_enum_defaulted_to_torch_and_refuses_what_openvino_cannot_run() -> None:
    from modalscale.runtime.repo_config import Engine

    spec = _schema("InferenceService")["properties"]["spec"]
    runtime = spec["properties"]["runtime"]
    engine = runtime["properties"]["engine"]
    assert engine["enum"] == [e.value for e in Engine] and engine["default"] == Engine.TORCH.value
    assert "160 px" in runtime["properties"]["precision"]["description"]  # the fastest preset's INT8 threshold
    fp16 = [r for r in runtime["x-kubernetes-validations"] if "openvino" in r["rule"]]
    gpu = [r for r in spec["x-kubernetes-validations"] if "openvino" in r["rule"]]
    assert [(r["fieldPath"], "'FP16'" in r["rule"]) for r in fp16] == [(".engine", True)]
    assert [(r["fieldPath"], "gpu.count == 0" in r["rule"]) for r in gpu] == [
        (".runtime.engine", True), (".stages.imageEncoder.resources.gpu.count", True)]  # the encoder pool's GPUs too
    assert all("engine torch" in r["message"] for r in fp16 + gpu)  # the fix is named


MODE_DEFAULTED = {"targetUtilizationPercent": "target_utilization_percent",
                  "scaleDownStabilizationSeconds": "scale_down_stabilization_s",
                  "maxStepReplicas": "max_step_replicas"}
"""``spec.scaling`` fields whose default depends on the mode (``SCALING_MODE_DEFAULTS``), by their attribute."""


@pytest.mark.parametrize("field", sorted(MODE_DEFAULTED))
def test_a_mode_defaulted_field_has_no_schema_default_and_states_each_modes_value(field: str) -> None:
    from modalscale.api.inferenceservice import SCALING_MODE_DEFAULTS

    sub = _schema("InferenceService")["properties"]["spec"]["properties"]["scaling"]["properties"][field]
    # A schema default would be stored in every object whatever its mode, and the operator could not apply the
    # mode's own value.
    assert "default" not in sub
    text = " ".join(str(sub["description"]).split())
    for mode, values in SCALING_MODE_DEFAULTS.items():
        value = getattr(values, MODE_DEFAULTED[field])
        # "90 in Predictive", "70 in Utilization and Fixed"
        assert re.search(rf"\b{value} in (?:[A-Z][a-z]+ and )?{mode}\b", text), (
            f"{field}: say its unset value in {mode} mode ({value}): {text}")
