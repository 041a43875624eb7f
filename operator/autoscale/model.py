"""The service-time model of an InferenceService: read from the ConfigMap named by ``spec.model.costModelRef``.

The artifact (written by ``modalscale profile``) sits in the ConfigMap's ``binaryData`` under ``costModelRef.key``
(default ``model.skops``). :func:`decode_service_time_model` (pure apart from deserialising with skops'
trusted-type check) turns the ConfigMap into a model or a ``CostModelLoaded=False`` reason;
:class:`ServiceTimeModelCache` reads the ConfigMap and loads the artifact again only when its ``resourceVersion``
changes. The API names ``costModelRef`` and ``CostModelLoaded`` (with its reasons) keep their spelling: renaming them
would break stored objects; "cost" elsewhere means money only.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from modalscale.api.conditions import (  # condition types and reasons: one module per kind
    ARTIFACT_LOADED,
    COST_MODEL_NOT_FOUND,
    INVALID_COST_MODEL,
    NO_COST_MODEL_REF,
)
from modalscale.operator.autoscale.plan import ServiceTimeModelStatus
from modalscale.operator.isvc.observe import read_json

if TYPE_CHECKING:
    from modalscale.autoscaler.regressor import ServiceTimeRegressor

_FALLBACK = "; Predictive mode falls back to the Utilization policy"


def decode_service_time_model(configmap: Mapping[str, Any] | None, name: str, key: str
                               ) -> tuple[ServiceTimeRegressor | None, ServiceTimeModelStatus]:
    """The model in ``configmap.binaryData[key]``, or None and the reason it cannot be used.

    Args:
        configmap: The ConfigMap as the API returns it (``binaryData`` values base64), None when it is missing.
        name: Its name (for messages).
        key: ``costModelRef.key``.
    Returns:
        ``(model, status)``; ``status.loaded`` is False with reason ``CostModelNotFound`` (no ConfigMap, no key,
        or the key only in ``data``) or ``InvalidCostModel`` (not base64, or ``ArtifactError``: corrupt, foreign,
        another scikit-learn version, untrusted types).
    """
    if configmap is None:
        return None, ServiceTimeModelStatus(False, COST_MODEL_NOT_FOUND, f"ConfigMap {name} not found{_FALLBACK}")
    binary = configmap.get("binaryData") or {}
    if key not in binary:
        where = " (it is in data; the artifact must be binaryData)" if key in (configmap.get("data") or {}) else ""
        return None, ServiceTimeModelStatus(False, COST_MODEL_NOT_FOUND,
                                            f"ConfigMap {name} has no binaryData key {key!r}{where}{_FALLBACK}")
    try:
        raw = base64.b64decode(binary[key], validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        return None, ServiceTimeModelStatus(False, INVALID_COST_MODEL,
                                            f"ConfigMap {name} key {key}: not base64 ({exc}){_FALLBACK}")
    # The regressor's stack (scikit-learn, SciPy, skops: ~110 MB of RSS) is imported on the first artifact decoded,
    # not when the operator starts: an operator whose services have no costModelRef never loads it.
    from modalscale.autoscaler.regressor import ArtifactError, loads_model

    try:
        model = loads_model(raw)
    except ArtifactError as exc:
        return None, ServiceTimeModelStatus(False, INVALID_COST_MODEL,
                                            f"ConfigMap {name} key {key}: {exc}{_FALLBACK}")
    return model, ServiceTimeModelStatus(True, ARTIFACT_LOADED,
                                         f"service-time model loaded from ConfigMap {name} key {key} "
                                         f"({len(raw)} bytes)")


class ServiceTimeModelCache:
    """Reads the ConfigMaps of service-time models through a ``CoreV1Api``; keeps each decoded model per
    ``resourceVersion``.

    Thread-safe (daemons of several InferenceServices decide in worker threads).
    """

    def __init__(self, core: Any) -> None:
        self.core = core
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str, str],
                          tuple[str, ServiceTimeRegressor | None, ServiceTimeModelStatus]] = {}

    def load(self, namespace: str, name: str | None, key: str
             ) -> tuple[ServiceTimeRegressor | None, ServiceTimeModelStatus]:
        """The model of ``costModelRef`` (``name`` None = no reference).

        Raises:
            kubernetes.client.rest.ApiException: reading the ConfigMap failed with anything but 404.
        """
        if not name:
            return None, ServiceTimeModelStatus(False, NO_COST_MODEL_REF,
                                                f"spec.model.costModelRef is not set{_FALLBACK}")
        configmap = read_json(self.core.read_namespaced_config_map, name, namespace)
        version = str(((configmap or {}).get("metadata") or {}).get("resourceVersion", ""))
        cache_key = (namespace, name, key)
        with self._lock:
            hit = self._cache.get(cache_key)
            if hit is not None and configmap is not None and hit[0] == version:
                return hit[1], hit[2]
        model, status = decode_service_time_model(configmap, name, key)
        with self._lock:
            if configmap is None:
                self._cache.pop(cache_key, None)
            else:
                self._cache[cache_key] = (version, model, status)
        return model, status
