"""README's CRD reference tables name every spec field of both CRDs (user report item 9: spec.placement was
missing although README says the tables are what ``kubectl explain`` prints), and the short names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n### ", start + len(title))
    return README[start:end if end > 0 else None]


def _documented(section: str) -> set[str]:
    """Field paths of the table's first column: `spec.a.{b,c}`, then `.d` (a sibling of the last name) or `e`
    (a sibling too), as the rows write them."""
    paths: set[str] = set()
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) < 3 or not cells[1].strip().startswith("`spec."):
            continue
        names = re.findall(r"`([^`]+)`", cells[1])
        parent = ""
        for name in names:
            if name.startswith("spec."):
                full = name
            elif name.startswith("."):
                full = parent + name
            else:
                full = f"{parent}.{name}"
            head, brace, rest = full.partition(".{")
            expanded = [f"{head}.{n.strip()}" for n in rest.rstrip("}").split(",")] if brace else [full]
            paths |= {p.replace("[]", "") for p in expanded}
            parent = head if brace else full.rsplit(".", 1)[0]
    return paths


def _leaves(schema: dict[str, Any], path: str) -> list[str]:
    out: list[str] = []
    for name, sub in (schema.get("properties") or {}).items():
        p = f"{path}.{name}"
        inner = sub.get("items") if sub.get("type") == "array" else sub
        if isinstance(inner, dict) and inner.get("properties"):
            out += _leaves(inner, p)
        else:
            out.append(p)
    return out


@pytest.mark.parametrize(("crd", "title"), [
    ("inferenceservices.modalscale.io.yaml", "### InferenceService ("),
    ("budgetpolicies.modalscale.io.yaml", "### BudgetPolicy ("),
], ids=["InferenceService", "BudgetPolicy"])
def test_every_spec_field_is_in_the_readme_table_with_the_short_name(crd: str, title: str) -> None:
    doc = yaml.safe_load((ROOT / "crds" / crd).read_text(encoding="utf-8"))
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    section = _section(title)
    documented = _documented(section)

    def covered(leaf: str) -> bool:
        parts = leaf.split(".")
        return any(".".join(parts[:i]) in documented for i in range(2, len(parts) + 1))

    assert [leaf for leaf in _leaves(schema, "spec") if not covered(leaf)] == []
    short = doc["spec"]["names"]["shortNames"]
    assert all(f"short name `{s}`" in section.splitlines()[0] for s in short), section.splitlines()[0]
