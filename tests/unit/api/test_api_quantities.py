"""The one Kubernetes quantity grammar (``modalscale.api.quantities``) and the guard that it stays the only one."""

from __future__ import annotations

import ast
import re
from decimal import Decimal
from pathlib import Path

import pytest

from modalscale.api.quantities import InvalidQuantity, parse_cpu_cores, parse_memory_bytes, parse_quantity
from modalscale.operator.isvc.plan import is_derivative

REPO = Path(__file__).resolve().parents[3]
CODE = [REPO / d for d in ("operator", "autoscaler", "costmodel", "runtime")] + [REPO / "src" / "modalscale"]


@pytest.mark.parametrize(("text", "value"), [
    ("2", Decimal(2)), ("2000m", Decimal(2)), ("500u", Decimal("0.0005")), ("250n", Decimal("0.00000025")),
    ("1.5k", Decimal(1500)), ("1Pi", Decimal(2**50)), ("1Ei", Decimal(2**60)), ("2E", Decimal("2e18")),
    ("3P", Decimal("3e15")), ("5e3", Decimal(5000)), ("5E-3", Decimal("0.005")), (".5", Decimal("0.5")),
    (7, Decimal(7)),
], ids=lambda v: str(v))
def test_every_suffix_of_the_kubernetes_grammar_parses_to_its_exact_value(text, value) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["lots", "1Gb", "-1", "", "1.2.3", "m", "1 Gi x"])
def test_a_malformed_quantity_names_the_field(text) -> None:
    with pytest.raises(InvalidQuantity) as info:
        parse_quantity(text, "spec.resources.memory")
    assert info.value.field == "spec.resources.memory"
    assert str(info.value).startswith("spec.resources.memory: ")


def test_cpu_and_memory_helpers_round_as_kubernetes_does() -> None:
    assert parse_cpu_cores("3500m") == Decimal("3.5")
    assert parse_memory_bytes("100m") == 1  # a fraction of a byte rounds up
    assert parse_memory_bytes("8Gi") == 8 * 2**30


@pytest.mark.parametrize(("desired", "observed"), [
    ("0.0005", "500u"),      # the apiserver's canonical form of a sub-milli CPU request
    ("0.00000025", "250n"),
    ("1Pi", "1Pi"), ("2E", "2E"), ("1Ei", "1024Pi"),
], ids=lambda v: str(v))
def test_drift_detection_compares_every_canonical_quantity_by_value(desired, observed) -> None:
    """An unknown suffix made the old drift check return 'different', so the child was patched on every pass."""
    assert is_derivative({"resources": {"requests": {"cpu": desired}}}, {"resources": {"requests": {"cpu": observed}}})


def test_drift_detection_still_sees_a_changed_quantity() -> None:
    assert not is_derivative({"resources": {"limits": {"memory": "1Pi"}}}, {"resources": {"limits": {"memory": "1Ei"}}})
    assert not is_derivative({"resources": {"limits": {"memory": "8Gi"}}}, {"resources": {"limits": {"memory": "x"}}})


_SUFFIX_TABLE = re.compile(r"""["'](Ki|Mi|Gi)["']""")
_PARSER_NAME = re.compile(r"^_*((parse_|to_)?quantit(y|ies)|parse_(cpu|cpu_cores|memory|memory_bytes))$")


def test_no_other_module_defines_a_quantity_parser() -> None:
    """One grammar: a function named like a quantity parser or a table of binary suffixes lives only in
    ``modalscale/api/quantities.py``."""
    home = REPO / "src" / "modalscale" / "api" / "quantities.py"
    offenders = []
    for root in CODE:
        for py in root.rglob("*.py"):
            if py.resolve() == home.resolve() or "/tests/" in str(py):
                continue
            text = py.read_text()
            for node in ast.walk(ast.parse(text, filename=str(py))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _PARSER_NAME.match(node.name):
                    offenders.append(f"{py.relative_to(REPO)}: def {node.name}")
            if len(set(_SUFFIX_TABLE.findall(text))) == 3:
                offenders.append(f"{py.relative_to(REPO)}: a table of binary suffixes")
    assert offenders == []
