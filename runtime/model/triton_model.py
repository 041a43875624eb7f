"""Triton Python-backend adapter of the built-in multimodal model (imported by the generated ``model.py``).

Only this module imports ``triton_python_backend_utils``, which exists inside the backend's stub process.
Each request is validated on its own: a bad request gets a ``pb_utils.TritonError`` in its own response and
the rest of the batch is served.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]
from numpy.typing import NDArray

from modalscale.runtime.model import metrics as names
from modalscale.runtime.model.encoders import MultimodalEncoder
from modalscale.runtime.model.inputs import Modality, RequestError
from modalscale.runtime.model.pipeline import MultimodalPipeline, Prepared
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import (
    INPUT_IMAGES,
    INPUT_TEXT,
    OUT_OF_MEMORY,
    OUTPUT_EMBEDDING,
    OUTPUT_IMAGE_CLASSES,
    OUTPUT_MODALITY,
    UNAVAILABLE_REASONS,
)

LOG = logging.getLogger("modalscale.runtime.model")


class FeatureMetrics:
    """The per-request feature metrics, registered through ``pb_utils.MetricFamily``.

    Every feature histogram is labelled with the request's ``modality`` (see ``metrics.FEATURE_MODALITIES``), so
    the autoscaler reads per-class means. The families and one metric per (family, label set) are kept as
    attributes, all created here: Triton drops a metric whose Python object is collected.
    """

    def __init__(self, model_name: str) -> None:
        family = pb_utils.MetricFamily
        self.families = {
            name: family(name=name, description=names.HELP[name], kind=kind)
            for name, kind in (
                (names.REQUESTS_TOTAL, family.COUNTER),
                (names.REQUEST_ERRORS_TOTAL, family.COUNTER),
                (names.REQUEST_IMAGE_PIXELS, family.HISTOGRAM),
                (names.REQUEST_IMAGES, family.HISTOGRAM),
                (names.REQUEST_TEXT_TOKENS, family.HISTOGRAM),
                (names.STAGE_COMPUTE_SECONDS, family.HISTOGRAM),
                (names.EMBEDDING_CACHE_LOOKUPS_TOTAL, family.COUNTER),
                (names.INFLIGHT_REQUESTS, family.GAUGE),
                (names.IMAGE_INT8_FALLBACK, family.GAUGE),
            )
        }
        f = self.families
        self.model_name = model_name
        self.inflight = f[names.INFLIGHT_REQUESTS].Metric(labels={"model": model_name})
        self.int8_fallback: Any = None
        """The ``modalscale_image_int8_fallback`` series (:meth:`report_image_int8`); None: not asked for."""
        self.requests = {m.value: f[names.REQUESTS_TOTAL].Metric(labels={"modality": m.value}) for m in Modality}
        self.errors: dict[str, Any] = {}
        buckets = {names.REQUEST_IMAGE_PIXELS: names.PIXEL_BUCKETS, names.REQUEST_IMAGES: names.IMAGE_COUNT_BUCKETS,
                   names.REQUEST_TEXT_TOKENS: names.TOKEN_BUCKETS}
        self.features: dict[tuple[str, str], Any] = {
            (name, m): f[name].Metric(labels={"modality": m}, buckets=list(buckets[name]))
            for name, modalities in names.FEATURE_MODALITIES.items() for m in modalities
        }
        self.stages = {(s, m.value): f[names.STAGE_COMPUTE_SECONDS].Metric(labels={"stage": s, "modality": m.value},
                                                                           buckets=list(names.SECONDS_BUCKETS))
                       for s in names.STAGES for m in Modality}
        self.cache = {r: f[names.EMBEDDING_CACHE_LOOKUPS_TOTAL].Metric(labels={"result": r})
                      for r in ("hit", "miss")}

    def report_image_int8(self, encoder: MultimodalEncoder, preloaded: Sequence[str]) -> None:
        """Export whether ``encoder``'s INT8 image encoder fell back to FP32 (``names.IMAGE_INT8_FALLBACK``): only
        where INT8 images were asked for and the image encoder was loaded at start (``preloaded``), so its load-time
        guard has run."""
        if encoder.image_int8_min_side_pixels <= 0 or "image" not in preloaded:
            return
        self.int8_fallback = self.families[names.IMAGE_INT8_FALLBACK].Metric(labels={"model": self.model_name})
        self.int8_fallback.set(1.0 if encoder.image_int8_fallback else 0.0)

    def _metric(self, name: str, label_set: names.Labels) -> Any:
        """The metric object of one series; error reasons are created on first use."""
        if name == names.REQUESTS_TOTAL:
            return self.requests[dict(label_set)["modality"]]
        if name == names.STAGE_COMPUTE_SECONDS:
            lab = dict(label_set)
            return self.stages[lab["stage"], lab["modality"]]
        if name == names.EMBEDDING_CACHE_LOOKUPS_TOTAL:
            return self.cache[dict(label_set)["result"]]
        if name == names.REQUEST_ERRORS_TOTAL:
            reason = dict(label_set)["reason"]
            if reason not in self.errors:
                self.errors[reason] = self.families[names.REQUEST_ERRORS_TOTAL].Metric(labels={"reason": reason})
            return self.errors[reason]
        return self.features[name, dict(label_set)["modality"]]

    def send(self, batch: names.MetricBatch) -> None:
        """Send the collected updates: one IPC round trip to tritonserver per call of ``batch.calls()``."""
        for op, name, label_set, value in batch.calls():
            metric = self._metric(name, label_set)
            if op == "increment":
                metric.increment(value)
            else:
                metric.observe(value)


class TritonPythonModel:
    """Triton Python-backend model: ``initialize`` loads the encoders, ``execute`` serves a batch."""

    def initialize(self, args: dict[str, str]) -> None:
        """Load settings from the model config, set torch threads, load the encoders, register metrics."""
        config = json.loads(args["model_config"])
        self.settings = ModelSettings.from_model_config(config)
        torch.set_num_threads(self.settings.intra_op_threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set by an earlier parallel section in this process
            LOG.info("Kept inter-op threads: already initialised")
        device = "cpu"
        if args.get("model_instance_kind") == "GPU":
            device = f"cuda:{args.get('model_instance_device_id', '0')}"
        self.batched = int(config.get("max_batch_size", 0)) > 0
        encoder = MultimodalEncoder(
            self.settings.precision, device, self.settings.preload, self.settings.int8_text, self.settings.image_bf16,
            self.settings.engine, self.settings.intra_op_threads, self.settings.image_int8_min_side_pixels)
        self.pipeline = MultimodalPipeline(self.settings, encoder)
        self.metrics = FeatureMetrics(str(args.get("model_name", config.get("name", ""))))
        self.metrics.report_image_int8(encoder, self.settings.preload)
        # Before Triton marks the model ready (and the pod's readiness probe passes): the first real request on a
        # new replica, such as a start from zero's held one, does not pay the model's first-call costs.
        if self.settings.warm_up:
            LOG.info("Warmed up in %.3f s", self.pipeline.warm_up(self.settings.preload))

    def execute(self, requests: list[Any]) -> list[Any]:
        """Serve one batch: a response (or a per-request error) for every request, in order.

        The requests count in ``modalscale_inflight_requests`` until the responses are returned. The feature
        metrics of the whole batch are collected in a :class:`~modalscale.runtime.model.metrics.MetricBatch`
        and sent once at the end (model parameter ``metrics_batching: request`` sends each request's on its own).
        """
        self.metrics.inflight.increment(len(requests))
        batch = names.MetricBatch()
        try:
            return self._execute(requests, batch)
        finally:
            self.metrics.send(batch)
            self.metrics.inflight.increment(-len(requests))

    def _flush_per_request(self, batch: names.MetricBatch) -> None:
        """With ``metrics_batching: request``, send what one request recorded now and empty ``batch`` (the earlier
        behaviour: every request's updates on their own)."""
        if self.settings.metrics_batching == "request":
            self.metrics.send(batch)
            batch.clear()

    def _execute(self, requests: list[Any], batch: names.MetricBatch) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        prepared: list[Prepared] = []
        rows: list[int] = []
        for i, request in enumerate(requests):
            images = pb_utils.get_input_tensor_by_name(request, INPUT_IMAGES)
            text = pb_utils.get_input_tensor_by_name(request, INPUT_TEXT)
            try:
                prep = self.pipeline.prepare(None if images is None else images.as_numpy(),
                                             None if text is None else text.as_numpy())
            except Exception as exc:  # one request's fault fails that request only
                responses[i] = prepare_failure(exc, batch, i, len(requests))
                self._flush_per_request(batch)
                continue
            batch.accepted(prep.parsed.modality.value, [image.pixels for image in prep.parsed.images],
                           prep.text_tokens if prep.parsed.text is not None else None)
            self._flush_per_request(batch)
            prepared.append(prep)
            rows.append(i)
        if prepared:
            try:
                outputs = self.pipeline.run(prepared)
            except Exception as exc:  # the pass's failure fails its requests, each answered, not the batch
                LOG.exception("Model failed on a batch of %d requests", len(prepared))
                for i in rows:
                    responses[i] = server_failure(exc, batch)
                    self._flush_per_request(batch)
                return responses
            for i, out in zip(rows, outputs, strict=True):
                batch.computed(out.modality, out.stage_s, out.cache_hits, out.cache_misses)
                self._flush_per_request(batch)
                responses[i] = pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor(OUTPUT_EMBEDDING, out.embedding.reshape(1, -1).astype(np.float32)),
                    pb_utils.Tensor(OUTPUT_MODALITY, np.array([[out.modality.encode()]], dtype=np.object_)),
                    pb_utils.Tensor(OUTPUT_IMAGE_CLASSES, _classes_output(out.image_classes)),
                ])
        return responses

    def finalize(self) -> None:
        """Drop the model and metric references (Triton unloads the families afterwards)."""
        self.pipeline = None  # type: ignore[assignment]
        self.metrics = None  # type: ignore[assignment]


def prepare_failure(exc: Exception, batch: names.MetricBatch, index: int, size: int) -> Any:
    """The response of a request whose validation (``prepare``) raised ``exc``, counted in
    ``modalscale_request_errors_total``; every model that validates requests answers them through this one mapping.

    A :class:`RequestError` is the client's: ``INVALID_ARG`` (400) with ``<Reason>: <message naming the field>``.
    Anything else is the server's, that request's alone (:func:`server_failure`: ``OutOfMemory`` 503 or
    ``InternalError`` 500), logged with its traceback. Raised out of ``execute``, it failed every request of the
    batch (a palette PNG whose tRNS is longer than its palette did so until ``decode_image`` refused it), however
    valid the others were; the GPU layout's orchestrator, which validates one request at a time, let it out until it
    shared this mapping."""
    if isinstance(exc, RequestError):
        batch.error(exc.reason)
        return pb_utils.InferenceResponse(
            error=pb_utils.TritonError(f"{exc.reason}: {exc}", pb_utils.TritonError.INVALID_ARG))
    LOG.error("Request %d of a batch of %d failed its validation", index, size, exc_info=exc)
    return server_failure(exc, batch)


class ForwardedFailure(Exception):
    """The error answer of a model this one called by BLS (the GPU layout's encoders): BLS gives only its message,
    its status code is lost (as behind the router), so :func:`server_error` reads the reason from the prefix."""

    def __init__(self, model: str, message: str) -> None:
        super().__init__(f"{model}: {message}")
        self.model = model
        self.message = message


def server_error(exc: BaseException) -> tuple[str, Any]:
    """The reason and ``pb_utils.TritonError`` of a request the server failed (``exc``: not the request's fault),
    the one mapping of every model (:func:`server_failure` counts it; the GPU layout's encoders, which export no
    error counter, answer with it and their orchestrator counts).

    Out of memory (``MemoryError``: a large image decoded or resized on a replica near its memory limit; torch's
    ``OutOfMemoryError``; a called model's ``OutOfMemory: ...`` answer) is the replica's resource exhaustion:
    :data:`~modalscale.runtime.repo_config.OUT_OF_MEMORY` with ``UNAVAILABLE`` (HTTP 503, gRPC UNAVAILABLE),
    transient, so a client retries it (another replica, or this one with memory freed); a called model's other
    reason of :data:`~modalscale.runtime.repo_config.UNAVAILABLE_REASONS` keeps its reason and ``UNAVAILABLE``.
    Anything else is ``InternalError`` with ``INTERNAL`` (500)."""
    if isinstance(exc, ForwardedFailure):
        for reason in UNAVAILABLE_REASONS:
            if exc.message.startswith(reason + ": "):
                return reason, pb_utils.TritonError(
                    f"{reason}: {exc.model}: {exc.message.removeprefix(reason + ': ')}",
                    pb_utils.TritonError.UNAVAILABLE)
        return "InternalError", pb_utils.TritonError(
            f"InternalError: {exc.model}: {exc.message.removeprefix('InternalError: ')}",
            pb_utils.TritonError.INTERNAL)
    if isinstance(exc, MemoryError | torch.OutOfMemoryError):
        return OUT_OF_MEMORY, pb_utils.TritonError(
            f"{OUT_OF_MEMORY}: the replica ran out of memory for this request ({type(exc).__name__}: {exc}); "
            "retry", pb_utils.TritonError.UNAVAILABLE)
    return "InternalError", pb_utils.TritonError(f"InternalError: {type(exc).__name__}: {exc}",
                                                 pb_utils.TritonError.INTERNAL)


def server_failure(exc: BaseException, batch: names.MetricBatch) -> Any:
    """The response of a request the server failed (``exc``: not the request's fault), counted in
    ``modalscale_request_errors_total`` under its reason; the one mapping (:func:`server_error`) of every model, for
    validation (:func:`prepare_failure`) and for the encoder pass.

    Every model catches ``Exception`` around its encoder pass and answers each request of the pass with this: an
    exception that left ``execute`` made Triton's Python backend fail every request of the batch with its own
    unlabelled message, uncounted, those served or refused beside it included."""
    reason, error = server_error(exc)
    batch.error(reason)
    return pb_utils.InferenceResponse(error=error)


def _classes_output(classes: NDArray[np.integer[Any]]) -> NDArray[np.int32]:
    """IMAGE_CLASSES as sent: (1, n) int32; text-only requests get ``[[-1]]`` because Triton's response cache
    cannot store an empty output ("Response buffer from output was nullptr")."""
    if classes.size == 0:
        return np.full((1, 1), -1, dtype=np.int32)
    return classes.reshape(1, -1).astype(np.int32)
