"""``runtime render --out DIR`` and ``runtime serve --model-repository DIR`` leave exactly the models of this
config in DIR (user report item 11: a naive render over a default one left multimodal_image, _image_text and
_text behind, and Triton loads every model in the folder); a folder modalscale did not render is refused."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from modalscale.cli import main
from modalscale.runtime.cli import RENDER_MARKER, add_parser
from modalscale.runtime.repo_config import PRESETS, build_repository


def _models(d: Path) -> set[str]:
    return {p.name for p in d.iterdir() if p.is_dir()}


def _expected(preset: str) -> set[str]:
    return {path.split("/")[0] for path in build_repository(PRESETS[preset])}


def test_a_render_over_a_previous_one_leaves_only_its_own_models(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "repo"
    assert main(["runtime", "render", "--preset", "default", "--out", str(out)]) == 0
    assert _models(out) == _expected("default") and len(_expected("default")) > 1
    (out / "multimodal" / "2").mkdir()  # a stale version folder inside a model that stays
    assert main(["runtime", "render", "--preset", "naive", "--out", str(out)]) == 0
    assert _models(out) == _expected("naive") == {"multimodal"}
    assert not (out / "multimodal" / "2").exists()
    assert {p.name for p in out.iterdir() if not p.is_dir()} == {RENDER_MARKER}
    capsys.readouterr()


def test_a_render_into_a_folder_it_did_not_write_is_refused_and_touches_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "someone_elses_model").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["runtime", "render", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("modalscale runtime render: --out: "), err
    assert "modalscale did not render" in err[0]
    assert _models(tmp_path) == {"someone_elses_model"} and (tmp_path / "notes.txt").read_text() == "mine"


def test_an_empty_or_new_folder_is_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runtime", "render", "--preset", "naive", "--out", str(tmp_path)]) == 0
    assert main(["runtime", "render", "--preset", "naive", "--out", str(tmp_path / "a" / "b")]) == 0
    assert _models(tmp_path / "a" / "b") == {"multimodal"}
    capsys.readouterr()


def test_serve_refuses_a_model_repository_it_did_not_write_before_starting_triton(tmp_path: Path) -> None:
    from modalscale.cli import UsageError
    from modalscale.runtime.cli import run_serve

    (tmp_path / "old_model").mkdir()
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["runtime", "serve", "--model-repository", str(tmp_path), "--preset", "naive"])
    with pytest.raises(UsageError, match="--model-repository"):
        run_serve(args)
    assert _models(tmp_path) == {"old_model"}


@pytest.mark.parametrize("content", [None, "spec: [unclosed\n", b"\xff\xfe"], ids=["missing", "bad-yaml", "binary"])
def test_an_unreadable_from_isvc_file_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         content: str | bytes | None) -> None:
    manifest = tmp_path / "isvc.yaml"
    if isinstance(content, bytes):
        manifest.write_bytes(content)
    elif content is not None:
        manifest.write_text(content)
    assert main(["runtime", "render", "--out", str(tmp_path / "repo"), "--from-isvc", str(manifest)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--from-isvc" in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "repo").exists()
