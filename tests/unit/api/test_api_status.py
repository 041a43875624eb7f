"""The typed status of each kind (modalscale.api.status) is the CRD's status schema: same keys, same required keys,
the same nesting, at every level."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from modalscale.api.status import BudgetPolicyStatus, InferenceServiceStatus

REPO = Path(__file__).resolve().parents[3]


def _schema_shape(node: dict[str, Any], path: str, out: dict[str, tuple[frozenset[str], frozenset[str]]]) -> None:
    """``{path: (keys, required keys)}`` of every object with properties in a CRD schema (arrays as ``path[]``)."""
    if node.get("type") == "object" and "properties" in node:
        out[path] = (frozenset(node["properties"]), frozenset(node.get("required", ())))
        for key, child in node["properties"].items():
            _schema_shape(child, f"{path}.{key}", out)
    elif node.get("type") == "array":
        _schema_shape(node["items"], f"{path}[]", out)


def _typed_shape(tp: Any, path: str, out: dict[str, tuple[frozenset[str], frozenset[str]]]) -> None:
    """The same map read from a TypedDict and the TypedDicts (and lists of them) inside it."""
    tp = typing.get_args(tp)[0] if typing.get_origin(tp) in (typing.NotRequired, typing.Required) else tp
    if typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp)
        out[path] = (frozenset(hints), frozenset(tp.__required_keys__))
        for key, child in hints.items():
            _typed_shape(child, f"{path}.{key}", out)
    elif typing.get_origin(tp) is list:
        _typed_shape(typing.get_args(tp)[0], f"{path}[]", out)
    elif isinstance(tp, types.UnionType):
        for arg in typing.get_args(tp):
            _typed_shape(arg, path, out)


@pytest.mark.parametrize(("crd", "typed"), [("inferenceservices", InferenceServiceStatus),
                                            ("budgetpolicies", BudgetPolicyStatus)])
def test_the_typed_status_is_the_crd_status_schema(crd: str, typed: Any) -> None:
    doc = yaml.safe_load((REPO / "crds" / f"{crd}.modalscale.io.yaml").read_text())
    schema: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    _schema_shape(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"], "status", schema)
    found: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    _typed_shape(typed, "status", found)
    assert found == schema


# The functional form: this module's string annotations would hide NotRequired from __required_keys__ (3.11).
_Item = typing.TypedDict("_Item", {"a": int, "b": typing.NotRequired[str]})
_Status = typing.TypedDict("_Status", {"items": list[_Item]}, total=False)


def test_the_comparison_sees_a_required_key_the_typed_status_does_not_require() -> None:
    found: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    _typed_shape(_Status, "status", found)
    assert found == {"status": (frozenset({"items"}), frozenset()),
                     "status.items[]": (frozenset({"a", "b"}), frozenset({"a"}))}
    schema: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    item = {"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "integer"}, "b": {}}}
    _schema_shape({"type": "object", "properties": {"items": {"type": "array", "items": item}}}, "status", schema)
    assert schema != found  # b is required in the schema, not in the TypedDict
