"""Router of modality-aware batching: the client-facing model forwards each request to the batched model of
its modality class, so every Triton queue (and dynamic batcher) holds shape-compatible requests only.

Why: Triton's dynamic batcher puts only requests with the same set of inputs into one batch and stops a batch
at the first incompatible request in the queue, so mixed image / text / image+text traffic in one queue is
served almost one request at a time (measured: 1.2 requests per execution for alternating image and text
requests vs 6.9 for images alone). Separate queues restore batching per modality.

Imports no torch: a router instance is a light process that waits on BLS (business logic scripting) calls.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

from modalscale.runtime.model import metrics as names
from modalscale.runtime.model.batching import route
from modalscale.runtime.repo_config import (
    INPUT_IMAGES,
    INPUT_TEXT,
    OUT_OF_MEMORY,
    OUTPUT_EMBEDDING,
    OUTPUT_IMAGE_CLASSES,
    OUTPUT_MODALITY,
    UNAVAILABLE_REASONS,
)

LOG = logging.getLogger("modalscale.runtime.model.router")

OUTPUTS = [OUTPUT_EMBEDDING, OUTPUT_MODALITY, OUTPUT_IMAGE_CLASSES]


class TritonPythonModel:
    """Forward each request with BLS to ``parameters.route_<modality>``."""

    def initialize(self, args: dict[str, str]) -> None:
        """Read the route table from the model config."""
        params = json.loads(args["model_config"]).get("parameters", {})
        self.routes = {m: params[f"route_{m}"]["string_value"] for m in ("image", "text", "image_text")}
        # same family as the modality models register (Triton shares it by name); keep the references
        self.errors_family = pb_utils.MetricFamily(name=names.REQUEST_ERRORS_TOTAL,
                                                   description=names.HELP[names.REQUEST_ERRORS_TOTAL],
                                                   kind=pb_utils.MetricFamily.COUNTER)
        self.missing_input = self.errors_family.Metric(labels={"reason": "MissingInput"})
        self.errors: dict[str, Any] = {}
        """The router's own failures' series (:meth:`_failure`), created on first use."""
        # Triton counts only queued requests as in flight; this gauge covers requests waiting on a BLS call.
        self.inflight_family = pb_utils.MetricFamily(name=names.INFLIGHT_REQUESTS,
                                                     description=names.HELP[names.INFLIGHT_REQUESTS],
                                                     kind=pb_utils.MetricFamily.GAUGE)
        self.inflight = self.inflight_family.Metric(labels={"model": str(args.get("model_name", ""))})

    def execute(self, requests: list[Any]) -> list[Any]:
        """Forward each request (one per call: the router does not batch) and relay the answer.

        The requests count in ``modalscale_inflight_requests`` until the answers are returned.
        """
        self.inflight.increment(len(requests))
        try:
            return self._forward(requests)
        finally:
            self.inflight.increment(-len(requests))

    def _forward(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except Exception as exc:  # raised out of execute, it failed every request of the call, uncounted
                responses.append(self._failure(exc))
        return responses

    def _one(self, request: Any) -> Any:
        images = pb_utils.get_input_tensor_by_name(request, INPUT_IMAGES)
        text = pb_utils.get_input_tensor_by_name(request, INPUT_TEXT)
        modality = route(None if images is None else int(np.prod(images.shape()[1:], dtype=np.int64)),
                         text is not None)
        if modality is None:
            self.missing_input.increment(1)
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(
                "MissingInput: request has neither IMAGES nor TEXT; send at least one",
                pb_utils.TritonError.INVALID_ARG))
        inputs = [t for t in (images, text) if t is not None]
        try:
            answer = pb_utils.InferenceRequest(model_name=self.routes[modality], inputs=inputs,
                                               requested_output_names=OUTPUTS).exec()
        except pb_utils.TritonModelException as exc:
            return _error_response(str(exc))
        if answer.has_error():
            return _error_response(answer.error().message())
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.get_output_tensor_by_name(answer, name) for name in OUTPUTS])

    def _failure(self, exc: Exception) -> Any:
        """The router's own failure on one request, as ``triton_model.server_error`` maps it (that module imports
        torch, which a router process does not load, so its only out of memory is ``MemoryError``): ``OutOfMemory``
        503 or ``InternalError`` 500, counted under the reason (the batched model did not see the request)."""
        LOG.error("Router failed on a request", exc_info=exc)
        if isinstance(exc, MemoryError):
            reason, code = OUT_OF_MEMORY, pb_utils.TritonError.UNAVAILABLE
            message = f"{OUT_OF_MEMORY}: the replica ran out of memory for this request (MemoryError: {exc}); retry"
        else:
            reason, code = "InternalError", pb_utils.TritonError.INTERNAL
            message = f"InternalError: {type(exc).__name__}: {exc}"
        if reason not in self.errors:
            self.errors[reason] = self.errors_family.Metric(labels={"reason": reason})
        self.errors[reason].increment(1)
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))


def _error_response(message: str) -> Any:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, _code(message)))


_REQUEST_ERROR = re.compile(r"^[A-Z][A-Za-z0-9]+: ")


def _code(message: str) -> Any:
    """Status for a forwarded error: Triton 2.51's BLS response error carries only the target model's message
    (its status code is lost), so the message prefix decides: ``<CamelCaseReason>: ...`` (a ``RequestError``)
    is the client's fault (400); ``ImageEncoderUnavailable: ...`` (a front whose image encoder pool did not answer)
    and ``OutOfMemory: ...`` (a replica out of memory for the request: ``triton_model.server_failure``), the
    reasons of ``repo_config.UNAVAILABLE_REASONS``, are ``UNAVAILABLE`` (503); ``InternalError: ...`` and anything
    else is the server's (500)."""
    if message.startswith(tuple(reason + ": " for reason in UNAVAILABLE_REASONS)):
        return pb_utils.TritonError.UNAVAILABLE
    if _REQUEST_ERROR.match(message) and not message.startswith("InternalError"):
        return pb_utils.TritonError.INVALID_ARG
    return pb_utils.TritonError.INTERNAL
