"""The commands that build from the source checkout (``modalscale images``, ``modalscale demo``) say so when run
from an installed package, instead of a ``FileNotFoundError`` traceback (``modalscale.devenv.checkout``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modalscale import cli
from modalscale.devenv import checkout
from modalscale.devenv.images import IMAGE_NAMES, image_definitions


def test_this_repository_is_a_checkout() -> None:
    assert checkout.missing_parts() == []
    assert checkout.source_root("x") == checkout.ROOT


def test_a_folder_without_the_checkout_is_refused_naming_the_command_what_is_missing_and_the_fix(
        tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    with pytest.raises(checkout.NotACheckoutError) as err:
        checkout.source_root("modalscale images build", tmp_path)
    message = str(err.value)
    assert message.startswith("modalscale images build builds from a source checkout")
    assert f"{tmp_path} has no crds, charts/modalscale, Dockerfile.runtime-cpu, Dockerfile.operator" in message
    assert "pyproject.toml," not in message
    assert "clone the repository" in message


@pytest.mark.parametrize("argv", [["images", "build"], ["images", "import"], ["demo"]])
def test_the_commands_fail_with_the_message_and_no_traceback_outside_a_checkout(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(checkout, "ROOT", tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"modalscale {' '.join(argv)} builds from a source checkout of modalscale" in err
    assert "Traceback" not in err


def test_images_help_needs_no_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(checkout, "ROOT", tmp_path)
    with pytest.raises(SystemExit) as done:
        cli.main(["images", "build", "--help"])
    assert done.value.code == 0
    assert "default: all of operator, runtime-cpu" in " ".join(capsys.readouterr().out.split())


def test_the_image_names_are_the_definitions_keys() -> None:
    assert tuple(image_definitions()) == IMAGE_NAMES
