"""The operator's name for the typed InferenceService spec: a re-export of :mod:`modalscale.api.inferenceservice`.

The spec is parsed once there (CRD defaults and rules; camelCase -> snake_case happens there only) and every
consumer (planner, autoscaler policy, runtime config, pricing) takes the typed pieces.
"""

from __future__ import annotations

from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import (
    GPU_RESOURCE,
    TOLERATION_KEYS,
    DynamicBatchingSpec,
    IsvcSpec,
    ModelSpec,
    PlacementSpec,
    ResourceSpec,
    RuntimeSpec,
    ScalingSpec,
    ServiceSpec,
    parse_isvc,
    parse_spec,
)

__all__ = ["GPU_RESOURCE", "TOLERATION_KEYS", "DynamicBatchingSpec", "InvalidSpec", "IsvcSpec", "ModelSpec",
           "PlacementSpec", "ResourceSpec", "RuntimeSpec", "ScalingSpec", "ServiceSpec", "parse_isvc", "parse_spec"]
