"""The gateway reads the bytes Triton hands the model: a real tritonserver (nvidia-pytriton wheel) with an echo
model that reports the BLAKE2b digest of every IMAGES and TEXT element it received, against
``modalscale.gateway.features`` on the same request, in every wire form; and every structural fault the gateway
refuses with 400 is refused by Triton too (content faults, such as a truncated image, reach the model, which is
what the gateway spares it), the faults of the inputs the gateway does not read (the echo model's SCALE, THRESHOLD,
TAGS and HALF) among them, while well-formed such inputs pass both."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from modalscale.gateway.features import PayloadError, RequestFeatures, features_from_grpc, features_from_http
from modalscale.runtime.server import TritonProcess, free_port, write_repository
from tests.unit.gateway import test_gateway_other_inputs as other
from tests.unit.gateway.test_gateway_features import BUILDERS, GRPC_BAD, HTTP_BAD, REQUESTS, InputNames

ECHO_MODEL = '''\
import os, site, sys
_before = list(sys.path)
for _entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    if _entry:
        site.addsitedir(_entry)
sys.path[:] = [_p for _p in sys.path if _p not in _before] + _before

import hashlib, json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            info = {}
            for name in ("IMAGES", "TEXT"):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    info[name] = [hashlib.blake2b(bytes(x), digest_size=16).hexdigest()
                                  for x in tensor.as_numpy().reshape(-1)]
            out = np.array([json.dumps(info).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("INFO", out)]))
        return responses
'''

ECHO_CONFIG = '''\
name: "echo"
backend: "python"
max_batch_size: 0
input [
  { name: "IMAGES" data_type: TYPE_STRING dims: [ -1, -1 ] optional: true },
  { name: "TEXT" data_type: TYPE_STRING dims: [ -1, -1 ] optional: true },
  { name: "THRESHOLD" data_type: TYPE_INT32 dims: [ -1, -1 ] optional: true },
  { name: "SCALE" data_type: TYPE_FP32 dims: [ -1, -1 ] optional: true },
  { name: "TAGS" data_type: TYPE_STRING dims: [ -1, -1 ] optional: true },
  { name: "HALF" data_type: TYPE_FP16 dims: [ -1, -1 ] optional: true },
  { name: "FLAG" data_type: TYPE_BOOL dims: [ -1, -1 ] optional: true },
  { name: "BIG" data_type: TYPE_UINT64 dims: [ -1, -1 ] optional: true }
]
output [ { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''

Received = dict[str, list[str]]


@contextlib.contextmanager
def _start_echo(folder: Path) -> Iterator[TritonProcess]:
    repo = write_repository({"echo/config.pbtxt": ECHO_CONFIG, "echo/1/model.py": ECHO_MODEL}, folder)
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + old_path
    try:
        with TritonProcess(model_repository=repo, http_port=free_port(), grpc_port=free_port(),
                           metrics_port=free_port(), exit_timeout_s=2) as server:
            yield server
    finally:
        os.environ["PATH"] = old_path


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    with _start_echo(tmp_path_factory.mktemp("echo-repo")) as server:
        yield server


@pytest.fixture(scope="module")
def probe_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    """An echo server of its own, which no refused request has been sent to before."""
    with _start_echo(tmp_path_factory.mktemp("probe-repo")) as server:
        yield server


def _http(server: TritonProcess, body: bytes, headers: dict[str, str]) -> Received | int:
    """What the model received, or Triton's HTTP status when it refused the request."""
    response = httpx.post(f"http://127.0.0.1:{server.http_port}/v2/models/echo/infer", content=body,
                          headers=headers, timeout=30)
    if response.status_code != 200:
        return response.status_code
    size = response.headers.get("Inference-Header-Content-Length")
    if size is None:
        return dict(json.loads(response.json()["outputs"][0]["data"][0]))
    raw = response.content[int(size):]
    return dict(json.loads(raw[4:4 + struct.unpack_from("<I", raw)[0]]))


def _grpc(server: TritonProcess, message: bytes) -> Received | str:
    """What the model received, or the gRPC status name when Triton refused the request."""
    request = service_pb2.ModelInferRequest.FromString(message)
    request.model_name = "echo"
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        try:
            response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
        except grpc.RpcError as exc:
            return str(exc.code().name)
    raw = response.raw_output_contents[0]
    return dict(json.loads(raw[4:4 + struct.unpack_from("<I", raw)[0]]))


def _still_serving(server: TritonProcess) -> None:
    """The server still takes a well-formed request after a refusal: a refusal is Triton's verdict on the request,
    not a server the case left broken (which refuses everything after it, so that every later refusal proved
    nothing)."""
    built: Any = other.GOOD["http-json"](other.TEXT)
    assert isinstance(_http(server, *built), dict), "the server refuses a well-formed request after this case"


def _digests(received: Received, name: str) -> tuple[bytes, ...]:
    return tuple(bytes.fromhex(h) for h in received.get(name, []))


@pytest.mark.parametrize("form", sorted(BUILDERS))
@pytest.mark.parametrize("request_name", sorted(REQUESTS))
def test_gateway_digests_equal_what_the_model_received(echo_server: TritonProcess, request_name: str,
                                                       form: str) -> None:
    images, text, _ = REQUESTS[request_name]
    built: Any = BUILDERS[form](images, text, InputNames())
    received: Received | int | str
    features: RequestFeatures
    if form.startswith("grpc"):
        received, features = _grpc(echo_server, built), features_from_grpc(built)
    else:
        received, features = _http(echo_server, *built), features_from_http(*built)
    assert isinstance(received, dict), received
    assert _digests(received, "IMAGES") == features.image_digests
    assert len(features.image_digests) == len(images or ())
    expected_text = () if text is None else (hashlib.blake2b(text.encode(), digest_size=16).digest(),)
    assert _digests(received, "TEXT") == expected_text


STRUCTURAL_HTTP = sorted(case for case, (_, _, reason) in HTTP_BAD.items() if reason not in (
    "BodyTooLarge", "TooManyElements",  # the gateway's own limits
    "CorruptBody",  # Triton inflates what it can of a truncated gzip stream
    "EmptyRequest", "EmptyImage", "CorruptImageHeader", "UnsupportedImageFormat", "InvalidUtf8",
    "ImageTooLarge",
    # content faults: Triton passes them to the model, and the built-in model refuses them (runtime/model/inputs.py)
))
STRUCTURAL_GRPC = sorted(case for case, (_, _, reason) in GRPC_BAD.items() if reason not in (
    "MalformedProtobuf",  # cannot even be sent with a gRPC client
    "TooManyElements",  # the gateway's own limit
    "EmptyRequest", "CorruptImageHeader", "UnsupportedImageFormat",
))


@pytest.mark.parametrize("case", STRUCTURAL_HTTP)
def test_structural_http_faults_the_gateway_refuses_triton_refuses_too(echo_server: TritonProcess,
                                                                       case: str) -> None:
    build, _, _ = HTTP_BAD[case]
    assert not isinstance(_http(echo_server, *build()), dict)


@pytest.mark.parametrize("case", STRUCTURAL_GRPC)
def test_structural_grpc_faults_the_gateway_refuses_triton_refuses_too(echo_server: TritonProcess,
                                                                       case: str) -> None:
    build, _, _ = GRPC_BAD[case]
    assert not isinstance(_grpc(echo_server, build()), dict)


@pytest.mark.parametrize("text", ["text", "no-text"])
@pytest.mark.parametrize("form", sorted(other.GOOD))
def test_well_formed_other_inputs_pass_the_gateway_and_reach_the_model(echo_server: TritonProcess, form: str,
                                                                        text: str) -> None:
    built: Any = other.GOOD[form](other.TEXT if text == "text" else None)
    received: Received | int | str
    if form.startswith("grpc"):
        received, features = _grpc(echo_server, built), features_from_grpc(built)
    else:
        received, features = _http(echo_server, *built), features_from_http(*built)
    assert isinstance(received, dict), received
    sent = () if text == "no-text" else (hashlib.blake2b(other.TEXT.encode(), digest_size=16).digest(),)
    assert _digests(received, "TEXT") == sent
    assert features.text_tokens == (5 if sent else 0)


BREAK_THE_STUB = {"other input: a shape larger than the body (JSON)", "other input: dimension above int64"}
"""Cases Triton does not refuse in its frontend but passes to the Python backend, whose stub process dies on them;
see :func:`test_a_shape_whose_size_overflows_breaks_the_python_backend_the_gateway_refuses_it`."""


@pytest.mark.parametrize("case", sorted(set(other.HTTP_BAD) - BREAK_THE_STUB))
def test_other_http_input_faults_the_gateway_refuses_triton_refuses_too(echo_server: TritonProcess,
                                                                        case: str) -> None:
    build, _, _ = other.HTTP_BAD[case]
    assert _http(echo_server, *build()) in (400, 500)  # 500: Triton's answer to data its JSON reader cannot take
    _still_serving(echo_server)


@pytest.mark.parametrize("case", sorted(other.GRPC_BAD))
def test_other_grpc_input_faults_the_gateway_refuses_triton_refuses_too(echo_server: TritonProcess,
                                                                        case: str) -> None:
    build, _, _ = other.GRPC_BAD[case]
    assert _grpc(echo_server, build()) in ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED")  # the latter: message size
    _still_serving(echo_server)


@pytest.mark.parametrize("case", sorted(BREAK_THE_STUB))
def test_a_shape_whose_size_overflows_breaks_the_python_backend_the_gateway_refuses_it(
        tmp_path_factory: pytest.TempPathFactory, case: str) -> None:
    """Why the gateway checks the inputs it does not read: one request whose shape holds more bytes than any array
    can (2**124 FP32 elements with one element of data; a dimension of 2**63 beside a 0) passes Triton's frontend to
    the Python backend, whose stub process then dies (``terminate called ... ValueError: array is too big``). Triton
    answers 500 to that request and to every later one of the model (``Stub process 'echo_0_0' is not healthy``),
    while its health, readiness and model readiness endpoints keep answering 200 (found 7 Dec 2026): only the runtime
    pods' exec probes (``modalscale.runtime.health``) see the dead stub, and the container restarts, failing what
    it held. The gateway refuses the request with 400 before any replica sees it."""
    build, _, reason = other.HTTP_BAD[case]
    with pytest.raises(PayloadError) as refused:
        features_from_http(*build())
    assert refused.value.reason == reason
    with _start_echo(tmp_path_factory.mktemp("fragile-repo")) as server:
        _still_serving(server)
        assert _http(server, *build()) == 500
        good: Any = other.GOOD["http-json"](other.TEXT)
        assert _http(server, *good) == 500  # every later request: the stub is gone
        base = f"http://127.0.0.1:{server.http_port}/v2"
        assert [httpx.get(f"{base}{path}", timeout=10).status_code
                for path in ("/health/live", "/health/ready", "/models/echo/ready")] == [200, 200, 200]


def _json_probe(*inputs: str, headers: dict[str, str] | None = None) -> tuple[bytes, dict[str, str]]:
    """A JSON request of ``inputs`` (each a JSON object as written) and TEXT, its JSON text as given, so that forms
    ``json.dumps`` would not write (``1e2``, ``-0``) are sent as they are."""
    text = '{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["a photo of a cat"]}'
    return f'{{"inputs": [{", ".join((*inputs, text))}]}}'.encode(), dict(headers or {})


def _gzip(request: tuple[bytes, dict[str, str]]) -> tuple[bytes, dict[str, str]]:
    import gzip
    return gzip.compress(request[0]), {**request[1], "Content-Encoding": "gzip"}


HTTP_PROBES: dict[str, Any] = {
    # name: builder of (body, headers); the gateway must take exactly what Triton takes
    "BOOL as JSON booleans": lambda: _json_probe('{"name": "FLAG", "datatype": "BOOL", "shape": [1, 2], '
                                                 '"data": [true, false]}'),
    "BOOL as JSON 0/1": lambda: _json_probe('{"name": "FLAG", "datatype": "BOOL", "shape": [1, 2], "data": [0, 1]}'),
    "UINT64 above 2**63 as JSON": lambda: _json_probe('{"name": "BIG", "datatype": "UINT64", "shape": [1, 1], '
                                                      '"data": [18446744073709551615]}'),
    "INT32 -0 as JSON": lambda: _json_probe('{"name": "THRESHOLD", "datatype": "INT32", "shape": [1, 2], '
                                            '"data": [-0, 7]}'),
    "INT32 1e2 as JSON": lambda: _json_probe('{"name": "THRESHOLD", "datatype": "INT32", "shape": [1, 1], '
                                             '"data": [1e2]}'),
    "FP32 exponents, -0.0, Infinity as JSON": lambda: _json_probe(
        '{"name": "SCALE", "datatype": "FP32", "shape": [1, 4], "data": [1e2, -0.0, 1E-3, -Infinity]}'),
    "FP32 [1, 0] with data []": lambda: _json_probe('{"name": "SCALE", "datatype": "FP32", "shape": [1, 0], '
                                                    '"data": []}'),
    "FP16 [1, 0] with data []": lambda: _json_probe('{"name": "HALF", "datatype": "FP16", "shape": [1, 0], '
                                                    '"data": []}'),
    "FP32 [1, 0] with data [1]": lambda: _json_probe('{"name": "SCALE", "datatype": "FP32", "shape": [1, 0], '
                                                     '"data": [1]}'),
    "INT32 [0, 3] with data [[]]": lambda: _json_probe('{"name": "THRESHOLD", "datatype": "INT32", "shape": [0, 3], '
                                                       '"data": [[]]}'),
    "input parameters with another key": lambda: _json_probe(
        '{"name": "SCALE", "datatype": "FP32", "shape": [1, 1], "data": [1], "parameters": {"note": "x"}}'),
    "outputs asking for binary data": lambda: (json.dumps({"inputs": [
        {"name": "SCALE", "datatype": "FP32", "shape": [1, 1], "data": [1]},
        {"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["a photo of a cat"]}],
        "outputs": [{"name": "INFO", "parameters": {"binary_data": True}}]}).encode(), {}),
    "gzip body with other inputs": lambda: _gzip(other.GOOD["http-json-nested"](other.TEXT)),
    "BYTES [1, 0] binary of 0 bytes": lambda: other._binary_with("TAGS", "BYTES", [1, 0], b""),
    "FP32 [1, 0] binary of 0 bytes": lambda: other._binary_with("SCALE", "FP32", [1, 0], b""),
    "BYTES elements of 0 bytes, binary": lambda: other._binary_with("TAGS", "BYTES", [1, 3],
                                                                   other._framed(b"", b"", b"")),
}


@pytest.mark.parametrize("case", sorted(HTTP_PROBES))
def test_gateway_takes_an_http_request_exactly_when_triton_takes_it(probe_server: TritonProcess, case: str) -> None:
    from modalscale.gateway.features import PayloadError
    body, headers = HTTP_PROBES[case]()
    answer = httpx.post(f"http://127.0.0.1:{probe_server.http_port}/v2/models/echo/infer", content=body,
                        headers=headers, timeout=30)
    triton_took = answer.status_code == 200
    assert isinstance(_http(probe_server, *_json_probe()), dict), "the probe server no longer serves"
    try:
        features_from_http(body, headers)
        gateway_took, why = True, ""
    except PayloadError as exc:
        gateway_took, why = False, str(exc)
    assert gateway_took == triton_took, (answer.status_code, answer.text[:300], why)


def test_grpc_input_in_shared_memory_beside_raw_contents_is_taken_by_triton_and_the_gateway(
        probe_server: TritonProcess) -> None:
    """Triton reads raw_input_contents in order for the inputs not in shared memory only (infer_handler.cc: the
    index moves only on an input that reads it); tritonclient sends no entry for an input in shared memory."""
    from multiprocessing import shared_memory

    import numpy as np
    import tritonclient.grpc as tg
    from tritonclient.grpc._utils import _get_inference_request

    from modalscale.gateway.features import PayloadError
    from modalscale.runtime.client import build_inputs

    region = shared_memory.SharedMemory(name="modalscale_scale_probe", create=True, size=12)
    try:
        region.buf[:12] = np.array([[0.5, 1.0, 2.0]], dtype=np.float32).tobytes()
        with grpc.insecure_channel(f"127.0.0.1:{probe_server.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            stub.SystemSharedMemoryRegister(service_pb2.SystemSharedMemoryRegisterRequest(
                name="scale_probe", key="/modalscale_scale_probe", offset=0, byte_size=12), timeout=30)
        scale = tg.InferInput("SCALE", [1, 3], "FP32")
        scale.set_shared_memory("scale_probe", 12)
        request = _get_inference_request(model_name="echo", inputs=[scale, *build_inputs(tg, None, other.TEXT)],
                                         model_version="", request_id="", outputs=None, sequence_id=0,
                                         sequence_start=False, sequence_end=False, priority=0, timeout=None,
                                         parameters=None)
        message = bytes(request.SerializeToString())
        assert len(request.raw_input_contents) == 1 and len(request.inputs) == 2
        received = _grpc(probe_server, message)
    finally:
        region.close()
        region.unlink()
    assert isinstance(received, dict), received
    try:
        features_from_grpc(message)
    except PayloadError as exc:
        pytest.fail(f"Triton took it, the gateway refused it: {exc}")

