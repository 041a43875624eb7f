"""The service-time model read from the ConfigMap of spec.model.costModelRef: loaded, refused with a reason, cached."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest
from kubernetes.client.rest import ApiException

from modalscale.autoscaler.features import features_from_columns
from modalscale.autoscaler.profile_data import generate_profile
from modalscale.autoscaler.regressor import ServiceTimeRegressor, dumps_model
from modalscale.operator.autoscale.model import (
    ARTIFACT_LOADED,
    COST_MODEL_NOT_FOUND,
    INVALID_COST_MODEL,
    NO_COST_MODEL_REF,
    ServiceTimeModelCache,
    decode_service_time_model,
)


@pytest.fixture(scope="module")
def artifact() -> tuple[ServiceTimeRegressor, bytes]:
    model = ServiceTimeRegressor().fit(generate_profile(300, random_state=3))
    return model, dumps_model(model, {"profile": "synthetic"})


def configmap(binary: dict[str, bytes] | None = None, data: dict[str, str] | None = None,
              version: str = "1") -> dict[str, Any]:
    cm: dict[str, Any] = {"metadata": {"name": "service-time", "resourceVersion": version}}
    if binary is not None:
        cm["binaryData"] = {k: base64.b64encode(v).decode() for k, v in binary.items()}
    if data is not None:
        cm["data"] = data
    return cm


def test_artifact_in_binary_data_loads_and_predicts_like_the_original(artifact: Any) -> None:
    model, raw = artifact
    loaded, status = decode_service_time_model(configmap({"model.skops": raw}), "service-time", "model.skops")
    assert status.loaded and status.reason == ARTIFACT_LOADED
    x = features_from_columns([0, 307200, 614400], [0, 1, 2], [40, 0, 10])
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


@pytest.mark.parametrize(("cm", "reason", "words"), [
    (None, COST_MODEL_NOT_FOUND, "not found"),
    (configmap({"other": b"x"}), COST_MODEL_NOT_FOUND, "no binaryData key"),
    (configmap(data={"model.skops": "text"}), COST_MODEL_NOT_FOUND, "must be binaryData"),
    ({"metadata": {}, "binaryData": {"model.skops": "not base64!"}}, INVALID_COST_MODEL, "not base64"),
    (configmap({"model.skops": b"definitely not a zip"}), INVALID_COST_MODEL, "corrupt"),
], ids=["no-configmap", "no-key", "key-in-data", "bad-base64", "corrupt-artifact"])
def test_unusable_configmaps_are_refused_with_a_reason_and_the_fallback(cm: Any, reason: str, words: str) -> None:
    model, status = decode_service_time_model(cm, "service-time", "model.skops")
    assert model is None and not status.loaded and status.reason == reason
    assert words in status.message and "falls back to the Utilization policy" in status.message


class RecordingCore:
    """Records ConfigMap reads (edge-case test of the cache; the real read is in the integration test)."""

    def __init__(self, cm: dict[str, Any] | None) -> None:
        self.cm = cm
        self.reads = 0

    def read_namespaced_config_map(self, name: str, namespace: str, _preload_content: bool) -> Any:
        self.reads += 1
        if self.cm is None:
            raise ApiException(status=404, reason="Not Found")
        return type("Resp", (), {"data": json.dumps(self.cm).encode()})()


def test_cache_loads_again_only_when_the_resource_version_changes(artifact: Any, monkeypatch: Any) -> None:
    _, raw = artifact
    core = RecordingCore(configmap({"model.skops": raw}, version="7"))
    cache = ServiceTimeModelCache(core)
    import modalscale.operator.autoscale.model as module

    loads = []
    real = module.decode_service_time_model
    monkeypatch.setattr(module, "decode_service_time_model", lambda *a: loads.append(a) or real(*a))
    first, _ = cache.load("ml", "service-time", "model.skops")
    second, _ = cache.load("ml", "service-time", "model.skops")
    assert first is second and len(loads) == 1 and core.reads == 2
    core.cm = configmap({"model.skops": b"broken"}, version="8")
    third, status = cache.load("ml", "service-time", "model.skops")
    assert third is None and status.reason == INVALID_COST_MODEL and len(loads) == 2


def test_missing_reference_and_missing_configmap(artifact: Any) -> None:
    cache = ServiceTimeModelCache(RecordingCore(None))
    assert cache.load("ml", None, "model.skops")[1].reason == NO_COST_MODEL_REF
    assert cache.load("ml", "service-time", "model.skops")[1].reason == COST_MODEL_NOT_FOUND


def test_other_api_errors_propagate() -> None:
    class Failing(RecordingCore):
        def read_namespaced_config_map(self, *a: Any, **k: Any) -> Any:
            raise ApiException(status=500, reason="boom")

    with pytest.raises(ApiException):
        ServiceTimeModelCache(Failing(None)).load("ml", "service-time", "model.skops")
