"""The inputs the gateway does not read (a user's model's own, beside or instead of the image and text inputs) are
checked as Triton reads them, in every wire form: a known datatype, a shape of non-negative integers, and data of
that shape (binary byte counts by arithmetic, BYTES framing walked, JSON element counts and types, gRPC typed
contents counts). A malformed one is refused with 400 / INVALID_ARGUMENT naming the field; a well-formed one goes
on with the request's features unchanged. The tables are also sent to a real tritonserver
(``tests/integration/runtime/test_runtime_gateway_wire.py``), whose echo model declares these inputs:
``SCALE`` FP32, ``THRESHOLD`` INT32, ``TAGS`` BYTES and ``HALF`` FP16, each of shape [-1, -1]."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request

from modalscale.gateway.features import (
    FEATURELESS,
    MAX_WALKED_ELEMENTS,
    PayloadError,
    RequestFeatures,
    features_from_grpc,
    features_from_http,
)
from modalscale.runtime.client import build_inputs

Headers = dict[str, str]
TEXT = "a photo of a cat"


def _others(module: Any, json_data: bool = False) -> list[Any]:
    """Well-formed SCALE, THRESHOLD, TAGS and HALF inputs (HALF always binary: FP16 has no JSON form)."""
    arrays = {"SCALE": np.array([[0.5, 1.0, 2.0]], dtype=np.float32),
              "THRESHOLD": np.array([[3, -4]], dtype=np.int32),
              "TAGS": np.array([[b"red", b""]], dtype=np.object_),
              "HALF": np.array([[1.5, -2.0]], dtype=np.float16)}
    out = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), {np.float32: "FP32", np.int32: "INT32",
                                                             np.object_: "BYTES", np.float16: "FP16"}[array.dtype.type])
        if module is th:
            tensor.set_data_from_numpy(array, binary_data=not json_data or name == "HALF")
        else:
            tensor.set_data_from_numpy(array)
        out.append(tensor)
    return out


def http_request(inputs: list[Any]) -> tuple[bytes, Headers]:
    body, size = th.InferenceServerClient.generate_request_body(inputs)
    return body, ({} if size is None else {"Inference-Header-Content-Length": str(size)})


def grpc_request(inputs: list[Any]) -> bytes:
    request = _get_inference_request(model_name="m", inputs=inputs, model_version="", request_id="", outputs=None,
                                     sequence_id=0, sequence_start=False, sequence_end=False, priority=0,
                                     timeout=None, parameters=None)
    return bytes(request.SerializeToString())


def grpc_typed_others(text: str | None) -> bytes:
    """Typed contents: SCALE in fp32_contents, THRESHOLD in int_contents, TAGS in bytes_contents."""
    request = service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name="SCALE", datatype="FP32", shape=[1, 3]).contents.fp32_contents.extend([0.5, 1, 2])
    request.inputs.add(name="THRESHOLD", datatype="INT32", shape=[1, 2]).contents.int_contents.extend([3, -4])
    request.inputs.add(name="TAGS", datatype="BYTES", shape=[1, 2]).contents.bytes_contents.extend([b"red", b""])
    if text is not None:
        request.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1]).contents.bytes_contents.append(text.encode())
    return bytes(request.SerializeToString())


def _json(*inputs: dict[str, Any]) -> tuple[bytes, Headers]:
    return json.dumps({"inputs": [*inputs, {"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                                            "data": [TEXT]}]}).encode(), {}


GOOD: dict[str, Callable[[str | None], Any]] = {
    # form: builder of a well-formed request with the four other inputs, and TEXT when given
    "http-binary": lambda text: http_request(_others(th) + build_inputs(th, None, text)),
    "http-json": lambda text: http_request(_others(th, json_data=True) + build_inputs(th, None, text)),
    "http-json-nested": lambda text: (json.dumps({"inputs": [
        {"name": "SCALE", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2.5], [3, float("nan")]]},  # ints are
        # numbers; json.dumps writes NaN, which is no JSON, and Triton takes it (tests/integration: checked)
        {"name": "THRESHOLD", "datatype": "INT32", "shape": [1, 2], "data": [[[3], -4]]},  # Triton flattens any nesting
        {"name": "TAGS", "datatype": "BYTES", "shape": [1, 0], "data": []},
    ] + ([] if text is None else [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [text]}])}).encode(),
        {}),
    "grpc-raw": lambda text: grpc_request(_others(tg) + build_inputs(tg, None, text)),
    "grpc-typed": grpc_typed_others,
}
"""Form -> builder; an HTTP builder returns ``(body, headers)``, a gRPC one the message bytes."""


def parse(form: str, built: Any) -> RequestFeatures:
    return features_from_grpc(built) if form.startswith("grpc") else features_from_http(*built)


@pytest.mark.parametrize("form", sorted(GOOD))
def test_well_formed_other_inputs_leave_the_features_as_they_were(form: str) -> None:
    assert parse(form, GOOD[form](TEXT)).text_tokens == 5
    assert parse(form, GOOD[form](None)) == FEATURELESS


# ---- HTTP: malformed other inputs


def _binary_with(name: str, datatype: str, shape: list[int], raw: bytes) -> tuple[bytes, Headers]:
    """TEXT as JSON and one other input whose binary data is ``raw``, as sent."""
    head = json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": shape,
                                   "parameters": {"binary_data_size": len(raw)}},
                                  {"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [TEXT]}]}).encode()
    return head + raw, {"Inference-Header-Content-Length": str(len(head))}


def _framed(*elements: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


HTTP_BAD: dict[str, tuple[Callable[[], tuple[bytes, Headers]], str, str]] = {
    # name: (request, field, reason)
    "other input: unknown datatype": (lambda: _json({"name": "SCALE", "datatype": "FLOAT", "shape": [1, 3],
                                                     "data": [1, 2, 3]}), "inputs[SCALE].datatype", "UnknownDatatype"),
    "other input: negative shape": (lambda: _json({"name": "SCALE", "datatype": "FP32", "shape": [1, -3],
                                                   "data": [1, 2, 3]}), "inputs[SCALE].shape", "MalformedRequest"),
    "other input: non-integer shape": (lambda: _json({"name": "SCALE", "datatype": "FP32", "shape": [1, 3.0],
                                                      "data": [1, 2, 3]}), "inputs[SCALE].shape", "MalformedRequest"),
    "other input: dimension above int64": (lambda: _json({"name": "SCALE", "datatype": "FP32", "shape": [2 ** 63, 0],
                                                          "data": []}), "inputs[SCALE].shape", "MalformedRequest"),
    "other input: 65 dimensions": (lambda: _json({"name": "SCALE", "datatype": "FP32", "shape": [1] * 65,
                                                  "data": [1]}), "inputs[SCALE].shape", "TooManyElements"),
    "other input: shape/data mismatch (JSON)": (lambda: _json({"name": "SCALE", "datatype": "FP32", "shape": [2, 3],
                                                               "data": [1, 2, 3, 4, 5]}), "inputs[SCALE].shape",
                                                "ShapeMismatch"),
    "other input: a shape larger than the body (JSON)": (lambda: _json({"name": "SCALE", "datatype": "FP32",
                                                                        "shape": [2 ** 62, 2 ** 62], "data": [1]}),
                                                         "inputs[SCALE].shape", "ShapeMismatch"),
    "other input: string in FP32 data (JSON)": (lambda: _json({"name": "SCALE", "datatype": "FP32", "shape": [1, 3],
                                                               "data": [1, "2", 3]}), "inputs[SCALE].data",
                                                "WrongElementType"),
    "other input: bool in FP32 data (JSON)": (lambda: _json({"name": "SCALE", "datatype": "FP32", "shape": [1, 1],
                                                             "data": [[True]]}), "inputs[SCALE].data",
                                              "WrongElementType"),
    "other input: float in INT32 data (JSON)": (lambda: _json({"name": "THRESHOLD", "datatype": "INT32",
                                                               "shape": [1, 2], "data": [1, 2.5]}),
                                                "inputs[THRESHOLD].data", "WrongElementType"),
    "other input: number in BYTES data (JSON)": (lambda: _json({"name": "TAGS", "datatype": "BYTES", "shape": [1, 2],
                                                                "data": ["red", 7]}), "inputs[TAGS].data",
                                                 "WrongElementType"),
    "other input: FP16 as JSON": (lambda: _json({"name": "HALF", "datatype": "FP16", "shape": [1, 2],
                                                 "data": [1.5, 2]}), "inputs[HALF].data", "UnsupportedJsonData"),
    "other input: data not a list": (lambda: _json({"name": "SCALE", "datatype": "FP32", "shape": [1, 1],
                                                    "data": 1.5}), "inputs[SCALE].data", "MalformedRequest"),
    "other input: no data": (lambda: _json({"name": "SCALE", "datatype": "FP32", "shape": [1, 1]}),
                             "inputs[SCALE].data", "MissingData"),
    "other input: binary size mismatch": (lambda: _binary_with("SCALE", "FP32", [1, 3], bytes(8)),
                                          "inputs[SCALE].shape", "ShapeMismatch"),
    "other input: binary size mismatch (FP16)": (lambda: _binary_with("HALF", "FP16", [1, 2], bytes(2)),
                                                 "inputs[HALF].shape", "ShapeMismatch"),
    "other input: truncated BYTES framing": (lambda: _binary_with("TAGS", "BYTES", [1, 2],
                                                                  _framed(b"ab") + struct.pack("<I", 10) + b"abc"),
                                             "inputs[TAGS] binary data", "TruncatedBinaryData"),
    "other input: BYTES length cut": (lambda: _binary_with("TAGS", "BYTES", [1, 2], _framed(b"ab", b"cd") + b"\0\0"),
                                      "inputs[TAGS] binary data", "TruncatedBinaryData"),
    "other input: more BYTES elements than the shape": (lambda: _binary_with("TAGS", "BYTES", [1, 2],
                                                                             _framed(b"a", b"b", b"c")),
                                                        "inputs[TAGS].shape", "ShapeMismatch"),
    "other input: fewer BYTES elements than the shape": (lambda: _binary_with("TAGS", "BYTES", [1, 2],
                                                                              _framed(b"abcdef")),
                                                         "inputs[TAGS].shape", "ShapeMismatch"),
    "other input: BYTES section shorter than 4 per element": (lambda: _binary_with("TAGS", "BYTES", [1, 3],
                                                                                   _framed(b"", b"")),
                                                              "inputs[TAGS].shape", "ShapeMismatch"),
    "other input: data beside binary data": (lambda: _with_data(_binary_with("SCALE", "FP32", [1, 1], bytes(4)), 0),
                                             "inputs[SCALE].data", "MalformedRequest"),
    "text input: data beside binary data": (lambda: _with_data(http_request(build_inputs(th, None, TEXT)), 0),
                                            "inputs[TEXT].data", "MalformedRequest"),
}


def _with_data(request: tuple[bytes, Headers], index: int) -> tuple[bytes, Headers]:
    """The binary request with ``data`` also set on its input ``index``."""
    body, headers = request
    size = int(headers["Inference-Header-Content-Length"])
    head = json.loads(body[:size])
    head["inputs"][index]["data"] = [1]
    new_head = json.dumps(head).encode()
    return new_head + body[size:], {"Inference-Header-Content-Length": str(len(new_head))}


@pytest.mark.parametrize("case", sorted(HTTP_BAD))
def test_malformed_other_http_input_is_refused_naming_field_and_reason(case: str) -> None:
    build, field, reason = HTTP_BAD[case]
    with pytest.raises(PayloadError) as caught:
        features_from_http(*build())
    assert (caught.value.field, caught.value.reason) == (field, reason), str(caught.value)
    assert str(caught.value).startswith(f"{field}: ") and str(caught.value).endswith(caught.value.fix)


# ---- gRPC: malformed other inputs


def _grpc_raw_with(name: str, datatype: str, shape: list[int], raw: bytes) -> bytes:
    request = service_pb2.ModelInferRequest.FromString(grpc_request(build_inputs(tg, None, TEXT)))
    request.inputs.add(name=name, datatype=datatype, shape=shape)
    request.raw_input_contents.append(raw)
    return bytes(request.SerializeToString())


def _grpc_typed_with(name: str, datatype: str, shape: list[int], field: str, values: list[Any]) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1]).contents.bytes_contents.append(TEXT.encode())
    getattr(request.inputs.add(name=name, datatype=datatype, shape=shape).contents, field).extend(values)
    return bytes(request.SerializeToString())


GRPC_BAD: dict[str, tuple[Callable[[], bytes], str, str]] = {
    "other input: unknown datatype": (lambda: _grpc_raw_with("SCALE", "FLOAT", [1, 3], bytes(12)),
                                      "inputs[SCALE].datatype", "UnknownDatatype"),
    "other input: negative shape": (lambda: _grpc_raw_with("SCALE", "FP32", [1, -3], bytes(12)),
                                    "inputs[SCALE].shape", "MalformedRequest"),
    "other input: 65 dimensions": (lambda: _grpc_raw_with("SCALE", "FP32", [1] * 65, bytes(4)),
                                   "inputs[SCALE].shape", "TooManyElements"),
    "other input: a million dimensions": (lambda: _grpc_raw_with("SCALE", "FP32", [1] * 1_000_000 + [0], b""),
                                          "inputs[SCALE].shape", "TooManyElements"),
    "other input: raw size mismatch": (lambda: _grpc_raw_with("SCALE", "FP32", [1, 3], bytes(8)),
                                       "inputs[SCALE].shape", "ShapeMismatch"),
    "other input: raw size mismatch (FP16)": (lambda: _grpc_raw_with("HALF", "FP16", [1, 2], bytes(3)),
                                              "inputs[HALF].shape", "ShapeMismatch"),
    "other input: truncated raw BYTES framing": (lambda: _grpc_raw_with("TAGS", "BYTES", [1, 1],
                                                                        struct.pack("<I", 10) + b"abc"),
                                                 "raw_input_contents[1] (TAGS)", "TruncatedBinaryData"),
    "other input: more raw BYTES elements than the shape": (lambda: _grpc_raw_with("TAGS", "BYTES", [1, 1],
                                                                                   _framed(b"a", b"b")),
                                                            "inputs[TAGS].shape", "ShapeMismatch"),
    "other input: typed count mismatch": (lambda: _grpc_typed_with("SCALE", "FP32", [2, 3], "fp32_contents",
                                                                   [1.0] * 5), "inputs[SCALE].shape",
                                          "ShapeMismatch"),
    "other input: typed BYTES count mismatch": (lambda: _grpc_typed_with("TAGS", "BYTES", [1, 3], "bytes_contents",
                                                                         [b"a", b"b"]), "inputs[TAGS].shape",
                                                "ShapeMismatch"),
    "other input: typed contents in another type's field": (lambda: _grpc_typed_with(
        "SCALE", "FP32", [1, 3], "int_contents", [1, 2, 3]), "inputs[SCALE].shape", "ShapeMismatch"),
}


@pytest.mark.parametrize("case", sorted(GRPC_BAD))
def test_malformed_other_grpc_input_is_refused_naming_field_and_reason(case: str) -> None:
    build, field, reason = GRPC_BAD[case]
    with pytest.raises(PayloadError) as caught:
        features_from_grpc(build())
    assert (caught.value.field, caught.value.reason) == (field, reason), str(caught.value)
    assert str(caught.value).startswith(f"{field}: ") and str(caught.value).endswith(caught.value.fix)


# ---- what is not the gateway's to check


def test_an_other_input_in_shared_memory_is_left_to_the_replica() -> None:
    """Only its datatype and shape are checked: its data is in a region the gateway cannot read."""
    shm = {"name": "SCALE", "datatype": "FP32", "shape": [1, 3],
           "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 12}}
    assert features_from_http(*_json(shm)).text_tokens == 5
    with pytest.raises(PayloadError, match="UnknownDatatype"):
        features_from_http(*_json({**shm, "datatype": "FLOAT"}))


def test_bytes_framing_past_the_walk_budget_is_left_to_the_replica() -> None:
    """Walking costs a Python loop turn per element; past MAX_WALKED_ELEMENTS in one request, the framing goes
    unchecked (the replica checks it), its byte count still checked by arithmetic."""
    n = MAX_WALKED_ELEMENTS + 1
    broken = _framed(*[b""] * (n - 1)) + struct.pack("<I", 99)
    assert features_from_http(*_binary_with("TAGS", "BYTES", [1, n], broken)).text_tokens == 5
    with pytest.raises(PayloadError, match="TruncatedBinaryData"):
        features_from_http(*_binary_with("TAGS", "BYTES", [1, n - 1], broken[4:]))


# ---- what Triton does not read


@pytest.mark.parametrize("tensor", [
    {"name": "HALF", "datatype": "FP16", "shape": [1, 0], "data": []},
    {"name": "SCALE", "datatype": "FP32", "shape": [1, 0], "data": [1]},
    {"name": "TAGS", "datatype": "BYTES", "shape": [0, 2], "data": [7, None]},
    {"name": "SCALE", "datatype": "FP32", "shape": [2 ** 62, 0], "data": [1]},
], ids=["FP16 empty", "FP32 [1, 0] with an element", "BYTES [0, 2] with non-strings", "a huge dimension and 0"])
def test_json_data_of_an_input_of_zero_elements_is_not_read(tensor: dict[str, Any]) -> None:
    """Triton appends no data for a JSON input whose shape holds 0 elements and never reads its ``data``
    (http_server.cc, ``element_cnt == 0``): a real tritonserver answers 200 to the FP16 and FP32 [1, 0] cases
    (tests/integration/runtime/test_runtime_gateway_wire.py), so the gateway takes them too."""
    assert features_from_http(*_json(tensor)).text_tokens == 5


def _grpc_with_shared_memory(*raw_inputs: Any) -> bytes:
    """SCALE in shared memory (as tritonclient sends it: no raw_input_contents entry), then ``raw_inputs``."""
    scale = tg.InferInput("SCALE", [1, 3], "FP32")
    scale.set_shared_memory("region", 12)
    return grpc_request([scale, *raw_inputs])


def test_grpc_input_in_shared_memory_takes_no_raw_input_contents_entry() -> None:
    """Triton reads raw_input_contents in order for the inputs not in shared memory only (infer_handler.cc: its
    index moves only on such an input); a real tritonserver takes SCALE in shared memory beside TEXT's raw entry."""
    message = _grpc_with_shared_memory(*build_inputs(tg, None, TEXT))
    assert len(service_pb2.ModelInferRequest.FromString(message).raw_input_contents) == 1
    assert features_from_grpc(message).text_tokens == 5
    threshold = tg.InferInput("THRESHOLD", [1, 2], "INT32")
    threshold.set_data_from_numpy(np.array([[3, -4]], dtype=np.int32))
    assert features_from_grpc(_grpc_with_shared_memory(threshold, *build_inputs(tg, None, TEXT))).text_tokens == 5
    request = service_pb2.ModelInferRequest.FromString(
        _grpc_with_shared_memory(threshold, *build_inputs(tg, None, TEXT)))
    request.inputs[1].shape[:] = [1, 3]  # THRESHOLD's raw entry is 8 bytes: 2 elements, not 3
    with pytest.raises(PayloadError) as caught:
        features_from_grpc(bytes(request.SerializeToString()))
    assert (caught.value.field, caught.value.reason) == ("inputs[THRESHOLD].shape", "ShapeMismatch")


def test_grpc_raw_input_contents_short_of_the_inputs_not_in_shared_memory_is_refused() -> None:
    """Triton: "unable to find data for input tensor" when an input without shared memory has no entry left."""
    request = service_pb2.ModelInferRequest.FromString(
        _grpc_with_shared_memory(*build_inputs(tg, None, TEXT)))
    request.inputs.add(name="THRESHOLD", datatype="INT32", shape=[1, 1])
    with pytest.raises(PayloadError) as caught:
        features_from_grpc(bytes(request.SerializeToString()))
    assert caught.value.field == "raw_input_contents"


@pytest.mark.parametrize("form", ["http", "grpc"])
def test_a_binary_section_longer_than_its_shape_goes_on_as_a_padded_non_linear_format_may_be(form: str) -> None:
    """A TensorRT model's input of a non-linear format (``is_non_linear_format_io``, e.g. CHW32) is padded beyond
    elements x element size; Triton's core leaves its byte size to the backend (``infer_request.cc``), so the gateway,
    which does not know the model's configuration, must not refuse it (review, 7 Dec 2026: refused ``ShapeMismatch``).
    A shorter section is refused whatever the format."""
    padded = bytes(4 * 32)  # FP32 [1, 3] padded to 32 channels
    if form == "http":
        features_from_http(*_binary_with("SCALE", "FP32", [1, 3], padded))
        with pytest.raises(PayloadError, match="less than 4 per element"):
            features_from_http(*_binary_with("SCALE", "FP32", [1, 3], bytes(11)))
    else:
        features_from_grpc(_grpc_raw_with("SCALE", "FP32", [1, 3], padded))
        with pytest.raises(PayloadError, match="less than 4 per element"):
            features_from_grpc(_grpc_raw_with("SCALE", "FP32", [1, 3], bytes(11)))
