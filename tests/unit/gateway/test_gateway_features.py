"""Request features from KServe v2 payloads built by tritonclient's own request builders (HTTP JSON, HTTP binary
tensor extension, gzip, gRPC raw and typed contents), and the table of bad inputs the gateway answers 400."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from PIL import Image
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request

from modalscale.gateway.features import (
    FEATURELESS,
    TEXT_TOKENS_METHOD,
    InputNames,
    PayloadError,
    RequestFeatures,
    features_from_grpc,
    features_from_http,
)
from modalscale.runtime.client import build_inputs
from modalscale.runtime.model.metrics import MODALITIES
from modalscale.runtime.workload import photo_at, photo_bytes, text_of_tokens

Headers = dict[str, str]


# ---- request builders (tritonclient's, so the wire formats are the real ones)


def http_binary(images: Sequence[bytes] | None, text: str | None,
                names: InputNames = InputNames()) -> tuple[bytes, Headers]:
    """The body and headers ``tritonclient.http`` sends (binary data, its default and runtime/client.py's)."""
    body, json_size = th.InferenceServerClient.generate_request_body(_named(th, images, text, names))
    return body, ({} if json_size is None else {"Inference-Header-Content-Length": str(json_size)})


def http_json(images: Sequence[bytes] | None, text: str | None,
              names: InputNames = InputNames()) -> tuple[bytes, Headers]:
    """Text as a JSON string (``binary_data=False``); images stay binary (an encoded image is not UTF-8, and
    tritonclient refuses to put it in JSON)."""
    inputs = _named(th, images, None, names)
    if text is not None:
        tensor = th.InferInput(names.text, [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[text]], dtype=np.object_), binary_data=False)
        inputs.append(tensor)
    body, json_size = th.InferenceServerClient.generate_request_body(inputs)
    return body, ({} if json_size is None else {"Inference-Header-Content-Length": str(json_size)})


def grpc_raw(images: Sequence[bytes] | None, text: str | None, names: InputNames = InputNames()) -> bytes:
    """The ModelInferRequest ``tritonclient.grpc`` sends (raw_input_contents)."""
    inputs = _named(tg, images, text, names)
    request = _get_inference_request(model_name="m", inputs=inputs, model_version="", request_id="", outputs=None,
                                     sequence_id=0, sequence_start=False, sequence_end=False, priority=0,
                                     timeout=None, parameters=None)
    return bytes(request.SerializeToString())


def grpc_typed(images: Sequence[bytes] | None, text: str | None, names: InputNames = InputNames()) -> bytes:
    """The same request with typed ``contents.bytes_contents`` (what other KServe v2 clients send)."""
    request = service_pb2.ModelInferRequest(model_name="m")
    if images is not None:
        tensor = request.inputs.add(name=names.images, datatype="BYTES", shape=[1, len(images)])
        tensor.contents.bytes_contents.extend(images)
    if text is not None:
        tensor = request.inputs.add(name=names.text, datatype="BYTES", shape=[1, 1])
        tensor.contents.bytes_contents.append(text.encode())
    return bytes(request.SerializeToString())


def _named(module: Any, images: Sequence[bytes] | None, text: str | None, names: InputNames) -> list[Any]:
    """runtime/client.py's inputs, under ``names`` (the same tensors; InferInput has no rename)."""
    inputs = build_inputs(module, images, text)
    if names == InputNames():
        return inputs
    renamed = []
    for tensor, data in zip(inputs, [a for a in (images, text) if a is not None], strict=True):
        name = names.images if tensor.name() == "IMAGES" else names.text
        array = np.array([list(data)] if isinstance(data, list) else [[data.encode()]], dtype=np.object_)
        copy = module.InferInput(name, list(array.shape), "BYTES")
        copy.set_data_from_numpy(array)
        renamed.append(copy)
    return renamed


def _pillow_pixels(data: bytes) -> int:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return image.width * image.height


def expected(images: Sequence[bytes] | None, text: str | None, tokens: int | None) -> RequestFeatures:
    """Features computed independently: Pillow's decoded size, the token count the text was built with."""
    pixels = tuple(_pillow_pixels(d) for d in images or ())
    modality = "image_text" if pixels and tokens else "image" if pixels else "text"
    return RequestFeatures(modality=modality, image_pixels=pixels, text_tokens=tokens,
                           image_digests=tuple(hashlib.blake2b(d, digest_size=16).digest() for d in images or ()))


REQUESTS: dict[str, tuple[list[bytes] | None, str | None, int | None]] = {
    "text": (None, text_of_tokens(37, seed=1), 37),
    "image": ([photo_bytes("rocket")], None, None),
    "image_text": ([photo_bytes("coffee")], text_of_tokens(12, seed=2), 12),
    "three_images_text": ([photo_bytes("chelsea"), photo_at("china", 160, 120, "PNG"),
                           photo_at("flower", 99, 77, "WEBP")], text_of_tokens(300, seed=3), 300),
    "images_blank_text": ([photo_at("astronaut", 64, 48, "GIF")], "  \n ", None),
    "empty_images_text": ([], text_of_tokens(5, seed=4), 5),
}

BUILDERS: dict[str, Callable[[list[bytes] | None, str | None, InputNames], Any]] = {
    "http-binary": http_binary,
    "http-json": http_json,
    "http-binary-gzip": lambda i, t, n: _gzip(*http_binary(i, t, n)),
    "grpc-raw": grpc_raw,
    "grpc-typed": grpc_typed,
}
"""Form -> builder; an HTTP builder returns ``(body, headers)``, a gRPC one the message bytes."""


def parse(form: str, built: Any, names: InputNames = InputNames()) -> RequestFeatures:
    if form.startswith("grpc"):
        return features_from_grpc(built, inputs=names)
    return features_from_http(*built, inputs=names)


def _gzip(body: bytes, headers: Headers) -> tuple[bytes, Headers]:
    return gzip.compress(body), {**headers, "content-encoding": "gzip"}


@pytest.mark.parametrize("form", sorted(BUILDERS))
@pytest.mark.parametrize("request_name", sorted(REQUESTS))
def test_every_wire_form_of_a_request_gives_the_same_features(request_name: str, form: str) -> None:
    images, text, tokens = REQUESTS[request_name]
    got = parse(form, BUILDERS[form](images, text, InputNames()))
    assert got == expected(images, text, tokens)
    assert got.modality in MODALITIES


@pytest.mark.parametrize("form", sorted(BUILDERS))
def test_a_user_models_own_input_names_are_read(form: str) -> None:
    names = InputNames(images="pixels_in", text="prompt")
    images, text = [photo_at("rocket", 321, 123, "JPEG")], text_of_tokens(9, seed=5)
    built = BUILDERS[form](images, text, names)
    assert parse(form, built, names) == expected(images, text, 9)
    # the built-in names mean nothing to this model: no features read, but no 400 either (forwarded, counted as
    # the text class with 0 tokens: test_gateway_byo_inputs.py)
    assert parse(form, built) == FEATURELESS


def test_other_inputs_are_skipped_with_their_binary_data() -> None:
    """A model's extra inputs (here an INT32 tensor before IMAGES, in binary) are walked past, not read."""
    extra = th.InferInput("THRESHOLD", [1, 3], "INT32")
    extra.set_data_from_numpy(np.array([[1, 2, 3]], dtype=np.int32))
    images = [photo_bytes("flower")]
    body, size = th.InferenceServerClient.generate_request_body([extra, *build_inputs(th, images, "a cat")])
    got = features_from_http(body, {"inference-header-content-length": str(size)})
    assert got == expected(images, "a cat", 2)


@pytest.mark.parametrize(("shape", "data"), [
    ([1, 2], [["one", "two"]]),
    ([1, 2], ["one", "two"]),
    ([2, 1, 1, 1], [[[["one"]]], [[["two"]]]]),
])
def test_nested_and_flat_json_data_are_both_row_major_elements(shape: list[int], data: list[Any]) -> None:
    body = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": shape, "data": data}]})
    assert features_from_http(body.encode(), {}).text_tokens == 2


def test_text_method_is_named() -> None:
    assert TEXT_TOKENS_METHOD == "minilm-wordpiece"


# ---- the bad-input table: every refusal names the field, a CamelCase reason and the fix

JPEG = photo_bytes("rocket")


def _json_body(*inputs: dict[str, Any]) -> bytes:
    return json.dumps({"inputs": list(inputs)}).encode()


def _binary(images: Sequence[bytes] | None = None, text: str | None = None) -> tuple[bytes, Headers]:
    return http_binary(images, text)


def _cut(request: tuple[bytes, Headers], drop: int) -> tuple[bytes, Headers]:
    body, headers = request
    return body[:-drop], headers


def _wrong_datatype() -> tuple[bytes, Headers]:
    tensor = th.InferInput("IMAGES", [1, 3], "UINT8")
    tensor.set_data_from_numpy(np.array([[1, 2, 3]], dtype=np.uint8))
    body, size = th.InferenceServerClient.generate_request_body([tensor])
    return body, {"Inference-Header-Content-Length": str(size)}


def _with_head(request: tuple[bytes, Headers], mutate: Callable[[Any], None]) -> tuple[bytes, Headers]:
    """The request with its JSON part changed by ``mutate`` (the binary part and the header follow)."""
    body, headers = request
    size = int(headers["Inference-Header-Content-Length"])
    head = json.loads(body[:size])
    mutate(head)
    new_head = json.dumps(head).encode()
    return new_head + body[size:], {"Inference-Header-Content-Length": str(len(new_head))}


def _json_part_only(request: tuple[bytes, Headers]) -> tuple[bytes, Headers]:
    """The JSON part alone, without the header that announces a binary section."""
    body, headers = request
    return body[:int(headers["Inference-Header-Content-Length"])], {}


def _raw_image_element(declared: int, actual: bytes) -> tuple[bytes, Headers]:
    raw = struct.pack("<I", declared) + actual
    head = json.dumps({"inputs": [{"name": "IMAGES", "datatype": "BYTES", "shape": [1, 1],
                                   "parameters": {"binary_data_size": len(raw)}}]}).encode()
    return head + raw, {"Inference-Header-Content-Length": str(len(head))}


def _many_empty_elements() -> tuple[bytes, Headers]:
    """A TEXT tensor of shape [1] whose binary data holds 200000 empty elements."""
    raw = bytes(4 * 200_000)
    head = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1],
                                   "parameters": {"binary_data_size": len(raw)}}]}).encode()
    return head + raw, {"Inference-Header-Content-Length": str(len(head))}


def _bomb() -> tuple[bytes, Headers]:
    return zlib.compress(b" " * 5_000_000), {"Content-Encoding": "deflate"}


HTTP_BAD: dict[str, tuple[Callable[[], tuple[bytes, Headers]], str, str]] = {
    # name: (request, field, reason); max_body_bytes is 1 MiB in this table
    "oversized body": (lambda: _binary([JPEG] * 12), "body", "BodyTooLarge"),
    "oversized after inflating": (_bomb, "body", "BodyTooLarge"),
    "malformed JSON": (lambda: (b'{"inputs": [', {}), "body", "MalformedJson"),
    "JSON part is not JSON": (lambda: (b"xx" + JPEG, {"Inference-Header-Content-Length": "2"}), "body",
                              "MalformedJson"),
    "not a v2 request": (lambda: (b'{"instances": [1]}', {}), "inputs", "MalformedRequest"),
    "input without name": (lambda: (_json_body({"datatype": "BYTES"}), {}), "inputs[0]", "MalformedRequest"),
    "wrong datatype": (_wrong_datatype, "inputs[IMAGES].datatype", "WrongDatatype"),
    "blank text only": (lambda: _binary(None, " \t"), "inputs", "EmptyRequest"),
    "data not a list": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                                             "data": "a photo of a cat"}), {}), "inputs[TEXT].data",
                        "MalformedRequest"),
    "shape/data mismatch (JSON)": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES", "shape": [1, 2],
                                                        "data": ["a cat"]}), {}), "inputs[TEXT].shape",
                                   "ShapeMismatch"),
    "shape/data mismatch (binary)": (lambda: _with_head(_binary([JPEG, JPEG]),
                                                        lambda head: head["inputs"][0].update(shape=[1, 3])),
                                     "inputs[IMAGES].shape", "ShapeMismatch"),
    "negative shape": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES", "shape": [-1], "data": ["a"]}),
                                {}), "inputs[TEXT].shape", "MalformedRequest"),
    "JSON element not a string": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES", "shape": [1],
                                                       "data": [7]}), {}), "inputs[TEXT].data[0]",
                                  "WrongElementType"),
    "no data": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES", "shape": [1]}), {}), "inputs[TEXT].data",
                "MissingData"),
    "truncated binary section": (lambda: _cut(_binary([JPEG]), 10), "inputs[IMAGES].parameters.binary_data_size",
                                 "TruncatedBinaryData"),
    "binary size without binary section": (lambda: _json_part_only(_binary(None, "a cat")),
                                           "inputs[TEXT].parameters.binary_data_size", "TruncatedBinaryData"),
    "truncated BYTES element": (lambda: _raw_image_element(1000, JPEG[:100]), "inputs[IMAGES] binary data",
                                "TruncatedBinaryData"),
    "trailing bytes": (lambda: (_binary([JPEG])[0] + b"\0", _binary([JPEG])[1]), "body", "TrailingBinaryData"),
    "bad header length": (lambda: (_binary([JPEG])[0], {"Inference-Header-Content-Length": "12x"}),
                          "header Inference-Header-Content-Length", "BadHeaderLength"),
    "header length past the body": (lambda: (b"{}", {"Inference-Header-Content-Length": "3"}),
                                    "header Inference-Header-Content-Length", "BadHeaderLength"),
    "unknown content encoding": (lambda: (_binary([JPEG])[0], {**_binary([JPEG])[1], "Content-Encoding": "br"}),
                                 "header Content-Encoding", "UnsupportedContentEncoding"),
    "truncated gzip": (lambda: (gzip.compress(b'{"inputs": []}')[:-9], {"content-encoding": "gzip"}), "body",
                       "CorruptBody"),
    "duplicate input": (lambda: (_json_body(*[{"name": "TEXT", "datatype": "BYTES", "shape": [1],
                                               "data": ["a"]}] * 2), {}), "inputs[TEXT]", "DuplicateInput"),
    "shared memory": (lambda: (_json_body({"name": "IMAGES", "datatype": "BYTES", "shape": [1],
                                           "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 8}}),
                               {}), "inputs[IMAGES].parameters.shared_memory_region", "SharedMemoryUnsupported"),
    "truncated JPEG header": (lambda: _binary([JPEG[:600]]), "inputs[IMAGES].data[0]", "CorruptImageHeader"),
    "truncated PNG header": (lambda: _binary([JPEG, photo_bytes("coffee")[:30]]), "inputs[IMAGES].data[1]",
                             "CorruptImageHeader"),
    "base64 image": (lambda: _binary([base64.b64encode(JPEG)]), "inputs[IMAGES].data[0]",
                     "UnsupportedImageFormat"),
    "empty image": (lambda: _binary([b""], "a cat"), "inputs[IMAGES].data[0]", "EmptyImage"),
    "too many elements (JSON)": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES", "shape": [1, 5000],
                                                      "data": ["a"] * 5000}), {}), "inputs[TEXT].shape",
                                 "TooManyElements"),
    "more elements than the shape (JSON)": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES", "shape": [1],
                                                                 "data": ["a"] * 150_000}), {}),
                                            "inputs[TEXT].shape", "ShapeMismatch"),
    "nested empty lists": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                                                "data": [[[]] * 100_000, "a"]}), {}), "inputs[TEXT].data",
                           "TooManyElements"),
    "more elements than the shape (binary)": (_many_empty_elements, "inputs[TEXT].shape", "ShapeMismatch"),
    # An adversarial probe (6 Dec 2026): 320,000 huge dimensions ending in 0 (0 elements, 6 MB) took 219 s of the
    # event loop to multiply; nested data of such a shape worse. Refused on the count of dimensions, or on a
    # dimension above what the gateway reads, before anything is multiplied.
    "too many dimensions (JSON)": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES",
                                                        "shape": [999_999_999_999] * 40_000 + [0],
                                                        "data": []}), {}), "inputs[TEXT].shape", "TooManyElements"),
    "a dimension above the limit (JSON)": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES",
                                                                "shape": [2 ** 62, 0], "data": []}), {}),
                                           "inputs[TEXT].shape", "TooManyElements"),
    "33 dimensions of 1 (JSON)": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES", "shape": [1] * 33,
                                                       "data": ["a"]}), {}), "inputs[TEXT].shape",
                                  "TooManyElements"),
    "JPEG of junk bytes": (lambda: _binary([JPEG, b"\xff\xd8\xff\xe0\x00\x02" + bytes(1 << 19)]),
                           "inputs[IMAGES].data[1]", "CorruptImageHeader"),
    "text not UTF-8": (lambda: _raw_text(b"\xff\xfe"), "inputs[TEXT].data[0]", "InvalidUtf8"),
    # An adversarial probe (6 Dec 2026): what a replica may read otherwise than the gateway is refused.
    "gzip with a second member": (lambda: (gzip.compress(_json_body({"name": "TEXT", "datatype": "BYTES",
                                                                     "shape": [1], "data": ["x"]}))
                                           + gzip.compress(b'{"inputs": []}'), {"Content-Encoding": "gzip"}),
                                  "body", "CorruptBody"),
    "gzip with junk after it": (lambda: (gzip.compress(b'{"inputs": []}') + b"junk", {"Content-Encoding": "gzip"}),
                                "body", "CorruptBody"),
    "a key twice": (lambda: (b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["a b c"]}],'
                             b' "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["x"]}]}', {}),
                    "body", "MalformedJson"),
    "UTF-16 JSON": (lambda: (_json_body({"name": "TEXT", "datatype": "BYTES", "shape": [1],
                                         "data": ["hi"]}).decode().encode("utf-16"), {}), "body", "MalformedJson"),
    "header length with an underscore": (lambda: _with_length(lambda n: f"{n // 10}_{n % 10}"),
                                         "header Inference-Header-Content-Length", "BadHeaderLength"),
    # An adversarial probe (6 Dec 2026): a PNG header claiming 4294967295 x 4294967295 (CRC right) put 1.8e19
    # pixels into the demand histogram the autoscaler sizes from.
    "image header too large": (lambda: _binary([_png_of_size(4_294_967_295, 4_294_967_295)]),
                               "inputs[IMAGES].data[0]", "ImageTooLarge"),
    "image just over Pillow's bomb limit": (lambda: _binary([_png_of_size(178_956_971, 1)]),
                                            "inputs[IMAGES].data[0]", "ImageTooLarge"),
}


def _with_length(spell: Callable[[int], str]) -> tuple[bytes, Headers]:
    """A binary request whose Inference-Header-Content-Length is its right value spelled by ``spell``."""
    body, headers = _binary([JPEG], "a cat")
    return body, {"Inference-Header-Content-Length": spell(int(headers["Inference-Header-Content-Length"]))}


def test_a_header_length_is_read_as_triton_reads_it() -> None:
    """A leading "+" is a length to Triton (strtoul) and to the gateway; fullwidth digits, which Python's int()
    takes, are none (they cannot even be sent in an HTTP/1.1 header by most clients)."""
    body, headers = _binary([JPEG], "a cat")
    n = int(headers["Inference-Header-Content-Length"])
    assert features_from_http(body, {"Inference-Header-Content-Length": f"+{n}"}, InputNames(), 1 << 20).text_tokens
    fullwidth = str(n).translate({ord(d): 0xFF10 + int(d) for d in "0123456789"})
    with pytest.raises(PayloadError) as refused:
        features_from_http(body, {"Inference-Header-Content-Length": fullwidth}, InputNames(), 1 << 20)
    assert (refused.value.field, refused.value.reason) == ("header Inference-Header-Content-Length", "BadHeaderLength")


def _png_of_size(width: int, height: int) -> bytes:
    """The coffee photo's PNG with its IHDR claiming ``width`` x ``height`` (CRC recomputed)."""
    data = bytearray(photo_bytes("coffee"))
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def test_an_image_at_pillows_bomb_limit_is_read() -> None:
    from modalscale.gateway.features import MAX_IMAGE_PIXELS

    feats = features_from_http(*_binary([_png_of_size(MAX_IMAGE_PIXELS, 1)]), InputNames(), 1 << 20)
    assert feats.image_pixels == (MAX_IMAGE_PIXELS,)


@pytest.mark.parametrize(("path", "call"), [
    ("/v2/models/m/infer", None),  # the canonical path: INFER_PATH's, read for features
    ("/v2/models/m/versions/2/infer", None),
    ("/v2/models/m/generate", "generate"), ("/v2/models/m/generate_stream", "generate_stream"),
    ("//v2/models/m/infer", "infer"), ("/v2/models/m/infer/", "infer"), ("/v2//models/m/versions/1//infer", "infer"),
    ("/v2/models/m", None), ("/v2/health/ready", None), ("/v2/models/m/inference", None),
])
def test_every_other_spelling_of_a_model_call_is_recognised(path: str, call: str | None) -> None:
    from modalscale.gateway.server import INFER_PATH, MODEL_CALL

    m = None if INFER_PATH.match(path) else MODEL_CALL.match(path)
    assert (m[1] if m else None) == call



def _raw_text(raw: bytes) -> tuple[bytes, Headers]:
    inputs = build_inputs(th, None, raw)
    body, size = th.InferenceServerClient.generate_request_body(inputs)
    return body, {"Inference-Header-Content-Length": str(size)}


@pytest.mark.parametrize("case", sorted(HTTP_BAD))
def test_bad_http_request_is_refused_naming_field_reason_and_fix(case: str) -> None:
    build, field, reason = HTTP_BAD[case]
    body, headers = build()
    with pytest.raises(PayloadError) as caught:
        features_from_http(body, headers, max_body_bytes=1 << 20)
    error = caught.value
    assert (error.field, error.reason) == (field, reason), str(error)
    assert str(error).startswith(f"{field}: ") and f"({reason}); " in str(error)
    assert error.fix and str(error).endswith(error.fix)


def _grpc_with(mutate: Callable[[Any], None], images: Sequence[bytes] | None = (JPEG,),
               text: str | None = "a cat") -> bytes:
    request = service_pb2.ModelInferRequest.FromString(grpc_raw(images, text))
    mutate(request)
    return bytes(request.SerializeToString())


def _set(attribute: str, value: Any, index: int = 0) -> Callable[[Any], None]:
    def mutate(request: Any) -> None:
        setattr(request.inputs[index], attribute, value)
    return mutate


def _typed_extra() -> bytes:
    """Typed contents with 100000 elements under shape [1, 1]."""
    request = service_pb2.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="IMAGES", datatype="BYTES", shape=[1, 1])
    tensor.contents.bytes_contents.extend([JPEG[:64]] * 100_000)
    return bytes(request.SerializeToString())


GRPC_BAD: dict[str, tuple[Callable[[], bytes], str, str]] = {
    "not a protobuf": (lambda: b"\xff\xff\xff\xff", "message", "MalformedProtobuf"),
    "wrong datatype": (lambda: _grpc_with(_set("datatype", "FP32")), "inputs[IMAGES].datatype", "WrongDatatype"),
    "shape/data mismatch": (lambda: _grpc_with(lambda r: r.inputs[0].shape.__setitem__(1, 2)),
                            "inputs[IMAGES].shape", "ShapeMismatch"),
    "raw contents count": (lambda: _grpc_with(lambda r: r.raw_input_contents.pop()), "raw_input_contents",
                           "MalformedRequest"),
    "truncated raw element": (lambda: _grpc_with(lambda r: r.raw_input_contents.__setitem__(
        0, r.raw_input_contents[0][:-5])), "raw_input_contents[0] (IMAGES)", "TruncatedBinaryData"),
    "truncated JPEG header": (lambda: grpc_raw([JPEG[:600]], None), "inputs[IMAGES].contents[0]",
                              "CorruptImageHeader"),
    "truncated JPEG header (typed)": (lambda: grpc_typed([b"x", JPEG[:600]], None), "inputs[IMAGES].contents[0]",
                                      "UnsupportedImageFormat"),
    "shared memory": (lambda: _grpc_with(lambda r: r.inputs[1].parameters["shared_memory_region"].__setattr__(
        "string_param", "r")), "inputs[TEXT].parameters[shared_memory_region]", "SharedMemoryUnsupported"),
    "duplicate input": (lambda: _grpc_with(lambda r: r.inputs[1].__setattr__("name", "IMAGES")), "inputs[IMAGES]",
                        "DuplicateInput"),
    "too many elements": (lambda: _grpc_with(lambda r: r.inputs[0].shape.__setitem__(1, 5000)),
                          "inputs[IMAGES].shape", "TooManyElements"),
    "too many dimensions": (lambda: _grpc_with(lambda r: r.inputs[0].shape.extend([2 ** 62] * 80_000 + [0])),
                            "inputs[IMAGES].shape", "TooManyElements"),
    "more typed elements than the shape": (_typed_extra, "inputs[IMAGES].shape", "ShapeMismatch"),
    "blank text only": (lambda: grpc_typed(None, "   "), "inputs", "EmptyRequest"),
    "typed and raw contents": (lambda: _grpc_with(lambda r: r.inputs[1].contents.bytes_contents.append(b"a cat")),
                               "inputs[TEXT].contents", "MalformedRequest"),
    "typed and raw contents on another input": (lambda: _grpc_with(lambda r: (r.inputs.add(
        name="OTHER", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0),
        r.raw_input_contents.append(b"\0\0\x80?"))), "inputs[OTHER].contents", "MalformedRequest"),
}


@pytest.mark.parametrize("case", sorted(GRPC_BAD))
def test_bad_grpc_request_is_refused_naming_field_reason_and_fix(case: str) -> None:
    build, field, reason = GRPC_BAD[case]
    with pytest.raises(PayloadError) as caught:
        features_from_grpc(build())
    error = caught.value
    assert (error.field, error.reason) == (field, reason), str(error)
    assert str(error).startswith(f"{field}: ") and str(error).endswith(error.fix)


def test_body_exactly_at_the_limit_is_accepted_and_one_byte_more_is_not() -> None:
    body, headers = http_binary([JPEG], None)
    assert features_from_http(body, headers, max_body_bytes=len(body)).image_pixels == (640 * 427,)
    with pytest.raises(PayloadError, match="BodyTooLarge"):
        features_from_http(body, headers, max_body_bytes=len(body) - 1)


@pytest.mark.parametrize("request_name", sorted(REQUESTS))
def test_features_equal_what_the_built_in_runtime_exports_for_the_request(request_name: str) -> None:
    """The runtime's own parse (runtime/model/inputs.py: full decode) gives the same modality and pixels."""
    from modalscale.runtime.model.inputs import parse_request
    from modalscale.runtime.model.settings import ModelSettings

    images, text, _ = REQUESTS[request_name]
    image_array = None if images is None else np.array([images], dtype=np.object_).reshape(1, len(images))
    text_array = None if text is None else np.array([[text.encode()]], dtype=np.object_)
    parsed = parse_request(image_array, text_array, ModelSettings())
    got = features_from_http(*http_binary(images, text))
    assert got.modality == parsed.modality.value
    assert got.image_pixels == tuple(image.pixels for image in parsed.images)
