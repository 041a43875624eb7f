"""The autoscaler's decisions as Prometheus metrics on the operator's registry (``Deps.metrics.registry``).

Every series carries ``stage``: ``front`` for the service's own decision (``status.autoscaler``; a service without
``spec.stages`` has only this one), ``image-encoder`` for a staged service's image encoder pool
(``status.stages[image-encoder].autoscaler``, issue 24).
"""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge

from modalscale.autoscaler.features import MODALITIES
from modalscale.autoscaler.policy import Decision
from modalscale.operator.isvc.objects import STAGE_FRONT, STAGE_IMAGE_ENCODER

STAGES = (STAGE_FRONT, STAGE_IMAGE_ENCODER)
"""The values of the ``stage`` label: the front's decision, the image encoder pool's."""


class AutoscalerMetrics:
    """Gauges of the latest decision per InferenceService and stage, and a counter of decisions by reason.

    Metric names (documented in docs/operations.md with the operator's other metrics); ``stage`` is ``front`` or
    ``image-encoder`` (:data:`STAGES`):

    - ``modalscale_autoscaler_desired_replicas{namespace,inferenceservice,stage}``: replicas of the latest valid
      decision;
    - ``modalscale_autoscaler_offered_load_erlangs{namespace,inferenceservice,stage}``: predicted busy slots
      (Predictive mode; the front only);
    - ``modalscale_autoscaler_predicted_service_milliseconds{namespace,inferenceservice,stage,modality}``:
      calibrated service time per request class;
    - ``modalscale_autoscaler_arrival_requests_per_second{namespace,inferenceservice,stage,modality}``: observed
      request rate;
    - ``modalscale_autoscaler_utilization_ratio{namespace,inferenceservice,stage}``: busy fraction (0..1) of ready
      slots;
    - ``modalscale_autoscaler_metrics_available{namespace,inferenceservice,stage}`` and ``..._cost_model_loaded``
      (the service-time model, the front only; the exported name keeps its original spelling): 1 or 0;
    - ``modalscale_autoscaler_decisions_total{namespace,inferenceservice,stage,reason,valid}``.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        ids = ["namespace", "inferenceservice", "stage"]
        self.desired = Gauge("modalscale_autoscaler_desired_replicas",
                             "Replicas recommended by the latest valid autoscaler decision", ids, registry=registry)
        self.load = Gauge("modalscale_autoscaler_offered_load_erlangs",
                          "Offered load (arrival rate x predicted service time) in erlangs", ids, registry=registry)
        self.service = Gauge("modalscale_autoscaler_predicted_service_milliseconds",
                             "Calibrated predicted service time per request, by modality class",
                             ids + ["modality"], registry=registry)
        self.rate = Gauge("modalscale_autoscaler_arrival_requests_per_second",
                          "Observed inference request rate by modality class", ids + ["modality"], registry=registry)
        self.utilization = Gauge("modalscale_autoscaler_utilization_ratio",
                                 "Busy fraction of the ready execution slots", ids, registry=registry)
        self.metrics_available = Gauge("modalscale_autoscaler_metrics_available",
                                       "1 when the autoscaler could read the metrics its mode needs", ids,
                                       registry=registry)
        self.service_time_model_loaded = Gauge("modalscale_autoscaler_cost_model_loaded",
                                               "1 when the service-time model is loaded", ids, registry=registry)
        self.decisions = Counter("modalscale_autoscaler_decisions_total", "Autoscaler decisions by reason",
                                 ids + ["reason", "valid"], registry=registry)
        self._per_object = [self.desired, self.load, self.utilization, self.metrics_available,
                            self.service_time_model_loaded]
        self._per_class = [self.service, self.rate]

    def record(self, namespace: str, name: str, decision: Decision, metrics_available: bool,
               service_time_model_loaded: bool | None, utilization_ratio: float | None,
               stage: str = STAGE_FRONT) -> None:
        """Export one decision of ``stage`` (:data:`STAGES`; ``service_time_model_loaded`` None leaves that gauge
        alone, as for the image encoder pool, which has no service-time model)."""
        ids = {"namespace": namespace, "inferenceservice": name, "stage": stage}
        self.decisions.labels(reason=decision.reason.value, valid=str(decision.valid).lower(), **ids).inc()
        if decision.valid:
            self.desired.labels(**ids).set(decision.desired_replicas)
        self.metrics_available.labels(**ids).set(1 if metrics_available else 0)
        if service_time_model_loaded is not None:
            self.service_time_model_loaded.labels(**ids).set(1 if service_time_model_loaded else 0)
        if utilization_ratio is not None and math.isfinite(utilization_ratio):
            self.utilization.labels(**ids).set(utilization_ratio)
        f = decision.features
        if "offered_load_erlangs" in f:
            self.load.labels(**ids).set(f["offered_load_erlangs"])
        for m in MODALITIES:
            if f"{m.value}_rps" in f:
                self.rate.labels(modality=m.value, **ids).set(f[f"{m.value}_rps"])
            if f"{m.value}_service_ms" in f:
                self.service.labels(modality=m.value, **ids).set(f[f"{m.value}_service_ms"])

    def forget(self, namespace: str, name: str, stages: tuple[str, ...] = STAGES) -> None:
        """Drop the gauges of ``stages`` of an InferenceService: all of them when its autoscaler stopped (deleted,
        or mode Fixed), the image encoder pool's when it takes no decision (no ``spec.stages``, front at 0)."""
        for stage in stages:
            for gauge in self._per_object:
                try:
                    gauge.remove(namespace, name, stage)
                except KeyError:
                    pass
            for gauge in self._per_class:
                for m in MODALITIES:
                    try:
                        gauge.remove(namespace, name, stage, m.value)
                    except KeyError:
                        pass
