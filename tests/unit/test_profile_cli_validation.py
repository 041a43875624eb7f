"""``modalscale profile --from-csv``: a profile CSV with a cell the fit cannot use (NaN, infinite, negative, a
fractional count, a short row, an unknown modality) is refused naming the line, the column and the fix (exit 2),
never a traceback or a model fitted on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modalscale.autoscaler.features import features_from_columns
from modalscale.autoscaler.profile_data import (
    PROFILE_COLUMNS,
    SyntheticServiceLaw,
    generate_profile,
    read_profile_csv,
    write_profile_csv,
)
from modalscale.autoscaler.profile_design import ProfileGrid, design, profile_problem, to_table
from modalscale.cli import main


def profile_with(tmp_path: Path, column: str | None, value: str, drop_cells: int = 0) -> Path:
    """A 40-row synthetic profile whose 5th data row (line 6) has ``column`` set to ``value`` (or its last
    ``drop_cells`` cells missing)."""
    path = tmp_path / "profile.csv"
    write_profile_csv(generate_profile(40, random_state=1), path)
    lines = path.read_text().splitlines()
    cells = lines[5].split(",")
    if column is not None:
        cells[PROFILE_COLUMNS.index(column)] = value
    lines[5] = ",".join(cells[: len(cells) - drop_cells])
    path.write_text("\n".join(lines) + "\n")
    return path


CASES = [
    # (column, value, cells dropped, what the message says after "line 6: ")
    ("service_ms", "nan", 0, "column service_ms='nan' is not a finite number"),
    ("service_ms", "inf", 0, "column service_ms='inf' is not a finite number"),
    ("image_pixels", "inf", 0, "column image_pixels='inf' is not a finite number"),
    ("service_ms", "-3", 0, "column service_ms=-3.0 must be > 0"),
    ("service_ms", "0", 0, "column service_ms=0.0 must be > 0"),
    ("text_tokens", "-1", 0, "column text_tokens=-1 must be >= 0"),
    ("batch_size", "0", 0, "column batch_size=0 must be >= 1"),
    ("image_count", "1.5", 0, "column image_count='1.5' is not a whole number"),
    ("modality", "video", 0, "column modality='video' is not one of text, image, image_text"),
    (None, "", 3, "has 4 cells; expected 7"),
]
IDS = ["nan-service", "inf-service", "inf-pixels", "negative-service", "zero-service", "negative-tokens",
       "zero-batch", "fractional-count", "unknown-modality", "short-row"]


@pytest.mark.parametrize(("column", "value", "drop", "message"), CASES, ids=IDS)
def test_a_cell_the_fit_cannot_use_is_refused_naming_the_line_and_column(
        tmp_path: Path, column: str | None, value: str, drop: int, message: str) -> None:
    path = profile_with(tmp_path, column, value, drop)
    with pytest.raises(ValueError) as err:
        read_profile_csv(path)
    assert f"{path}: line 6: {message}" in str(err.value)
    assert "modalscale profile --out-csv" in str(err.value)  # the fix: re-measure or correct the row


@pytest.mark.parametrize(("column", "value", "drop", "message"), CASES, ids=IDS)
def test_the_command_exits_2_with_one_line_naming_the_flag_and_writes_no_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str | None, value: str, drop: int,
        message: str) -> None:
    path = profile_with(tmp_path, column, value, drop)
    model = tmp_path / "model.skops"
    assert main(["profile", "--from-csv", str(path), "--out-model", str(model)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("modalscale profile: --from-csv: ") and f"line 6: {message}" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not model.exists()


def test_too_few_rows_are_refused_naming_how_to_measure_more(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "profile.csv"
    write_profile_csv(generate_profile(3, random_state=1), path)
    model = tmp_path / "model.skops"
    assert main(["profile", "--from-csv", str(path), "--out-model", str(model)]) == 2
    err = capsys.readouterr().err
    assert "at least 8 rows to evaluate, got 3; measure more requests (modalscale profile --shapes, --repeats)" in err
    assert not model.exists()


def _degenerate(column: str) -> dict[str, Any]:
    """A 200-row synthetic profile in which one of the model's terms cannot be told apart from another."""
    t = generate_profile(200, random_state=3)
    images, pixels, tokens = t["image_count"], t["image_pixels"], t["text_tokens"]
    if column == "text_tokens":  # every prompt 64 tokens (`--tokens 64`)
        tokens = np.where(tokens > 0, 64, 0)
    elif column == "image_count":  # one image per request (`--images 1`), sizes varied
        pixels = np.where(images > 0, pixels // np.maximum(images, 1), 0)
        images = np.where(images > 0, 1, 0)
    else:  # one image size (`--image-sizes 640x480`), counts varied
        pixels = images * 640 * 480
    x = features_from_columns(pixels, images, tokens, t["batch_size"])
    return dict(t, image_count=images, image_pixels=pixels, text_tokens=tokens,
                service_ms=SyntheticServiceLaw().sample_ms(x, np.random.default_rng(0)))


@pytest.mark.parametrize(("column", "message"), [
    ("text_tokens", "text_tokens is 64 in every request with text: the model cannot tell the time per token from "
                    "a fixed time per request; measure several token counts (--tokens 8,64,256, or a --trace with "
                    "varied prompts)"),
    ("image_count", "image_count is 1 in every request with images: the model cannot tell the time per image "
                    "from a fixed time per request; measure several image counts (--images 1,2,4, or a --trace with "
                    "varied requests)"),
    ("image_pixels", "every image has 307200 pixels: the model cannot tell the time per megapixel from the time "
                     "per image; measure several image sizes (--image-sizes 640x480,1280x960, or a --trace with "
                     "varied requests)"),
], ids=["one-token-count", "one-image-count", "one-image-size"])
def test_a_profile_whose_shapes_do_not_vary_is_refused_naming_the_column_and_the_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, message: str) -> None:
    # With every prompt 64 tokens the fit is free to put the prompt's time in its fixed part: it predicted a
    # 2048-token text request at 67 ms where the law gives 306 ms, and the held-out report (all 64 tokens) could
    # not show it.
    path, model = tmp_path / "profile.csv", tmp_path / "model.skops"
    write_profile_csv(_degenerate(column), path)
    assert main(["profile", "--from-csv", str(path), "--out-model", str(model)]) == 2
    err = capsys.readouterr().err
    assert f"Cannot evaluate the profile: {message}" in err
    assert not model.exists()


def test_the_default_grid_varies_every_term() -> None:
    for seed in range(5):
        rows = [{"time_s": 0.0, "modality": s.modality.value, "image_count": s.image_count,
                 "image_pixels": s.image_pixels, "text_tokens": s.text_tokens, "batch_size": 1, "service_ms": 1.0}
                for s in design(ProfileGrid().draw(80, seed), 3, seed)]
        assert profile_problem(to_table(rows)) is None
    assert profile_problem(generate_profile(200)) is None


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_runtime_that_does_not_answer_is_one_line_naming_the_flag_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"127.0.0.1:{_closed_port()}"
    code = main(["profile", "--url", url, "--shapes", "3", "--out-csv", str(tmp_path / "p.csv"),
                 "--out-model", str(tmp_path / "m.skops")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith(f"Profiling failed: the runtime at {url} (--url) did not answer: ConnectError: ")
    assert "give --url HOST:PORT of a running runtime's HTTP endpoint, or leave it out" in err[-1]
    assert not (tmp_path / "m.skops").exists()


@pytest.mark.parametrize(("flags", "named"), [
    (["--test-ratio", "1.5"], "--test-ratio"), (["--test-ratio", "0"], "--test-ratio"),
    (["--concurrency", "0", "--batched-shapes", "2"], "--concurrency"), (["--rounds", "0"], "--rounds"),
    (["--batched-shapes", "-1"], "--batched-shapes"),
], ids=["ratio-above-1", "ratio-0", "concurrency-0", "rounds-0", "negative-batched"])
def test_a_bad_flag_is_refused_before_anything_is_measured(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], named: str) -> None:
    # Checked only after the measurement (--test-ratio 1.5: minutes of requests, then "test_ratio must be in
    # (0, 1)"), or never (--concurrency 0 sent no batched request and said nothing): refused at once.
    with pytest.raises(SystemExit) as exc:
        main(["profile", "--url", f"127.0.0.1:{_closed_port()}", *flags])
    assert exc.value.code == 2
    assert f"argument {named}: " in capsys.readouterr().err
