"""``modalscale profile --from-csv``: a profile CSV with a cell the fit cannot use (NaN, infinite, negative, a
fractional count, a short row, an unknown modality) is refused naming the line, the column and the fix (exit 2),
never a traceback or a model fitted on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from modalscale.autoscaler.profile_data import PROFILE_COLUMNS, generate_profile, read_profile_csv, write_profile_csv
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
