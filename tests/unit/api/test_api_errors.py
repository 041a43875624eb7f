"""One "invalid spec" error: every spec reader raises ``modalscale.api.errors.InvalidSpec`` with field and reason."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modalscale.api.errors import InvalidSpec

REPO = Path(__file__).resolve().parents[3]


def _isvc(spec: dict[str, Any]) -> None:
    from modalscale.api.inferenceservice import parse_isvc

    parse_isvc({"metadata": {"name": "a", "namespace": "ns"}, "spec": spec})


def _policy(spec: dict[str, Any]) -> None:
    from modalscale.autoscaler.policy import ScalingPolicy

    ScalingPolicy.from_spec(spec)


def _runtime(spec: dict[str, Any]) -> None:
    from modalscale.runtime.repo_config import RuntimeConfig

    RuntimeConfig.from_isvc_spec(spec)


def _budget(spec: dict[str, Any]) -> None:
    from modalscale.api.budgetpolicy import parse_budget_spec

    parse_budget_spec(spec)


def _quantity(spec: dict[str, Any]) -> None:
    from modalscale.api.quantities import parse_quantity

    parse_quantity(spec["resources"]["cpu"], "spec.resources.cpu")


def _repository(spec: dict[str, Any]) -> None:
    from modalscale.api.inferenceservice import parse_isvc
    from modalscale.operator.isvc.reconcile import repository_files

    repository_files(parse_isvc({"metadata": {"name": "a", "namespace": "ns"}, "spec": spec}))


CASES: list[tuple[str, Callable[[dict[str, Any]], None], dict[str, Any], str]] = [
    ("isvc", _isvc, {"scaling": {"mode": "Fixed"}}, "spec.scaling.replicas"),
    ("policy", _policy, {"scaling": {"maxReplicas": "ten"}}, "spec.scaling.maxReplicas"),
    ("policy-min-max", _policy, {"scaling": {"minReplicas": 5, "maxReplicas": 2}}, "spec.scaling.minReplicas"),
    ("runtime", _runtime, {"runtime": {"maxBatchSize": 999}}, "spec.runtime.maxBatchSize"),
    ("runtime-unknown", _runtime, {"runtime": {"maxBatchsize": 4}}, "spec.runtime.maxBatchsize"),
    ("budget", _budget, {"period": "Daily", "limit": {"amount": "lots", "currency": "USD"}}, "spec.limit.amount"),
    ("quantity", _quantity, {"resources": {"cpu": "lots"}}, "spec.resources.cpu"),
    ("repository", _repository, {"runtime": {"maxBatchSize": 4,
                                             "dynamicBatching": {"preferredBatchSizes": [2, 8]}}},
     "spec.runtime.dynamicBatching.preferredBatchSizes"),
]


@pytest.mark.parametrize(("reader", "spec", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_spec_reader_raises_the_one_invalid_spec_naming_field_and_reason(reader, spec, field) -> None:
    with pytest.raises(InvalidSpec) as info:
        reader(spec)
    err = info.value
    assert err.field == field
    assert err.reason == "InvalidSpec"
    assert str(err) == f"{field}: {err.message}" and err.message


def test_an_unpriced_gpu_is_an_invalid_spec_with_its_own_reason() -> None:
    from modalscale.operator.isvc.reconcile import UnpricedGPU

    err = UnpricedGPU("spec.resources.gpu.type", "no price for nvidia-b200 at OnDemand")
    assert isinstance(err, InvalidSpec) and err.reason == "UnknownGPUPrice"
    assert str(err) == "spec.resources.gpu.type: no price for nvidia-b200 at OnDemand"


def test_no_code_recovers_a_field_by_splitting_an_error_message() -> None:
    """The operator read ``field`` by ``str(exc).split(":", 1)``; errors carry it now."""
    offenders = []
    for folder in ("operator", "autoscaler", "costmodel", "runtime"):
        for py in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(py.read_text(), filename=str(py))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("split", "partition", "rsplit")
                        and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
                        and node.func.value.func.id == "str" and node.func.value.args
                        and isinstance(node.func.value.args[0], ast.Name)
                        and node.func.value.args[0].id in ("exc", "err", "error", "e")):
                    offenders.append(f"{py.relative_to(REPO)}:{node.lineno}")
    assert offenders == []
