"""The learned per-request service-time model, its baselines, its safe artifact and its online calibration.

Model choice. The default ``kind="additive"`` is a non-negative linear model on physically meaningful terms
(megapixels, images, kilotokens and a per-modality constant, each split into a batch-shared part ``/batch`` and a
per-request part), fitted on relative error (weights ``1/y^2``). Why: a vision encoder's and a prefill's time grow
about linearly in pixels and tokens; a linear service-time model extrapolates to resolutions beyond the profile (a 4x
pixel shift), stays monotone, is unbiased on class means (the policy predicts on per-class mean features), needs
a small profile and gets MAPE near the noise floor (about 6 % for 8 % lognormal noise) on the synthetic law.
``kind="boosted"`` (HistGradientBoostingRegressor on log service time) is kept for real profiles that turn out to
be non-linear; it does not extrapolate past the profiled range.

Artifact. A zip holding ``manifest.json`` (format, version, ``FEATURES`` order, scikit-learn/skops/numpy
versions, caller metadata) and ``model.skops`` (skops.io, loaded with an explicit trusted-type list; pickle is
never used). The manifest is checked before the model is deserialised.
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import sklearn
import skops
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, RegressorMixin, TransformerMixin
from sklearn.compose import ColumnTransformer, TransformedTargetRegressor
from sklearn.dummy import DummyRegressor
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import LinearRegression
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted, validate_data

from modalscale.autoscaler.features import FEATURES, features_from_mapping

# Import skops.io without torch. Importing skops.io lists scikit-learn's estimators (sklearn.utils.all_estimators),
# whose pkgutil.walk_packages imports every sub-package of sklearn to look inside, among them
# sklearn.externals.array_api_compat.torch, which imports torch (measured: 7.4 s -> 2.9 s and 872 -> 192 MB RSS for
# the operator's handler modules) although no estimator lives there. A module that is None in sys.modules raises
# ImportError, which walk_packages skips; the entry is removed at once, so torch users in this process are unaffected.
# tests/unit/test_operator_imports.py guards it.
_ARRAY_API_TORCH = "sklearn.externals.array_api_compat.torch"
_block_torch = _ARRAY_API_TORCH not in sys.modules and "skops.io" not in sys.modules
if _block_torch:
    sys.modules[_ARRAY_API_TORCH] = None  # type: ignore[assignment]
try:
    import skops.io as sio  # after the guard above
finally:
    if _block_torch and sys.modules.get(_ARRAY_API_TORCH, False) is None:
        del sys.modules[_ARRAY_API_TORCH]

ARTIFACT_FORMAT = "modalscale.service-time-model"
"""``format`` field of the artifact manifest."""
ARTIFACT_FORMAT_VERSION = 1
"""Bumped whenever the artifact layout or the model's feature semantics change."""

TRUSTED_TYPES: tuple[str, ...] = (
    "modalscale.autoscaler.regressor.ServiceTimeRegressor",
    "modalscale.autoscaler.regressor.PhysicalTerms",
    "sklearn.pipeline.Pipeline",
    "sklearn.linear_model._base.LinearRegression",
    "sklearn.compose._target.TransformedTargetRegressor",
    "sklearn.ensemble._hist_gradient_boosting.gradient_boosting.HistGradientBoostingRegressor",
    "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn._loss.loss.HalfSquaredError",
    "sklearn._loss.link.IdentityLink",
    "sklearn._loss.link.Interval",
    "numpy.log",
    "numpy.exp",
)
"""Every type the artifact may contain; anything else makes :func:`loads_model` refuse the file."""

_I_PIXELS = FEATURES.index("image_pixels")
_I_IMAGES = FEATURES.index("image_count")
_I_TOKENS = FEATURES.index("text_tokens")
_I_BATCH = FEATURES.index("batch_size")
_I_MODALITY = [FEATURES.index(f) for f in ("modality_text", "modality_image", "modality_image_text")]

TERMS: tuple[str, ...] = tuple(
    f"{name}{suffix}"
    for suffix in ("", "_per_batch")
    for name in ("megapixels", "images", "kilotokens", "text_const", "image_const", "image_text_const")
)
"""Output columns of :class:`PhysicalTerms`; ``*_per_batch`` = the term divided by ``batch_size``."""


class ArtifactError(Exception):
    """A model artifact cannot be used; the message names the problem and the fix."""


class PhysicalTerms(TransformerMixin, BaseEstimator):  # type: ignore[misc]  # sklearn ships no types
    """Map ``FEATURES`` columns to physical service-time terms (``TERMS``), shape ``(n, 12)``.

    Pixels become megapixels and tokens kilotokens so coefficients read as ms per MP / per 1000 tokens; each term
    appears once as is (per-request time) and once divided by ``batch_size`` (time shared by the batch).
    """

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> PhysicalTerms:
        """Check ``X`` has ``len(FEATURES)`` columns; nothing is learned."""
        validate_data(self, X, reset=True)
        if self.n_features_in_ != len(FEATURES):
            raise ValueError(f"X has {self.n_features_in_} columns; expected {len(FEATURES)} in FEATURES order")
        return self

    def transform(self, X: ArrayLike) -> NDArray[np.float64]:
        """Physical terms, shape ``(n, len(TERMS))``."""
        check_is_fitted(self)
        x = validate_data(self, X, reset=False)
        base = np.column_stack(
            [x[:, _I_PIXELS] / 1e6, x[:, _I_IMAGES], x[:, _I_TOKENS] / 1e3] + [x[:, i] for i in _I_MODALITY]
        )
        return np.hstack([base, base / x[:, [_I_BATCH]]])

    def get_feature_names_out(self, input_features: Any = None) -> NDArray[np.object_]:
        """Names of the output columns (``TERMS``)."""
        return np.asarray(TERMS, dtype=object)


class ServiceTimeRegressor(RegressorMixin, BaseEstimator):  # type: ignore[misc]  # sklearn ships no types
    """Predict one request's service time (ms in an execution slot, queueing excluded) from its features.

    Args:
        kind: ``"additive"`` (default; non-negative linear in physical terms) or ``"boosted"`` (gradient boosted
            trees on log service time). See the module docstring for why additive is the default.
        relative_loss: Fit relative rather than absolute error (weights ``1/y^2`` for additive; the log target
            does this for boosted).
        max_iter: Boosting iterations (boosted only).
        learning_rate: Boosting learning rate (boosted only).
        random_state: Seed; fixed so training is reproducible (boosted only; additive is deterministic).

    Attributes:
        pipeline_: The fitted scikit-learn ``Pipeline`` (terms -> regressor).
        n_features_in_: ``len(FEATURES)``.
        feature_names_: ``FEATURES`` at fit time.
    """

    def __init__(
        self,
        kind: str = "additive",
        relative_loss: bool = True,
        max_iter: int = 300,
        learning_rate: float = 0.1,
        random_state: int = 0,
    ) -> None:
        self.kind = kind
        self.relative_loss = relative_loss
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.random_state = random_state

    def fit(self, X: Any, y: ArrayLike | None = None, sample_weight: ArrayLike | None = None) -> ServiceTimeRegressor:
        """Fit on a feature matrix or on profile records.

        Args:
            X: Either an array ``(n, len(FEATURES))`` in ``FEATURES`` order, or profile records with the profile
                CSV columns (a dict of arrays, a pandas DataFrame or a numpy structured array; see
                ``profile_data``), in which case ``y`` defaults to the ``service_ms`` column.
            y: Service time per request, ms, shape ``(n,)``; every value must be > 0.
            sample_weight: Optional ``(n,)`` weights, multiplied into the relative-loss weights.
        Returns:
            self.
        Raises:
            ValueError: unknown ``kind``; wrong column count; negative or non-finite features; ``batch_size < 1``;
                ``y <= 0``; fewer than 2 rows.
        """
        if self.kind not in ("additive", "boosted"):
            raise ValueError(f"kind must be 'additive' or 'boosted', got {self.kind!r}")
        if isinstance(X, Mapping) or getattr(getattr(X, "dtype", None), "names", None) or hasattr(X, "columns"):
            if y is None:
                y = np.asarray(X["service_ms"], dtype=np.float64)
            X = features_from_mapping(X)
        if y is None:
            raise ValueError("y (service_ms) is required when X is a feature matrix")
        x, target = validate_data(self, X, y, reset=True, y_numeric=True)
        if x.shape[1] != len(FEATURES):
            raise ValueError(f"X has {x.shape[1]} columns; expected {len(FEATURES)} in FEATURES order {FEATURES}")
        if x.shape[0] < 2:
            raise ValueError("need at least 2 profile rows to fit")
        if (x[:, [_I_PIXELS, _I_IMAGES, _I_TOKENS]] < 0).any() or (x[:, _I_BATCH] < 1).any():
            raise ValueError("features must be >= 0 and batch_size >= 1")
        if (target <= 0).any():
            raise ValueError("service_ms must be > 0 for every row")
        weight = np.ones_like(target) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if self.kind == "additive":
            if self.relative_loss:
                weight = weight / target**2
            self.pipeline_ = Pipeline(
                [("terms", PhysicalTerms()), ("linear", LinearRegression(positive=True, fit_intercept=False))]
            )
            self.pipeline_.fit(x, target, linear__sample_weight=weight)
        else:
            boosted = HistGradientBoostingRegressor(
                max_iter=self.max_iter, learning_rate=self.learning_rate, random_state=self.random_state
            )
            regressor: Any = (
                TransformedTargetRegressor(regressor=boosted, func=np.log, inverse_func=np.exp)
                if self.relative_loss
                else boosted
            )
            self.pipeline_ = Pipeline([("terms", PhysicalTerms()), ("regressor", regressor)])
            self.pipeline_.fit(x, target, regressor__sample_weight=weight)
        self.feature_names_ = list(FEATURES)
        return self

    def predict(self, X: ArrayLike) -> NDArray[np.float64]:
        """Predicted service time, ms, shape ``(n,)``, each >= 0.001 ms.

        Raises:
            sklearn.exceptions.NotFittedError: before ``fit``.
            ValueError: ``X`` does not have ``len(FEATURES)`` columns.
        """
        check_is_fitted(self, "pipeline_")
        x = validate_data(self, X, reset=False)
        return cast(NDArray[np.float64], np.maximum(self.pipeline_.predict(x), 1e-3))

    def coefficients_ms(self) -> dict[str, float]:
        """Fitted coefficient per physical term (additive only), e.g. ``{"megapixels": ms per MP, ...}``."""
        check_is_fitted(self, "pipeline_")
        if self.kind != "additive":
            raise ValueError("coefficients_ms() exists only for kind='additive'")
        return {t: float(c) for t, c in zip(TERMS, self.pipeline_.named_steps["linear"].coef_, strict=True)}


def baseline_models() -> dict[str, Any]:
    """Unfitted baselines the model must beat: the training mean and a linear model in text tokens only."""
    return {
        "dummy_mean": DummyRegressor(strategy="mean"),
        "linear_in_tokens": Pipeline(
            [
                ("tokens", ColumnTransformer([("text_tokens", "passthrough", [_I_TOKENS])])),
                ("linear", LinearRegression()),
            ]
        ),
    }


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Held-out error of one model.

    Attributes:
        mae_ms: Mean absolute error, ms.
        mape_ratio: Mean absolute percentage error as a ratio (0.10 = 10 %).
        n_requests: Rows evaluated.
    """

    mae_ms: float
    mape_ratio: float
    n_requests: int


def evaluate(model: Any, X: ArrayLike, y: ArrayLike) -> Evaluation:
    """MAE (ms) and MAPE (ratio) of a fitted ``model`` on held-out ``X`` ``(n, n_features)``, ``y`` ``(n,)`` ms.

    Raises:
        ValueError: empty data or ``y <= 0`` (MAPE undefined).
    """
    target = np.asarray(y, dtype=np.float64)
    if target.size == 0 or (target <= 0).any():
        raise ValueError("evaluate() needs at least one row and y > 0")
    error = np.abs(np.asarray(model.predict(X), dtype=np.float64) - target)
    return Evaluation(mae_ms=float(error.mean()), mape_ratio=float((error / target).mean()), n_requests=target.size)


def compare_with_baselines(
    model: ServiceTimeRegressor, X_train: ArrayLike, y_train: ArrayLike, X_test: ArrayLike, y_test: ArrayLike
) -> dict[str, Evaluation]:
    """Fit ``model`` and each of :func:`baseline_models` on the training split; evaluate all on the test split.

    Returns:
        ``{"model": ..., "dummy_mean": ..., "linear_in_tokens": ...}``.
    """
    out = {"model": evaluate(model.fit(X_train, y_train), X_test, y_test)}
    for name, baseline in baseline_models().items():
        out[name] = evaluate(baseline.fit(X_train, y_train), X_test, y_test)
    return out


# --------------------------------------------------------------------------------------------------- artifact


def dumps_model(model: ServiceTimeRegressor, metadata: Mapping[str, str] | None = None) -> bytes:
    """Serialise a fitted model to bytes (for a ConfigMap's ``binaryData`` or a file).

    Args:
        model: A fitted :class:`ServiceTimeRegressor`.
        metadata: Free-form strings stored in the manifest (e.g. ``{"profile": "synthetic"}``).
    Raises:
        ArtifactError: the model is not a fitted ServiceTimeRegressor.
    """
    if not isinstance(model, ServiceTimeRegressor) or not hasattr(model, "pipeline_"):
        raise ArtifactError("only a fitted ServiceTimeRegressor can be saved; call fit() first")
    manifest = {
        "format": ARTIFACT_FORMAT,
        "format_version": ARTIFACT_FORMAT_VERSION,
        "features": list(FEATURES),
        "sklearn_version": sklearn.__version__,
        "skops_version": skops.__version__,
        "numpy_version": np.__version__,
        "metadata": {str(k): str(v) for k, v in (metadata or {}).items()},
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps(manifest, indent=2, sort_keys=True))
        zf.writestr("model.skops", sio.dumps(model))
    return buffer.getvalue()


def read_manifest(data: bytes) -> dict[str, Any]:
    """Read and check an artifact's manifest without deserialising the model.

    Raises:
        ArtifactError: not a zip, no/invalid manifest, another format or format version, another feature order,
            or another scikit-learn version than the one installed.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            manifest = json.loads(zf.read("manifest.json"))
    except (zipfile.BadZipFile, KeyError, ValueError, UnicodeDecodeError, EOFError) as exc:
        raise ArtifactError(
            f"model artifact is corrupt or not a modalscale model ({exc}); re-create it with "
            "`modalscale profile` (or regressor.save_model) and store the file unmodified"
        ) from exc
    if not isinstance(manifest, dict) or manifest.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(
            f"model artifact format is {manifest.get('format') if isinstance(manifest, dict) else None!r}, "
            f"expected {ARTIFACT_FORMAT!r}; point costModelRef at a file written by `modalscale profile`"
        )
    version = manifest.get("format_version")
    if version != ARTIFACT_FORMAT_VERSION:
        raise ArtifactError(
            f"model artifact format_version is {version!r}, this modalscale reads {ARTIFACT_FORMAT_VERSION}; "
            "re-run `modalscale profile` with this modalscale version to rewrite the model"
        )
    features = manifest.get("features")
    if features != list(FEATURES):
        raise ArtifactError(
            f"model artifact was trained on features {features!r}, but this modalscale uses {list(FEATURES)!r}; "
            "retrain the model (`modalscale profile`) so the feature order matches"
        )
    trained = manifest.get("sklearn_version")
    if trained != sklearn.__version__:
        raise ArtifactError(
            f"model artifact was saved with scikit-learn {trained}, but {sklearn.__version__} is installed; "
            f"install scikit-learn=={trained} or retrain the model (`modalscale profile`) with this version"
        )
    return manifest


def loads_model(data: bytes) -> ServiceTimeRegressor:
    """Load a model from :func:`dumps_model` bytes; checks the manifest first, then loads with ``TRUSTED_TYPES``.

    Raises:
        ArtifactError: see :func:`read_manifest`; also an untrusted type inside, a corrupt model entry, or an
            object that is not a fitted ServiceTimeRegressor with ``len(FEATURES)`` inputs.
    """
    read_manifest(data)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            payload = zf.read("model.skops")
        untrusted = [t for t in sio.get_untrusted_types(data=payload) if t not in TRUSTED_TYPES]
    except (zipfile.BadZipFile, KeyError, ValueError, EOFError) as exc:
        raise ArtifactError(f"model artifact's model.skops entry is missing or corrupt ({exc}); re-create it") from exc
    if untrusted:
        raise ArtifactError(
            f"model artifact contains types outside the trusted list: {untrusted}; refusing to load. Only models "
            "saved by modalscale's regressor.save_model are accepted"
        )
    try:
        model = sio.loads(payload, trusted=list(TRUSTED_TYPES))
    except Exception as exc:  # skops raises many types on malformed input; all mean "unusable artifact"
        raise ArtifactError(
            f"model artifact could not be deserialised ({type(exc).__name__}: {exc}); re-create it"
        ) from exc
    if not isinstance(model, ServiceTimeRegressor) or getattr(model, "n_features_in_", None) != len(FEATURES):
        raise ArtifactError("model artifact does not hold a fitted ServiceTimeRegressor over FEATURES; re-create it")
    return model


def save_model(model: ServiceTimeRegressor, path: str | Path, metadata: Mapping[str, str] | None = None) -> None:
    """Write :func:`dumps_model` bytes to ``path``."""
    Path(path).write_bytes(dumps_model(model, metadata))


def load_model(path: str | Path) -> ServiceTimeRegressor:
    """Read a model saved by :func:`save_model`.

    Raises:
        ArtifactError: as :func:`loads_model`; also when the file cannot be read.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ArtifactError(f"cannot read model artifact {path}: {exc}") from exc
    return loads_model(data)
