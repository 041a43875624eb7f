"""A user's own model whose inputs are neither the image nor the text input (``spec.model.inputs``): the new-user
trial's model ``ident`` (one input ``INPUT0`` FP32[4], no ``spec.model.inputs``) got 400 / INVALID_ARGUMENT
``MissingInput`` from the gateway on every call, in every wire form, while the service showed Ready. Such a request
is forwarded unaltered and counted as demand once (modality ``text``, 0 images, 0 tokens); a malformed payload is
still refused. In-process: the features on tritonclient-built requests, and a Gateway in front of a loopback
replica (no Triton) or a fake gRPC channel."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from unittest import mock

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import make_mocked_request
from prometheus_client import CollectorRegistry
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request

from modalscale.gateway.endpoints import StaticSource
from modalscale.gateway.features import (
    InputNames,
    PayloadError,
    RequestFeatures,
    features_from_grpc,
    features_from_http,
)
from modalscale.gateway.server import GRPC_INFER, Gateway, upstream_session
from modalscale.gateway.settings import GatewaySettings
from modalscale.runtime.model.metrics import MODALITIES
from modalscale.runtime.workload import photo_bytes
from tests.unit.gateway.test_gateway_retry import INFER, Aborted, Context, Replica

TRIAL_BODY = b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[4],"data":[1,2,3,4]}]}'
"""The trial's curl body, byte for byte."""

FEATURELESS = RequestFeatures(modality="text", image_pixels=(), text_tokens=0, image_digests=())
"""What a request carrying neither named input reads as: the text class, no image, 0 tokens."""


def _input0(module: Any) -> Any:
    tensor = module.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.float32))
    return tensor


def trial_binary() -> tuple[bytes, dict[str, str]]:
    """The trial's request as ``tritonclient.http`` sends it (binary tensor extension, its default)."""
    body, json_size = th.InferenceServerClient.generate_request_body([_input0(th)])
    assert json_size is not None  # binary data, with its header
    return body, {"Inference-Header-Content-Length": str(json_size)}


def trial_grpc_raw() -> bytes:
    """The trial's request as ``tritonclient.grpc`` sends it (raw_input_contents)."""
    request = _get_inference_request(model_name="ident", inputs=[_input0(tg)], model_version="", request_id="",
                                     outputs=None, sequence_id=0, sequence_start=False, sequence_end=False,
                                     priority=0, timeout=None, parameters=None)
    assert len(request.raw_input_contents) == 1
    return bytes(request.SerializeToString())


def trial_grpc_typed() -> bytes:
    """The same with typed ``contents.fp32_contents`` (other KServe v2 clients)."""
    request = service_pb2.ModelInferRequest(model_name="ident")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[4]).contents.fp32_contents.extend([1, 2, 3, 4])
    return bytes(request.SerializeToString())


# ---- the features


def test_the_trials_json_request_is_a_request_without_image_or_text_features() -> None:
    assert features_from_http(TRIAL_BODY, {}) == FEATURELESS


def test_the_trials_request_in_the_binary_tensor_extension_is_read_the_same() -> None:
    assert features_from_http(*trial_binary()) == FEATURELESS


@pytest.mark.parametrize("build", [trial_grpc_raw, trial_grpc_typed], ids=["raw", "typed"])
def test_the_trials_grpc_request_is_read_the_same(build: Any) -> None:
    assert features_from_grpc(build()) == FEATURELESS


def test_a_request_with_no_inputs_at_all_is_forwarded_too() -> None:
    """Well-formed v2 (an ``inputs`` list); whether the model takes it is the replica's to say."""
    assert features_from_http(b'{"inputs": []}', {}) == FEATURELESS
    assert features_from_grpc(service_pb2.ModelInferRequest(model_name="m").SerializeToString()) == FEATURELESS


def test_the_featureless_class_is_one_the_runtime_and_the_autoscaler_know() -> None:
    from modalscale.autoscaler.features import modality_of

    assert FEATURELESS.modality in MODALITIES
    assert modality_of(0, 0).value == FEATURELESS.modality  # the autoscaler's own class of 0 images, 0 tokens


def test_a_user_models_names_without_the_named_inputs_read_featureless() -> None:
    """``spec.model.inputs`` naming inputs this request does not carry: the same, not a 400."""
    names = InputNames(images="pixels_in", text="prompt")
    assert features_from_http(TRIAL_BODY, {}, inputs=names) == FEATURELESS
    assert features_from_grpc(trial_grpc_raw(), inputs=names) == FEATURELESS


# ---- malformed payloads are still refused, other inputs or not


def _with_images(images: list[bytes]) -> tuple[bytes, dict[str, str]]:
    image = th.InferInput("IMAGES", [1, len(images)], "BYTES")
    image.set_data_from_numpy(np.array([images], dtype=np.object_))
    body, json_size = th.InferenceServerClient.generate_request_body([_input0(th), image])
    return body, {"Inference-Header-Content-Length": str(json_size)}


@pytest.mark.parametrize(("build", "field", "reason"), [
    (lambda: (b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[4],"data":[1,2,3,4]}', {}), "body",
     "MalformedJson"),
    (lambda: (b'{"instances": [[1, 2, 3, 4]]}', {}), "inputs", "MalformedRequest"),
    (lambda: _with_images([photo_bytes("rocket")[:600]]), "inputs[IMAGES].data[0]", "CorruptImageHeader"),
    (lambda: _with_images([b"not an image"]), "inputs[IMAGES].data[0]", "UnsupportedImageFormat"),
    (lambda: (trial_binary()[0][:-3], trial_binary()[1]), "inputs[INPUT0].parameters.binary_data_size",
     "TruncatedBinaryData"),
    (lambda: (json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
                                      {"name": "TEXT", "datatype": "FP32", "shape": [1], "data": [1.0]}]}).encode(),
              {}), "inputs[TEXT].datatype", "WrongDatatype"),
], ids=["bad-json", "not-v2", "truncated-image-header", "not-an-image", "truncated-binary", "text-not-bytes"])
def test_malformed_payloads_beside_other_inputs_are_still_refused(build: Any, field: str, reason: str) -> None:
    with pytest.raises(PayloadError) as caught:
        features_from_http(*build())
    assert (caught.value.field, caught.value.reason) == (field, reason), str(caught.value)


# ---- through the gateway: forwarded unaltered, counted once


def _request(body: bytes, headers: dict[str, str]) -> web.Request:
    payload = StreamReader(mock.Mock(_reading_paused=False), 2 ** 16, loop=asyncio.get_running_loop())
    payload.feed_data(body)
    payload.feed_eof()
    return make_mocked_request("POST", INFER, headers={"Content-Length": str(len(body)), **headers}, payload=payload)


def _sample(registry: CollectorRegistry, name: str, modality: str) -> float:
    value = registry.get_sample_value(name, {"modality": modality})
    return 0.0 if value is None else value


def _counted(gw: Gateway) -> dict[str, Any]:
    r = gw.metrics.registry
    return {
        "requests": {m: _sample(r, "modalscale_requests_total", m) for m in MODALITIES},
        "images_count": _sample(r, "modalscale_request_images_count", "text"),
        "images_sum": _sample(r, "modalscale_request_images_sum", "text"),
        "tokens_count": _sample(r, "modalscale_request_text_tokens_count", "text"),
        "tokens_sum": _sample(r, "modalscale_request_text_tokens_sum", "text"),
        "errors": sum(s.value for metric in r.collect() if metric.name == "modalscale_request_errors"
                      for s in metric.samples if s.name.endswith("_total")),
    }


COUNTED_ONCE = {"requests": {"image": 0.0, "text": 1.0, "image_text": 0.0}, "images_count": 1.0, "images_sum": 0.0,
                "tokens_count": 1.0, "tokens_sum": 0.0, "errors": 0}
"""The runtime's invariants for a text-class request: counted once, its image count (0) and its tokens (0)
observed once each, so a histogram's ``_count`` rate still equals the class's request rate."""


@pytest.mark.parametrize("request_form", ["json", "binary"])
def test_the_trials_http_request_is_forwarded_unaltered_and_counted_once(request_form: str) -> None:
    body, headers = (TRIAL_BODY, {}) if request_form == "json" else trial_binary()

    async def run() -> tuple[int, list[bytes], dict[str, Any]]:
        replica = Replica()
        gw = Gateway(GatewaySettings(queue_timeout_s=10.0), StaticSource())
        gw._session = upstream_session(gw.settings.upstream_timeout_s)
        try:
            gw._on_endpoints((await replica.start(),))
            answer = await gw._http(_request(body, headers))
            return answer.status, replica.bodies, _counted(gw)
        finally:
            await gw._session.close()
            replica.close()

    status, bodies, counted = asyncio.run(run())
    assert status == 200, "the gateway refused a well-formed request to a model without IMAGES / TEXT inputs"
    assert bodies == [body]
    assert counted == COUNTED_ONCE


class AnsweringChannel:
    """A gRPC channel whose replica answers every call with ``b"answer"``; records what it was sent."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def unary_unary(self, _method: str) -> Any:
        async def call(request: bytes, **_: Any) -> bytes:
            self.sent.append(request)
            return b"answer"
        return call


@pytest.mark.parametrize("build", [trial_grpc_raw, trial_grpc_typed], ids=["raw", "typed"])
def test_the_trials_grpc_request_is_forwarded_unaltered_and_counted_once(build: Any) -> None:
    from modalscale.gateway.balancer import Endpoint

    message = build()

    async def run() -> tuple[bytes, list[bytes], grpc.StatusCode | None, dict[str, Any]]:
        gw = Gateway(GatewaySettings(queue_timeout_s=10.0), StaticSource())
        channel = AnsweringChannel()
        gw._channel = lambda ep: channel  # type: ignore[method-assign, assignment, return-value]
        gw._on_endpoints((Endpoint("10.0.0.2", 8000, 8001, name="r"),))
        context = Context()
        try:
            answer = await gw.grpc_unary(GRPC_INFER, message, context)  # type: ignore[arg-type]
        except Aborted:
            answer = b""
        return answer, channel.sent, context.code, _counted(gw)

    answer, sent, code, counted = asyncio.run(run())
    assert code is None, "the gateway aborted a well-formed request to a model without IMAGES / TEXT inputs"
    assert answer == b"answer" and sent == [message]
    assert counted == COUNTED_ONCE



def test_the_first_featureless_request_is_logged_once_naming_the_inputs_looked_for(
        caplog: pytest.LogCaptureFixture) -> None:
    """No 400 tells a user whose model takes images under another name that spec.model.inputs is missing, so the
    gateway says it once in its log."""
    from modalscale.gateway.features import FEATURELESS as featureless

    gw = Gateway(GatewaySettings(), StaticSource())
    with caplog.at_level("INFO", logger="modalscale.gateway.server"):
        for _ in range(3):
            gw._record_features(featureless)
    said = [r.getMessage() for r in caplog.records if "neither input" in r.getMessage()]
    assert len(said) == 1 and "'IMAGES'" in said[0] and "spec.model.inputs" in said[0], said
    assert gw.metrics.registry.get_sample_value("modalscale_requests_total", {"modality": "text"}) == 3
