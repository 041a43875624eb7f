"""The service-time regressor: accuracy against baselines, fit-time validation, the safe artifact, calibration."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import sklearn
import skops.io as sio
from sklearn.preprocessing import FunctionTransformer

from modalscale.autoscaler.calibration import Calibrator
from modalscale.autoscaler.features import FEATURES, features_from_mapping
from modalscale.autoscaler.profile_data import generate_profile
from modalscale.autoscaler.regressor import (
    ARTIFACT_FORMAT_VERSION,
    ArtifactError,
    ServiceTimeRegressor,
    compare_with_baselines,
    dumps_model,
    evaluate,
    load_model,
    loads_model,
    read_manifest,
    save_model,
)


@pytest.fixture(scope="module")
def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    train, test = generate_profile(2000, random_state=11), generate_profile(1000, random_state=12)
    return features_from_mapping(train), train["service_ms"], features_from_mapping(test), test["service_ms"]


@pytest.fixture(scope="module")
def fitted(split: tuple[np.ndarray, ...]) -> ServiceTimeRegressor:
    x, y, _, _ = split
    return ServiceTimeRegressor().fit(x, y)


def test_model_beats_dummy_and_linear_in_tokens_on_held_out_mae(split: tuple[np.ndarray, ...]) -> None:
    scores = compare_with_baselines(ServiceTimeRegressor(), *split)
    assert scores["model"].mae_ms < 0.2 * scores["dummy_mean"].mae_ms
    assert scores["model"].mae_ms < 0.2 * scores["linear_in_tokens"].mae_ms
    assert scores["model"].mape_ratio <= 0.10


def test_boosted_kind_also_fits_and_predicts_positive_times(split: tuple[np.ndarray, ...]) -> None:
    x, y, xt, yt = split
    model = ServiceTimeRegressor(kind="boosted", max_iter=30).fit(x[:500], y[:500])
    assert (model.predict(xt) > 0).all()
    assert evaluate(model, xt, yt).mape_ratio < 1.0


def test_fit_accepts_profile_records_with_service_ms_column() -> None:
    profile = generate_profile(200, random_state=3)
    from_records = ServiceTimeRegressor().fit(profile)
    from_arrays = ServiceTimeRegressor().fit(features_from_mapping(profile), profile["service_ms"])
    x = features_from_mapping(profile)
    np.testing.assert_array_equal(from_records.predict(x), from_arrays.predict(x))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda x, y: (x[:, :5], y), "columns"),
        (lambda x, y: (x, -y), "service_ms must be > 0"),
        (lambda x, y: (np.where(np.arange(x.shape[1]) == FEATURES.index("batch_size"), 0, x), y), "batch_size"),
        (lambda x, y: (x[:1], y[:1]), "at least 2"),
    ],
    ids=["wrong-column-count", "non-positive-target", "zero-batch", "one-row"],
)
def test_fit_validates_its_input(split: tuple[np.ndarray, ...], mutate, message: str) -> None:
    x, y = mutate(split[0].copy(), split[1].copy())
    with pytest.raises(ValueError, match=message):
        ServiceTimeRegressor().fit(x, y)


def test_unknown_kind_is_rejected_at_fit(split: tuple[np.ndarray, ...]) -> None:
    with pytest.raises(ValueError, match="kind"):
        ServiceTimeRegressor(kind="magic").fit(split[0], split[1])


def test_additive_coefficients_are_non_negative_and_recover_the_law_roughly(fitted: ServiceTimeRegressor) -> None:
    coef = fitted.coefficients_ms()
    assert min(coef.values()) >= 0
    # law: 400 ms/MP in total at batch 1 (= per-request part + per-batch part)
    assert coef["megapixels"] + coef["megapixels_per_batch"] == pytest.approx(400, rel=0.1)


def test_bytes_round_trip_gives_identical_predictions(fitted: ServiceTimeRegressor, split) -> None:
    data = dumps_model(fitted, {"profile": "synthetic"})
    back = loads_model(data)
    np.testing.assert_array_equal(back.predict(split[2]), fitted.predict(split[2]))
    manifest = read_manifest(data)
    assert manifest["features"] == list(FEATURES)
    assert manifest["format_version"] == ARTIFACT_FORMAT_VERSION
    assert manifest["sklearn_version"] == sklearn.__version__
    assert manifest["metadata"] == {"profile": "synthetic"}


def test_file_round_trip_gives_identical_predictions(fitted: ServiceTimeRegressor, split, tmp_path: Path) -> None:
    path = tmp_path / "model.skops"
    save_model(fitted, path)
    np.testing.assert_array_equal(load_model(path).predict(split[2]), fitted.predict(split[2]))


def test_boosted_model_round_trips_with_the_trusted_type_list(split) -> None:
    model = ServiceTimeRegressor(kind="boosted", max_iter=10).fit(split[0][:300], split[1][:300])
    np.testing.assert_array_equal(loads_model(dumps_model(model)).predict(split[2]), model.predict(split[2]))


def _rewrite(data: bytes, manifest_changes: dict | None = None, model_bytes: bytes | None = None) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        model = zf.read("model.skops")
    manifest.update(manifest_changes or {})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        zf.writestr("model.skops", model if model_bytes is None else model_bytes)
    return out.getvalue()


@pytest.mark.parametrize(
    ("changes", "problem", "fix"),
    [
        ({"format_version": ARTIFACT_FORMAT_VERSION + 1}, "format_version", "re-run `modalscale profile`"),
        ({"features": list(reversed(FEATURES))}, "trained on features", "retrain"),
        ({"sklearn_version": "0.0.1"}, "scikit-learn 0.0.1", "install scikit-learn==0.0.1 or retrain"),
        ({"format": "something-else"}, "format is 'something-else'", "modalscale profile"),
    ],
    ids=["format-version", "feature-order", "sklearn-version", "format"],
)
def test_mismatched_manifest_raises_artifact_error_naming_problem_and_fix(
    fitted: ServiceTimeRegressor, changes: dict, problem: str, fix: str
) -> None:
    with pytest.raises(ArtifactError) as info:
        loads_model(_rewrite(dumps_model(fitted), changes))
    assert problem in str(info.value)
    assert fix in str(info.value)


@pytest.mark.parametrize(
    "data", [b"", b"not a zip at all", b"PK\x03\x04garbage"], ids=["empty", "text", "truncated-zip"]
)
def test_corrupt_bytes_raise_artifact_error(data: bytes) -> None:
    with pytest.raises(ArtifactError, match="corrupt"):
        loads_model(data)


def test_truncated_artifact_raises_artifact_error(fitted: ServiceTimeRegressor) -> None:
    data = dumps_model(fitted)
    with pytest.raises(ArtifactError):
        loads_model(data[: len(data) // 2])


def test_corrupt_model_entry_raises_artifact_error(fitted: ServiceTimeRegressor) -> None:
    with pytest.raises(ArtifactError):
        loads_model(_rewrite(dumps_model(fitted), model_bytes=b"\x00" * 64))


def test_untrusted_type_inside_is_refused_before_loading(fitted: ServiceTimeRegressor) -> None:
    evil = sio.dumps(FunctionTransformer(func=os.system))
    with pytest.raises(ArtifactError, match="posix.system|nt.system"):
        loads_model(_rewrite(dumps_model(fitted), model_bytes=evil))


def test_a_trusted_but_foreign_object_is_refused(fitted: ServiceTimeRegressor) -> None:
    from sklearn.linear_model import LinearRegression

    other = sio.dumps(LinearRegression().fit([[0.0], [1.0]], [0.0, 1.0]))
    with pytest.raises(ArtifactError, match="ServiceTimeRegressor"):
        loads_model(_rewrite(dumps_model(fitted), model_bytes=other))


def test_unfitted_model_cannot_be_saved() -> None:
    with pytest.raises(ArtifactError, match="fit"):
        dumps_model(ServiceTimeRegressor())


def test_missing_file_raises_artifact_error(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="cannot read"):
        load_model(tmp_path / "absent.skops")


# ------------------------------------------------------------------------------------------------ calibrator


def test_calibrator_ewma_step_matches_hand_computation() -> None:
    cal = Calibrator(smoothing_ratio=0.2, min_scale=0.5, max_scale=2.0)
    # target ratio 150/100 = 1.5; 0.8 * 1.0 + 0.2 * 1.5 = 1.1
    assert cal.update(1.0, 150.0, 100.0) == pytest.approx(1.1)


def test_calibrator_does_not_compound_repeated_observations() -> None:
    cal = Calibrator(smoothing_ratio=0.5)
    scale = 1.0
    for _ in range(60):
        scale = cal.update(scale, observed_ms=130.0, predicted_raw_ms=100.0)
    assert scale == pytest.approx(1.3, rel=1e-6)  # converges to the ratio, not 1.3 ** k


@pytest.mark.parametrize(("observed", "expected"), [(1e6, 2.0), (1e-6, 0.5)], ids=["huge", "tiny"])
def test_calibrator_stays_in_its_bounds(observed: float, expected: float) -> None:
    cal = Calibrator(smoothing_ratio=1.0, min_scale=0.5, max_scale=2.0)
    assert cal.update(1.0, observed, 100.0) == expected
    scale = 1.0
    for _ in range(100):
        scale = Calibrator().update(scale, observed, 100.0)
        assert 0.5 <= scale <= 2.0


@pytest.mark.parametrize(("observed", "predicted"), [(None, 100.0), (100.0, None), (float("nan"), 1.0), (0.0, 1.0)])
def test_calibrator_ignores_missing_or_invalid_observations(observed, predicted) -> None:
    assert Calibrator().update(1.3, observed, predicted) == 1.3


def test_calibrator_rejects_bounds_that_exclude_one() -> None:
    with pytest.raises(ValueError):
        Calibrator(min_scale=1.2, max_scale=2.0)
    with pytest.raises(ValueError):
        Calibrator(smoothing_ratio=0.0)
