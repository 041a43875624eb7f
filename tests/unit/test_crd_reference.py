"""docs/crd-reference.md is generated from crds/*.yaml and cannot drift: the committed file equals what
scripts/gen-crd-reference.py writes, it has a row for every spec and status field of both CRDs (user report item 9:
spec.placement was missing from the hand-written tables that stood in README before), and it names the short names.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "crd-reference.md"


def _gen_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_crd_reference", ROOT / "scripts" / "gen-crd-reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _gen_module()


def test_the_committed_reference_is_what_the_generator_writes() -> None:
    assert DOC.read_text(encoding="utf-8") == gen.render(), "run: python scripts/gen-crd-reference.py"
    assert gen.main(["--check"]) == 0


def test_a_changed_crd_changes_the_reference_so_the_check_catches_drift(tmp_path: Path) -> None:
    crds = tmp_path / "crds"
    shutil.copytree(ROOT / "crds", crds)
    path = crds / "inferenceservices.modalscale.io.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["priority"]["description"] = "A changed description."
    spec["properties"]["newField"] = {"type": "integer", "minimum": 2, "maximum": 9, "default": 3,
                                      "description": "A new field."}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    changed = gen.render(crds)
    assert changed != gen.render()
    assert "| `spec.newField` | integer |  | 2–9 | `3` | A new field. |" in changed
    assert "A changed description." in changed


def _section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start:end if end > 0 else None]


def _rows(section: str) -> set[str]:
    """Field paths of the tables' first column, without the ``[]`` and ``{}`` of lists and maps."""
    paths: set[str] = set()
    for line in section.splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) >= 6:
            paths.add(cells[0].removeprefix("| ").strip("`").replace("[]", "").replace("{}", ""))
    return paths


def _paths(schema: dict[str, Any], path: str) -> list[str]:
    out = [path]
    inner = schema.get("items") if schema.get("type") == "array" else schema
    for name, sub in ((inner or {}).get("properties") or {}).items():
        out += _paths(sub, f"{path}.{name}")
    return out


@pytest.mark.parametrize(("crd", "title"), [
    ("inferenceservices.modalscale.io.yaml", "## InferenceService ("),
    ("budgetpolicies.modalscale.io.yaml", "## BudgetPolicy ("),
], ids=["InferenceService", "BudgetPolicy"])
def test_every_spec_and_status_field_has_a_row_with_its_description_and_the_short_name(crd: str, title: str) -> None:
    doc = yaml.safe_load((ROOT / "crds" / crd).read_text(encoding="utf-8"))
    props = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    section = _section(title)
    rows = _rows(section)
    fields = _paths(props["spec"], "spec") + _paths(props["status"], "status")
    assert [f for f in fields if f not in rows] == []
    assert [name for name, sub in props["spec"]["properties"].items()
            if " ".join(sub["description"].split()).replace("|", "\\|") not in section] == []
    facts = section.split("\n\n", 2)[1]
    assert all(f"short name `{s}`" in facts for s in doc["spec"]["names"]["shortNames"]), facts
