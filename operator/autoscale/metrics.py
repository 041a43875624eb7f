"""The autoscaler's decisions as Prometheus metrics on the operator's registry (``Deps.metrics.registry``)."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge

from modalscale.autoscaler.features import MODALITIES
from modalscale.autoscaler.policy import Decision


class AutoscalerMetrics:
    """Gauges of the latest decision per InferenceService and a counter of decisions by reason.

    Metric names (documented in the README with the operator's other metrics):

    - ``modalscale_autoscaler_desired_replicas{namespace,inferenceservice}``: replicas of the latest valid decision;
    - ``modalscale_autoscaler_offered_load_erlangs{namespace,inferenceservice}``: predicted busy slots
      (Predictive mode);
    - ``modalscale_autoscaler_predicted_service_milliseconds{namespace,inferenceservice,modality}``: calibrated
      service time per request class;
    - ``modalscale_autoscaler_arrival_requests_per_second{namespace,inferenceservice,modality}``: observed request rate;
    - ``modalscale_autoscaler_utilization_ratio{namespace,inferenceservice}``: busy fraction of ready slots;
    - ``modalscale_autoscaler_metrics_available{namespace,inferenceservice}`` and ``..._cost_model_loaded``
      (the service-time model; the exported name keeps its original spelling): 1 or 0;
    - ``modalscale_autoscaler_decisions_total{namespace,inferenceservice,reason,valid}``.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        ids = ["namespace", "inferenceservice"]
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
               service_time_model_loaded: bool | None, utilization_ratio: float | None) -> None:
        """Export one decision."""
        ids = {"namespace": namespace, "inferenceservice": name}
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

    def forget(self, namespace: str, name: str) -> None:
        """Drop the gauges of an InferenceService whose autoscaler stopped (deleted, or mode Fixed)."""
        for gauge in self._per_object:
            try:
                gauge.remove(namespace, name)
            except KeyError:
                pass
        for gauge in self._per_class:
            for m in MODALITIES:
                try:
                    gauge.remove(namespace, name, m.value)
                except KeyError:
                    pass
