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
import re
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

from modalscale.runtime.model import metrics as names
from modalscale.runtime.model.batching import route
from modalscale.runtime.repo_config import (
    INPUT_IMAGES,
    INPUT_TEXT,
    OUTPUT_EMBEDDING,
    OUTPUT_IMAGE_CLASSES,
    OUTPUT_MODALITY,
    UNAVAILABLE_REASONS,
)

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
            images = pb_utils.get_input_tensor_by_name(request, INPUT_IMAGES)
            text = pb_utils.get_input_tensor_by_name(request, INPUT_TEXT)
            modality = route(None if images is None else int(np.prod(images.shape()[1:], dtype=np.int64)),
                             text is not None)
            if modality is None:
                self.missing_input.increment(1)
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "MissingInput: request has neither IMAGES nor TEXT; send at least one",
                    pb_utils.TritonError.INVALID_ARG)))
                continue
            inputs = [t for t in (images, text) if t is not None]
            try:
                answer = pb_utils.InferenceRequest(model_name=self.routes[modality], inputs=inputs,
                                                   requested_output_names=OUTPUTS).exec()
            except pb_utils.TritonModelException as exc:
                responses.append(_error_response(str(exc)))
                continue
            if answer.has_error():
                responses.append(_error_response(answer.error().message()))
            else:
                responses.append(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.get_output_tensor_by_name(answer, name) for name in OUTPUTS]))
        return responses


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
