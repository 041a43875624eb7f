"""The CRD chart carries exact copies of crds/ (the single source), and the sync check notices any drift."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_CHART = REPO / "charts" / "modalscale-crds"


def _sync_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_chart_crds", REPO / "scripts" / "sync-chart-crds.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sync = _sync_module()


def test_chart_crds_equal_the_crds_folder() -> None:
    assert sync.differences() == [], "run: python scripts/sync-chart-crds.py"


def test_every_crd_in_crds_folder_is_in_the_chart() -> None:
    names_in_source = set()
    for path in (REPO / "crds").glob("*.yaml"):
        names_in_source |= {d["metadata"]["name"] for d in yaml.safe_load_all(path.read_text())
                            if d and d.get("kind") == "CustomResourceDefinition"}
    names_in_chart = set()
    for path in (CRD_CHART / "files" / "crds").rglob("*.yaml"):
        names_in_chart |= {d["metadata"]["name"] for d in yaml.safe_load_all(path.read_text()) if d}
    assert names_in_source == names_in_chart == {
        "inferenceservices.modalscale.io", "budgetpolicies.modalscale.io",
        "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"}


def test_examples_are_not_copied_into_the_chart() -> None:
    assert not any("examples" in p.parts for p in (CRD_CHART / "files" / "crds").rglob("*"))


@pytest.fixture
def copies(tmp_path: Path) -> tuple[Path, Path]:
    source, target = tmp_path / "crds", tmp_path / "chart-crds"
    shutil.copytree(REPO / "crds", source)
    sync.sync(source, target)
    return source, target


def test_check_reports_a_changed_crd(copies: tuple[Path, Path]) -> None:
    source, target = copies
    assert sync.differences(source, target) == []
    path = source / "inferenceservices.modalscale.io.yaml"
    path.write_text(path.read_text().replace("Ready replicas", "Replicas that are ready"))
    assert sync.differences(source, target) == ["differs from crds/: inferenceservices.modalscale.io.yaml"]


def test_check_reports_missing_and_stale_files(copies: tuple[Path, Path]) -> None:
    source, target = copies
    (source / "kopfpeerings.kopf.dev.yaml").unlink()
    (source / "newkinds.modalscale.io.yaml").write_text("kind: CustomResourceDefinition\n")
    assert sync.differences(source, target) == [
        "missing in chart: newkinds.modalscale.io.yaml",
        "not in crds/ (stale copy): kopfpeerings.kopf.dev.yaml",
    ]


def test_sync_makes_the_copies_exact_and_is_idempotent(copies: tuple[Path, Path]) -> None:
    source, target = copies
    (source / "budgetpolicies.modalscale.io.yaml").write_bytes(b"# edited\n")
    (target / "leftover.yaml").write_text("x: 1\n")
    (target / "peering").mkdir()
    (target / "peering" / "kopf-peering.yaml").write_text("x: 1\n")  # the old layout's folder
    changes = sync.sync(source, target)
    assert changes == ["not in crds/ (stale copy): leftover.yaml",
                       "not in crds/ (stale copy): peering/kopf-peering.yaml",
                       "differs from crds/: budgetpolicies.modalscale.io.yaml"]
    assert (target / "budgetpolicies.modalscale.io.yaml").read_bytes() == b"# edited\n"
    assert not (target / "leftover.yaml").exists() and not (target / "peering").exists()
    assert sync.sync(source, target) == []


def test_crd_template_renders_every_file_of_the_copy_folder() -> None:
    # The template globs files/crds/**.yaml; a rename of the folder would silently render no CRD at all.
    template = (CRD_CHART / "templates" / "crds.yaml").read_text()
    assert '.Files.Glob "files/crds/**.yaml"' in template
    assert sync.TARGET == CRD_CHART / "files" / "crds"
