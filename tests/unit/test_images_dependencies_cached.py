"""``dependencies_cached``: whether an image build would make only code layers (what ``scripts/test.sh`` asks before
letting the real-node tests start beside the background build), from the cache's own records, wheelhouses and
store; the store is the only part stood in for here (a set of image names instead of ``buildah inspect``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modalscale.devenv import images
from modalscale.devenv.images import (
    ImageBuildError,
    _record_path,
    _wheelhouse_dir,
    base_reference,
    dependencies_cached,
    dependency_pins,
    image_definitions,
    image_inputs,
)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    names: set[str] = set()
    monkeypatch.setattr(images, "images_dir", lambda: tmp_path)
    monkeypatch.setattr(images, "_image_exists", lambda name: name in names)
    return names


def _inputs(name: str) -> tuple[dict[str, str], images.ImageInputs]:
    defn = image_definitions()[name]
    pins = dependency_pins("modalscale", defn.extras, defn.cpu_only)
    return pins, image_inputs(defn, images.REPO, pins)


def _wheelhouse(root: Path, pins: dict[str, str]) -> None:
    house = _wheelhouse_dir(pins, root, images.build_requirements(images.REPO))
    house.mkdir(parents=True)
    (house / ".complete").write_text("")


def test_cold_until_base_wheelhouse_and_dependency_image_are_all_there(store: set[str], tmp_path: Path) -> None:
    pins, inputs = _inputs("operator")
    assert dependencies_cached(["operator"]) is False  # nothing at all
    _wheelhouse(tmp_path, pins)
    assert dependencies_cached(["operator"]) is False  # no base, no deps image
    store.add(base_reference())
    assert dependencies_cached(["operator"]) is False  # no deps image
    store.add(inputs.deps_ref)
    assert dependencies_cached(["operator"]) is True
    assert dependencies_cached() is False  # the runtime image's dependencies are not there


def test_a_cached_archive_needs_nothing_else_but_a_record_without_its_archive_does(
        store: set[str], tmp_path: Path) -> None:
    _, inputs = _inputs("operator")
    record = _record_path(tmp_path, "operator", inputs.code_hash)
    archive = tmp_path / f"operator-{inputs.code_hash}.oci.tar"
    record.write_text(json.dumps({"archive": str(archive)}))
    assert dependencies_cached(["operator"]) is False  # the record names an archive that is gone
    archive.write_bytes(b"")
    assert dependencies_cached(["operator"]) is True


def test_an_unknown_image_name_is_an_error_naming_the_choices(store: set[str]) -> None:
    with pytest.raises(ImageBuildError, match="unknown image nope; choose from operator"):
        dependencies_cached(["nope"])
