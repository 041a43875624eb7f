"""Feature extraction, the synthetic service law and the profile CSV format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from modalscale.autoscaler.features import (
    FEATURES,
    Modality,
    RequestRecord,
    features_from_columns,
    features_from_mapping,
    make_features,
)
from modalscale.autoscaler.profile_data import (
    PROFILE_COLUMNS,
    SyntheticServiceLaw,
    generate_profile,
    read_profile_csv,
    write_profile_csv,
)


def test_features_order_is_fixed_and_complete() -> None:
    assert FEATURES == (
        "image_pixels", "image_count", "text_tokens", "batch_size",
        "modality_text", "modality_image", "modality_image_text",
    )


def test_make_features_puts_counts_and_one_hot_modality_in_feature_order() -> None:
    x = make_features([
        RequestRecord(text_tokens=120),
        RequestRecord(image_pixels=640 * 480, image_count=1),
        RequestRecord(image_pixels=2 * 100 * 100, image_count=2, text_tokens=30, batch_size=4),
    ])
    assert x.shape == (3, len(FEATURES))
    np.testing.assert_array_equal(x[0], [0, 0, 120, 1, 1, 0, 0])
    np.testing.assert_array_equal(x[1], [307200, 1, 0, 1, 0, 1, 0])
    np.testing.assert_array_equal(x[2], [20000, 2, 30, 4, 0, 0, 1])


def test_make_features_of_nothing_has_zero_rows_and_all_columns() -> None:
    assert make_features([]).shape == (0, len(FEATURES))


@pytest.mark.parametrize(
    "kwargs",
    [dict(text_tokens=-1), dict(batch_size=0), dict(image_count=1), dict(image_pixels=10)],
    ids=["negative-tokens", "zero-batch", "images-without-pixels", "pixels-without-images"],
)
def test_request_record_rejects_inconsistent_values(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        RequestRecord(**kwargs)


def test_modality_is_derived_from_the_counts() -> None:
    assert RequestRecord(text_tokens=5).modality is Modality.TEXT
    assert RequestRecord(image_pixels=9, image_count=1).modality is Modality.IMAGE
    assert RequestRecord(image_pixels=9, image_count=1, text_tokens=5).modality is Modality.IMAGE_TEXT


def test_a_given_modality_that_contradicts_the_counts_names_the_row() -> None:
    with pytest.raises(ValueError, match="row 1: modality 'text'"):
        features_from_columns([0, 100], [0, 1], [5, 5], modality=["text", "text"])
    with pytest.raises(ValueError, match="unknown modality"):
        features_from_columns([0], [0], [5], modality=["audio"])


def test_features_from_mapping_names_the_missing_column() -> None:
    with pytest.raises(ValueError, match="text_tokens"):
        features_from_mapping({"image_pixels": [0], "image_count": [0]})


def test_synthetic_law_matches_its_documented_formula_by_hand() -> None:
    law = SyntheticServiceLaw(overhead_ms=60, ms_per_image=50, ms_per_megapixel=400, ms_per_kilotoken=120,
                              unshared_ratio=0.35)
    x = make_features([RequestRecord(image_pixels=1_000_000, image_count=2, text_tokens=500, batch_size=4)])
    # solo = 50*2 + 400*1 + 120*0.5 = 560 ms; mean = 60/4 + 560*(0.35 + 0.65/4) = 15 + 287 = 302 ms
    assert law.mean_ms(x)[0] == pytest.approx(302.0)
    text = make_features([RequestRecord(text_tokens=1000)])
    assert law.mean_ms(text)[0] == pytest.approx(60 + 120)


def test_synthetic_law_noise_has_mean_one() -> None:
    law = SyntheticServiceLaw(noise_sigma=0.2)
    x = np.repeat(make_features([RequestRecord(text_tokens=1000)]), 20000, axis=0)
    draws = law.sample_ms(x, np.random.default_rng(3))
    assert draws.mean() / law.mean_ms(x[:1])[0] == pytest.approx(1.0, abs=0.01)


def test_generated_profile_is_reproducible_and_covers_all_modalities() -> None:
    a = generate_profile(300, random_state=5)
    b = generate_profile(300, random_state=5)
    np.testing.assert_array_equal(a["service_ms"], b["service_ms"])
    assert set(a["modality"]) == {"text", "image", "image_text"}
    assert set(np.unique(a["batch_size"])) <= {1, 2, 4, 8}
    assert (a["service_ms"] > 0).all()


def test_profile_csv_round_trips(tmp_path: Path) -> None:
    profile = generate_profile(50, random_state=1)
    path = tmp_path / "profile.csv"
    write_profile_csv(profile, path)
    assert path.read_text().splitlines()[0] == ",".join(PROFILE_COLUMNS)
    back = read_profile_csv(path)
    for column in ("image_count", "image_pixels", "text_tokens", "batch_size"):
        np.testing.assert_array_equal(back[column], profile[column])
    np.testing.assert_allclose(back["service_ms"], profile["service_ms"], atol=5e-4)
    assert list(back["modality"]) == list(profile["modality"])


def test_profile_csv_errors_name_the_column_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("time_s,modality,image_count\n0,text,0\n")
    with pytest.raises(ValueError, match="image_pixels"):
        read_profile_csv(path)
    path.write_text(",".join(PROFILE_COLUMNS) + "\n0,text,0,0,12,1,abc\n")
    with pytest.raises(ValueError, match="line 2: column service_ms"):
        read_profile_csv(path)


def test_shipped_synthetic_profile_parses_and_trains_a_model_within_10_percent_mape() -> None:
    from modalscale.autoscaler.regressor import ServiceTimeRegressor, evaluate

    shipped = read_profile_csv(Path(__file__).resolve().parents[3] / "autoscaler" / "data" / "synthetic_profile.csv")
    assert len(shipped["service_ms"]) == 1000
    model = ServiceTimeRegressor().fit(shipped)
    held_out = generate_profile(1000, random_state=99)
    assert evaluate(model, features_from_mapping(held_out), held_out["service_ms"]).mape_ratio <= 0.10
