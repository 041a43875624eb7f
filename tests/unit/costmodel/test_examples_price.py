"""Every example in crds/examples prices with the packaged catalog (the operator and ``cost diff`` refuse what the
catalog cannot price, so an example that does not price is an example that does not work)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from modalscale.api.budgetpolicy import parse_budget_spec
from modalscale.api.inferenceservice import parse_isvc
from modalscale.costmodel.catalog import ReplicaResources, load_catalog
from modalscale.operator.cost_diff import price_side, read_manifests

EXAMPLES = Path(__file__).resolve().parents[3] / "crds" / "examples"
FILES = sorted(EXAMPLES.glob("*.yaml"))


def test_there_are_examples_of_both_kinds() -> None:
    kinds = {d["kind"] for f in FILES for d in yaml.safe_load_all(f.read_text()) if d}
    assert kinds == {"InferenceService", "BudgetPolicy"}


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_every_example_prices_with_the_packaged_catalog(path: Path) -> None:
    catalog = load_catalog()
    for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
        if doc["kind"] == "BudgetPolicy":
            parse_budget_spec(doc["spec"])
            continue
        doc["metadata"].setdefault("namespace", "default")
        spec = parse_isvc(doc)
        res = ReplicaResources.from_quantities(spec.resources.cpu, spec.resources.memory, spec.resources.gpu_count,
                                               spec.resources.gpu_type)
        assert catalog.price_replica(res, spec.pricing_tier) > 0  # raises UnknownPrice when not priced
    if path.name.startswith("inferenceservice"):
        priced, _ = price_side(read_manifests(str(path)), catalog)  # cost diff's path: raises CostDiffError
        assert priced
