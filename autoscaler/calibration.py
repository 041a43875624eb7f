"""Online calibration of the service-time model from observed p95 latency (the policy's ``Calibrator``).

Its own module, free of scikit-learn and skops, so that the replica policy (``modalscale.autoscaler.policy``) and
the operator that imports it load the regressor's stack only when a service-time model is first decoded
(``modalscale.operator.autoscale.model``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Calibrator:
    """Online multiplicative correction of the model's service times from observed p95 latency.

    ``scale_new = clip((1 - smoothing_ratio) * scale + smoothing_ratio * clip(observed / predicted_raw))`` where
    ``predicted_raw`` is the p95 predicted with the UNcalibrated model. Because the target ratio never involves the
    current scale, repeated updates converge to ``observed / predicted_raw`` instead of compounding.

    Attributes:
        smoothing_ratio: EWMA weight of the newest ratio, in (0, 1].
        min_scale: Lower bound of the scale.
        max_scale: Upper bound of the scale.
    """

    smoothing_ratio: float = 0.2
    min_scale: float = 0.5
    max_scale: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.smoothing_ratio <= 1:
            raise ValueError(f"smoothing_ratio must be in (0, 1], got {self.smoothing_ratio}")
        if not 0 < self.min_scale <= 1 <= self.max_scale:
            raise ValueError(f"need 0 < min_scale <= 1 <= max_scale, got [{self.min_scale}, {self.max_scale}]")

    def update(self, scale: float, observed_ms: float | None, predicted_raw_ms: float | None) -> float:
        """New scale after one observation; unchanged when either value is missing, non-finite or <= 0."""
        if observed_ms is None or predicted_raw_ms is None:
            return self.clip(scale)
        if (not (math.isfinite(observed_ms) and math.isfinite(predicted_raw_ms))
                or observed_ms <= 0 or predicted_raw_ms <= 0):
            return self.clip(scale)
        target = self.clip(observed_ms / predicted_raw_ms)
        return self.clip((1 - self.smoothing_ratio) * self.clip(scale) + self.smoothing_ratio * target)

    def clip(self, scale: float) -> float:
        """``scale`` bounded to ``[min_scale, max_scale]``."""
        return min(self.max_scale, max(self.min_scale, float(scale)))
