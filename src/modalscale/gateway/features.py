"""A KServe v2 inference request -> the per-request features the runtime exports (pure; no network, no pixel decode).

Three wire forms, one result (:class:`RequestFeatures`):

* HTTP/REST JSON (KServe v2 / Triton): ``{"inputs": [{"name", "datatype", "shape", "data"}, ...]}``. A BYTES
  element in ``data`` is a JSON string and reaches the model as that string's UTF-8 bytes, which is what Triton does
  and what ``tritonclient.http`` sends with ``binary_data=False``; nothing is base64-decoded, because Triton does not
  decode it either, so the gateway sees exactly the bytes the model will see. An encoded image is not valid UTF-8, so
  a client sends images as binary data (``tritonclient``'s default, and what ``runtime/client.py`` does).
* HTTP/REST binary tensor extension (Triton): header ``Inference-Header-Content-Length: N``; the first N bytes of the
  body are the JSON, then each input with ``parameters.binary_data_size`` has that many raw bytes, in the JSON's input
  order. A BYTES tensor's raw bytes are its elements in row-major order, each a 4-byte little-endian length and the
  bytes (``tritonclient.utils.serialize_byte_tensor``). ``Content-Encoding: gzip`` / ``deflate`` bodies (what
  ``request_compression_algorithm`` sends) are inflated first, to at most ``max_body_bytes``.
* gRPC: a serialized ``inference.ModelInferRequest`` (``tritonclient.grpc.service_pb2``); a BYTES input's elements
  come from ``raw_input_contents[i]`` (same 4-byte framing) or ``contents.bytes_contents``.

Which inputs carry images and text is :class:`InputNames` (``spec.model.inputs``). Each element of the image input
is one encoded image (JPEG, PNG, WebP, GIF or BMP: :mod:`modalscale.gateway.image_headers` reads its size from the
header). The text input's elements are UTF-8 texts; their tokens are summed (the built-in model takes exactly one),
counted by :data:`TEXT_TOKENS_METHOD` (exactly up to 16384 characters per request, extrapolated beyond), and a blank
text counts as no text, as the runtime's ``decode_text`` has it.
Inputs with other names (a user's model's own) are not read, but checked as Triton reads them: a datatype of
:data:`ELEMENT_BYTES`, a shape of at most :data:`MAX_OTHER_DIMS` non-negative int64 integers, and data of that shape: a
binary section (HTTP ``binary_data_size``, a gRPC ``raw_input_contents`` entry) of at least elements x element size
bytes, by arithmetic (a longer one goes on: a TensorRT input of a non-linear format is padded beyond it), or for BYTES a
4-byte framing that walks to its end in exactly that many elements (within :data:`MAX_WALKED_ELEMENTS` per request; past
it the replica checks); a JSON ``data`` of that many elements, any nesting flattened, each of a type Triton takes
(:data:`JSON_ELEMENT_TYPES`), unless the shape holds 0 elements (Triton then never reads ``data``, of any datatype: a
real tritonserver takes FP16 ``[1, 0]`` with ``[]`` and FP32 ``[1, 0]`` with ``[1]``); a gRPC typed ``contents`` field
(:data:`GRPC_CONTENTS`) of that many values. One in shared memory is the replica's to read: its datatype and shape only;
over gRPC it takes no ``raw_input_contents`` entry (Triton reads the entries in order for the inputs not in shared
memory, and tritonclient sends none for one in shared memory). A well-formed request with neither named input (a user's
model with other inputs) is forwarded and counted as demand: :data:`FEATURELESS`, the ``text`` class with 0 images and 0
tokens.

What is refused with :class:`PayloadError` (HTTP 400 / gRPC INVALID_ARGUMENT; the field and the fix in its message): a
body over ``max_body_bytes`` (raw or inflated), an unknown content encoding, a bad ``Inference-Header-Content-Length``,
malformed JSON or protobuf, a request that is not a v2 infer request, an image or text input that is not BYTES, a shape
whose element count differs from the data, a JSON element that is not a string, an input with both ``data`` and
``binary_data_size``, a binary section shorter or longer than the ``binary_data_size`` values say; of any other input:
an unknown datatype (``UnknownDatatype``), a shape that is not a list of non-negative int64 integers or has more than
:data:`MAX_OTHER_DIMS` of them (``TooManyElements``), binary data or a JSON ``data`` or gRPC ``contents`` that does not
hold the shape's elements (``ShapeMismatch``), broken BYTES framing (``TruncatedBinaryData``), a JSON element of a type
the datatype cannot take (``WrongElementType``), FP16 or BF16 data in JSON for a shape of elements
(``UnsupportedJsonData``), no data
(``MissingData``); and more than :data:`MAX_ELEMENTS` images or texts, an image or text input in shared memory (the
gateway cannot read a replica's shared memory), a request with no image and only blank text (the named inputs present,
nothing in them), an empty image, an image whose header is truncated, of another format or too long to walk
(:data:`modalscale.gateway.image_headers.MAX_STEPS`), and text that is not UTF-8. Every structural fault in that list is
one Triton refuses too (checked against a real tritonserver by
``tests/integration/runtime/test_runtime_gateway_wire.py``), except a truncated gzip stream, of which Triton serves what
it could inflate. Triton takes a JSON ``NaN`` (which is no JSON; checked there), and so does the gateway. Every content
fault is one the built-in model refuses, except an image in a format other than these five (TIFF, ICO, PPM, ...), which
the built-in model's Pillow reads and the gateway refuses (``UnsupportedImageFormat``). The limits are the gateway's
own.
What the replica still checks itself (per-model limits and the model's configuration, which the gateway does not know):
image pixels, images per request and text length limits, and the pixels of an image whose header is whole; whether the
other inputs are the model's, of its datatypes and dimensions; a JSON integer out of its datatype's range (a negative
UINT8, an INT64 above 2**63 - 1); FP16 / BF16 data in a gRPC input without ``raw_input_contents``; a binary section
longer than its shape's elements (Triton refuses it unless the input is a TensorRT model's of a non-linear format); and
the BYTES framing past :data:`MAX_WALKED_ELEMENTS`.

Cost, measured on the shared 2-core EPYC (300 calls each, tritonclient-built requests): one 1600x1200 JPEG (192 KB)
and 32 tokens 299 us over HTTP binary, 382 us over gRPC; four 640x480 JPEGs 550 / 609 us; a 128-token text 70 / 40
us. The image digest dominates: BLAKE2b-128 of the 192 KB image alone took 338 us (SHA-256, which this CPU runs in
hardware, 195 us). Checking the other inputs (same "AMD EPYC" machine, shared with a CI run, so rough; best of 5 to
9): a JSON FP32 tensor's count and types 1.8 ms for 100,000 elements and 19 to 22 ms for 1,000,000 (flat or [1000,
1000]), about 5% of the 34 / 350 ms ``json.loads`` takes on them ([100000, 1], a list per element, 9 ms against 41
ms); a binary FP32 tensor of 1,000,000 elements nothing measurable (15 us per request either way: arithmetic); a
binary BYTES tensor of 16,384 elements 2.2 ms (its framing walk, 0.14 us an element); the trial's JSON FP32[4]
request 5 -> 7 us.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Final

from modalscale.gateway import wordpiece
from modalscale.gateway.image_headers import FORMATS, ImageHeaderError, Steps, image_size

DEFAULT_MAX_BODY_BYTES: Final = 64 * 1024 * 1024
"""Default body-size limit of :func:`features_from_http`, bytes (64 MiB): 16 images of 4 MB with room to spare."""

TEXT_TOKENS_METHOD: Final = wordpiece.METHOD
"""How ``text_tokens`` is counted (``minilm-wordpiece``: MiniLM / bert-base-uncased WordPiece tokens without special
tokens, before truncation, the same count as the built-in runtime's ``modalscale_request_text_tokens``; exact for the
first 16384 characters of a request, extrapolated beyond, see :func:`modalscale.gateway.wordpiece.count_texts`). For
a model with another tokenizer it is an estimate of text length in a known unit; status names it with this
constant."""

MAX_ELEMENTS: Final = 4096
"""Most elements the gateway reads from the image or the text input of one request (the built-in model takes at most
16 images and one text). Larger is refused (``TooManyElements``) before any element is read: every element costs
Python loop turns (measured, shared 2-core EPYC: 0.7 us to split a binary element, 0.25 us to take a JSON one, 3 us
to decode and count a one-word text), and a 64 MiB body holds 16 million empty BYTES elements."""

MAX_IMAGE_PIXELS: Final = 2 * 89_478_485
"""Most pixels (width x height, as the header says) an image may have: Pillow's ``DecompressionBombError`` limit
(twice ``Image.MAX_IMAGE_PIXELS``), above which the Python imaging stack opens no image by default (the built-in
runtime refuses above 40,000,000). Larger is refused (``ImageTooLarge``) before it reaches the demand series: a PNG
header claiming 4294967295 x 4294967295 put 1.8e19 pixels into the autoscaler's pixel histogram (an adversarial
probe, 6 Dec 2026)."""

MAX_DIMS: Final = 32
"""Most dimensions a shape may have. The element count is the product of the dimensions, and a shape of 320,000
huge ones ending in 0 holds 0 elements: multiplying them took 219 s of the event loop (an adversarial probe, 6 Dec
2026). With at most this many dimensions, each at most :data:`MAX_ELEMENTS`, the product costs microseconds; real
tensors have a few."""

DIGEST_BYTES: Final = 16
"""Size of an image digest: BLAKE2b with ``digest_size=16`` (RFC 7693) of the encoded bytes."""

HEADER_CONTENT_LENGTH: Final = "inference-header-content-length"
"""Triton's binary tensor extension header: the length of the JSON part of the body, bytes."""

ELEMENT_BYTES: Final[Mapping[str, int | None]] = {
    "BOOL": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8, "INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8,
    "FP16": 2, "FP32": 4, "FP64": 8, "BF16": 2, "BYTES": None,
}
"""KServe v2's (Triton's) tensor datatypes -> bytes per element in binary data (None: BYTES, each element a 4-byte
little-endian length and its bytes). Any other ``datatype`` is refused (``UnknownDatatype``), as Triton refuses it."""

JSON_ELEMENT_TYPES: Final[Mapping[str, frozenset[type]]] = {
    "BOOL": frozenset({bool}), **dict.fromkeys(("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                                                "INT64"), frozenset({int})),
    "FP32": frozenset({int, float}), "FP64": frozenset({int, float}), "BYTES": frozenset({str}),
}
"""Datatype -> the Python types (as ``json.loads`` gives them) of the elements Triton takes in a JSON ``data``: a
JSON bool for BOOL, an integer for the integer types, a number for FP32 / FP64, a string for BYTES. FP16 and BF16
are absent: Triton takes them only as binary data."""

GRPC_CONTENTS: Final[Mapping[str, str]] = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}
"""Datatype -> the ``InferTensorContents`` field Triton reads a gRPC input's typed elements from (FP16 and BF16 have
none)."""

MAX_OTHER_DIMS: Final = 64
"""Most dimensions a shape of an input the gateway does not read may have (``TooManyElements`` above): numpy's
limit (``NPY_MAXDIMS`` since numpy 2.0), more than any backend's, so a shape over it is one no model's configuration
takes and Triton refuses. Counted before a dimension is looked at: a 64 MiB gRPC message packs 64 million
dimensions, which a Python loop would take seconds over."""

MAX_WALKED_ELEMENTS: Final = 4 * MAX_ELEMENTS
"""Most BYTES elements of the inputs the gateway does not read whose 4-byte framing it walks, per request (0.14 to
0.22 us each, measured on the shared 2-core EPYC: 2.2 ms for 16,384). A BYTES input past what is left of it is
forwarded with its framing unchecked (the replica checks it); its other checks still apply, its byte count among
them (at least 4 bytes an element)."""

Chunk = bytes | memoryview


@dataclass(frozen=True)
class InputNames:
    """Which inputs of the model carry images and text (``spec.model.inputs``); defaults = the built-in model."""

    images: str = "IMAGES"
    text: str = "TEXT"


@dataclass(frozen=True)
class RequestFeatures:
    """Features of one request, as the built-in runtime exports them (``modalscale.runtime.model.metrics``)."""

    modality: str
    """``image``, ``text`` or ``image_text`` (:data:`modalscale.runtime.model.metrics.MODALITIES`)."""
    image_pixels: tuple[int, ...]
    """``width * height`` per image in request order, pixels, from the encoded headers only."""
    text_tokens: int | None
    """Tokens of the text (:data:`TEXT_TOKENS_METHOD`); None = no text (absent or blank) beside images; 0 = neither
    input (:data:`FEATURELESS`)."""
    image_digests: tuple[bytes, ...]
    """BLAKE2b-128 (``hashlib.blake2b(digest_size=16)``) of each image's encoded bytes, the cache-affinity key."""


FEATURELESS: Final = RequestFeatures(modality="text", image_pixels=(), text_tokens=0, image_digests=())
"""The features of a well-formed request that carries neither the image nor the text input (a user's model with
other inputs, e.g. one ``INPUT0`` FP32[4], and no ``spec.model.inputs`` naming them): forwarded like any other, and
counted as demand in the ``text`` class with 0 images and 0 tokens. The runtime's classes are ``image``, ``text``
and ``image_text`` (:data:`modalscale.runtime.model.metrics.MODALITIES`) and it has none for a request without
either; ``text`` is its class of requests without images, and the autoscaler's own classification of 0 images and 0
tokens (:func:`modalscale.autoscaler.features.modality_of`). The 0 tokens are observed (``text_tokens`` is 0, not
None), so a text-class request still observes the image count and the token count once each, as the runtime's do.
The autoscaler reads them as a text class of 0 images and 0 tokens at the counted rate, timed by Triton's observed
service time (0 tokens is a missing feature only for ``image_text``: ``autoscaler/metrics_parse.py``); such a model
has no service-time model (``modalscale profile`` sends IMAGES / TEXT requests), so Predictive falls back to the
Utilization rule on Triton's busy time, and the counted rate is what scale to zero and the observed-queue rule read.
The built-in model never counts a 0-token text request (it refuses blank text), so ``text_tokens == 0`` marks
exactly these requests. Never an uncounted request: a service under load that counted nothing would read idle and
could be scaled to zero."""


class PayloadError(ValueError):
    """The request cannot be served as sent; the gateway answers HTTP 400 / gRPC INVALID_ARGUMENT with ``str(e)``,
    which is ``"<field>: <problem> (<reason>); <fix>"``.

    Attributes:
        field: Where the fault is, e.g. ``body``, ``inputs[IMAGES].data[0]``,
            ``header Inference-Header-Content-Length``.
        reason: CamelCase, e.g. ``BodyTooLarge``, ``MalformedJson``, ``WrongDatatype``, ``MissingInput``,
            ``CorruptImageHeader`` (a label for an error counter).
        fix: What the client should change.
    """

    def __init__(self, field: str, reason: str, problem: str, fix: str) -> None:
        super().__init__(f"{field}: {problem} ({reason}); {fix}")
        self.field = field
        self.reason = reason
        self.fix = fix


# ---- shared: elements of the named inputs -> features


def _digest(data: Chunk) -> bytes:
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


def _features(images: Sequence[Chunk] | None, texts: Sequence[Chunk] | None, names: InputNames,
              element: str) -> RequestFeatures:
    """Features from the elements of the image and text inputs (None = input absent; both absent:
    :data:`FEATURELESS`); ``element`` is the field suffix of one element, ``data`` (HTTP) or ``contents`` (gRPC)."""
    if images is None and texts is None:  # a model whose inputs are neither: demand all the same
        return FEATURELESS
    decoded = []
    for i, raw in enumerate(texts or ()):
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PayloadError(f"inputs[{names.text}].{element}[{i}]", "InvalidUtf8",
                               f"text is not valid UTF-8 ({exc.reason} at byte {exc.start})",
                               "encode the text as UTF-8") from None
        if text.strip():
            decoded.append(text)
    tokens = wordpiece.count_texts(decoded) if decoded else None
    if not images and tokens is None:
        raise PayloadError("inputs", "EmptyRequest", f"{names.images!r} has no image and {names.text!r} is absent "
                                                     "or blank", "send at least one image or a non-blank text")
    pixels, digests = [], []
    steps = Steps()  # one budget for the request's header walks
    for i, data in enumerate(images or ()):
        field = f"inputs[{names.images}].{element}[{i}]"
        if not len(data):
            raise PayloadError(field, "EmptyImage", "image is empty (0 bytes)", "send the encoded image file")
        try:
            _, width, height = image_size(data, steps)
        except ImageHeaderError as exc:
            raise PayloadError(field, exc.reason, str(exc), f"send a whole {', '.join(FORMATS)} file, "
                                                            "unchanged (no base64, no truncation)") from None
        if width * height > MAX_IMAGE_PIXELS:
            raise PayloadError(field, "ImageTooLarge", f"{width}x{height} = {width * height} pixels, more than "
                                                       f"{MAX_IMAGE_PIXELS}", "send a smaller image")
        pixels.append(width * height)
        digests.append(_digest(data))
    modality = "image_text" if pixels and tokens is not None else "image" if pixels else "text"
    return RequestFeatures(modality=modality, image_pixels=tuple(pixels), text_tokens=tokens,
                           image_digests=tuple(digests))


def _shape_dims(shape: Any, field: str, max_dims: int, whose: str, max_dim: int | None = None) -> list[int]:
    """A shape as a list of at most ``max_dims`` non-negative integers (``max_dim`` and below when given), else
    :class:`PayloadError` naming ``field`` (``whose``: who takes at most ``max_dims`` dimensions, for the message)."""
    if not isinstance(shape, Sequence) or isinstance(shape, (str, bytes)):
        raise PayloadError(field, "MalformedRequest", f"shape must be a list of non-negative integers, got "
                                                      f"{_short(shape)}", "send the tensor's shape, e.g. [1, 2]")
    if len(shape) > max_dims:
        raise PayloadError(field, "TooManyElements", f"shape has {len(shape)} dimensions, more than {whose} "
                                                     f"({max_dims})", "send the tensor's shape, e.g. [1, 2]")
    if not all(type(d) is int and d >= 0 and (max_dim is None or d <= max_dim) for d in shape):
        raise PayloadError(field, "MalformedRequest", f"shape must be a list of non-negative integers, got "
                                                      f"{_short(shape)}", "send the tensor's shape, e.g. [1, 2]")
    return list(shape)


def _shape_elements(shape: Any, field: str) -> int:
    """Element count of a shape, at most :data:`MAX_ELEMENTS`; at most :data:`MAX_DIMS` dimensions, each at most
    :data:`MAX_ELEMENTS` (checked before anything is multiplied)."""
    dims = _shape_dims(shape, field, MAX_DIMS, "the gateway reads")
    if any(d > MAX_ELEMENTS for d in dims):
        raise PayloadError(field, "TooManyElements", f"shape {_short(dims)} has a dimension above the "
                                                     f"{MAX_ELEMENTS} elements the gateway reads",
                           f"send at most {MAX_ELEMENTS} images or texts per request")
    count = math.prod(dims)
    if count > MAX_ELEMENTS:
        raise PayloadError(field, "TooManyElements", f"shape {dims} holds {count} elements, more than the "
                                                     f"gateway reads ({MAX_ELEMENTS})",
                           f"send at most {MAX_ELEMENTS} images or texts per request")
    return count


def _check_count(count: int, expected: int, field: str, shape: Any) -> None:
    if count != expected:
        raise PayloadError(field, "ShapeMismatch", f"shape {list(shape)} holds {expected} elements but the data "
                                                   f"has {count}", "make the shape match the data")


def _check_datatype(datatype: Any, name: str) -> None:
    if datatype != "BYTES":
        raise PayloadError(f"inputs[{name}].datatype", "WrongDatatype", f"is {_short(datatype)}, must be BYTES",
                           "send encoded images and UTF-8 text as BYTES tensors")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _split_bytes(raw: Chunk, field: str, limit: int) -> list[memoryview]:
    """A serialized BYTES tensor (each element a 4-byte little-endian length, then its bytes) -> its elements
    (views into ``raw``, not copies); stops after ``limit + 1`` elements (the count is then wrong anyway)."""
    view = memoryview(raw)
    out: list[memoryview] = []
    pos, end = 0, len(view)
    while pos < end and len(out) <= limit:
        if pos + 4 > end:
            raise PayloadError(field, "TruncatedBinaryData", f"ends inside the length of element {len(out)}",
                               "send each BYTES element as a 4-byte little-endian length and the bytes")
        (length,) = struct.unpack_from("<I", view, pos)
        pos += 4
        if pos + length > end:
            raise PayloadError(field, "TruncatedBinaryData", f"element {len(out)} declares {length} bytes, "
                                                             f"{end - pos} remain",
                               "send each BYTES element as a 4-byte little-endian length and the bytes")
        out.append(view[pos:pos + length])
        pos += length
    return out


def _refuse_shared_memory(name: str, field: str) -> PayloadError:
    return PayloadError(field, "SharedMemoryUnsupported", f"input {name!r} is in shared memory, which the gateway "
                                                          "(another pod) cannot read",
                        "send the data in the request (binary data or JSON)")


# ---- the inputs the gateway does not read: checked as Triton reads them, by arithmetic where it can


_MAX_INT64: Final = 2 ** 63 - 1
_LENGTH: Final = struct.Struct("<I")
_JSON_KIND: Final = {"BOOL": "booleans", "FP32": "numbers", "FP64": "numbers", "BYTES": "strings"}


@dataclass
class _WalkBudget:
    """BYTES elements the gateway may still walk in one request's other inputs (:data:`MAX_WALKED_ELEMENTS`)."""

    left: int = MAX_WALKED_ELEMENTS


def _other_head(name: str, datatype: Any, shape: Any) -> tuple[int | None, list[int]]:
    """An input's datatype and shape as Triton takes them: a known datatype (-> bytes per element, None for BYTES)
    and a list of at most :data:`MAX_OTHER_DIMS` integers from 0 to 2**63 - 1 (Triton reads each as an int64)."""
    if not isinstance(datatype, str) or datatype not in ELEMENT_BYTES:
        raise PayloadError(f"inputs[{name}].datatype", "UnknownDatatype", f"is {_short(datatype)}, not a KServe v2 "
                                                                          "datatype",
                           f"send one of {', '.join(ELEMENT_BYTES)}")
    return ELEMENT_BYTES[datatype], _shape_dims(shape, f"inputs[{name}].shape", MAX_OTHER_DIMS, "any model takes",
                                                _MAX_INT64)


def _tensor_elements(dims: Sequence[int], cap: int) -> int:
    """Element count of ``dims``, or ``cap + 1`` when it is above ``cap`` (multiplied with an early stop, so that no
    product grows past ``cap`` times a dimension)."""
    if 0 in dims:
        return 0
    count = 1
    for d in dims:
        count *= d
        if count > cap:
            return cap + 1
    return count


def _mismatch(name: str, dims: Sequence[int], count: int, cap: int, data: str) -> PayloadError:
    """``ShapeMismatch`` of an input the gateway does not read; ``count`` is :func:`_tensor_elements`'."""
    holds = str(count) if count <= cap else f"more than {cap}"
    return PayloadError(f"inputs[{name}].shape", "ShapeMismatch", f"shape {_short(list(dims))} holds {holds} "
                                                                  f"elements but {data}",
                        "make the shape match the data")


def _count_bytes(raw: Chunk, field: str, limit: int) -> int:
    """Elements of a serialized BYTES tensor, walked as :func:`_split_bytes` walks it but without taking them (0.22
    against 0.51 us an element, measured): the count, up to ``limit + 1``."""
    unpack = _LENGTH.unpack_from
    count, pos, end = 0, 0, len(raw)
    while pos < end and count <= limit:
        if pos + 4 > end:
            raise PayloadError(field, "TruncatedBinaryData", f"ends inside the length of element {count}",
                               "send each BYTES element as a 4-byte little-endian length and the bytes")
        (length,) = unpack(raw, pos)
        pos += 4
        if pos + length > end:
            raise PayloadError(field, "TruncatedBinaryData", f"element {count} declares {length} bytes, "
                                                             f"{end - pos} remain",
                               "send each BYTES element as a 4-byte little-endian length and the bytes")
        pos += length
        count += 1
    return count


def _check_other_binary(name: str, element_bytes: int | None, dims: Sequence[int], cap: int, raw: Chunk,
                        what: str, budget: _WalkBudget) -> None:
    """Binary data (``what`` names it) of an input the gateway does not read holds the shape's elements: a fixed-size
    datatype's byte count by arithmetic, at least elements x element size (a longer section is forwarded: a TensorRT
    model's input of a non-linear format (``is_non_linear_format_io``, e.g. CHW32) is padded beyond that, which
    Triton's core does not check and the backend takes, while for any other input Triton refuses it; the gateway does
    not know the model's configuration); a BYTES tensor's framing walked to its end, within ``budget`` (every
    element takes at least its 4-byte length, so a section too short is refused by arithmetic first)."""
    count = _tensor_elements(dims, cap)
    if element_bytes is not None:
        if count * element_bytes > len(raw):
            raise _mismatch(name, dims, count, cap, f"{what} is {len(raw)} bytes, less than {element_bytes} per "
                                                    "element")
        return
    if 4 * count > len(raw):
        raise _mismatch(name, dims, count, cap, f"{what} is {len(raw)} bytes, less than 4 per BYTES element")
    if count > budget.left:  # the replica checks it
        return
    budget.left -= count
    found = _count_bytes(raw, what, count)
    if found != count:
        raise _mismatch(name, dims, count, cap, f"{what} holds {'more than ' if found > count else ''}"
                                                f"{min(found, count)} BYTES elements")


def _json_count(data: list[Any], datatype: str, field: str) -> int:
    """Elements of a JSON ``data`` as Triton reads it (any nesting flattened), each of a type Triton takes for
    ``datatype`` (:data:`JSON_ELEMENT_TYPES`). Read a nesting level at a time, in C (``chain``, ``map(type)``,
    ``set``); a Python loop runs only over a level that mixes lists and elements. Measured (shared 2-core EPYC):
    about 5% of ``json.loads``' time on the same data, flat or [1000, 1000]."""
    allowed = JSON_ELEMENT_TYPES[datatype]
    count, level = 0, [data]
    while level:
        kinds = set(map(type, chain.from_iterable(level)))
        total = sum(map(len, level))
        if list in kinds:
            if kinds == {list}:
                nested = list(chain.from_iterable(level))
            else:
                nested = [item for item in chain.from_iterable(level) if type(item) is list]
            kinds.discard(list)
            count += total - len(nested)
            level = nested
        else:
            count += total
            level = []
        if not kinds <= allowed:
            wrong = ", ".join(sorted(kind.__name__ for kind in kinds - allowed))
            raise PayloadError(field, "WrongElementType", f"holds {wrong} elements, which a {datatype} tensor "
                                                          "cannot take",
                               f"send {datatype} elements as JSON {_JSON_KIND.get(datatype, 'integers')}")
    return count


# ---- HTTP/REST


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: an object naming a key twice is refused (``ValueError``). Python keeps the last
    value and a JSON reader may keep the first, so features could be read from a value the replica never sees (an
    adversarial probe, 6 Dec 2026: a second ``"inputs"`` of one token hid the first one's six)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key!r} appears twice in one object")
            seen.add(key)
    return out


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup (``name`` in lower case); works on a plain dict and on a CIMultiDict."""
    value = headers.get(name)
    if value is not None:
        return value
    for key, found in headers.items():
        if key.lower() == name:
            return found
    return None


def _inflate(body: bytes, encoding: str | None, max_body_bytes: int) -> bytes:
    coding = (encoding or "identity").strip().lower()
    if coding == "identity":
        return body
    if coding not in ("gzip", "deflate"):
        raise PayloadError("header Content-Encoding", "UnsupportedContentEncoding", f"is {_short(encoding)}",
                           "send the body uncompressed or with gzip or deflate")
    inflater = zlib.decompressobj(wbits=31 if coding == "gzip" else 15)
    try:
        out = inflater.decompress(body, max_body_bytes + 1)
    except zlib.error as exc:
        raise PayloadError("body", "CorruptBody", f"cannot inflate the {coding} body ({exc})",
                           f"compress the whole body with {coding}, or send it uncompressed") from None
    if len(out) > max_body_bytes:
        raise PayloadError("body", "BodyTooLarge", f"inflates to more than {max_body_bytes} bytes",
                           "send fewer or smaller images per request")
    if not inflater.eof:
        raise PayloadError("body", "CorruptBody", f"the {coding} stream is truncated",
                           f"compress the whole body with {coding}, or send it uncompressed")
    if inflater.unused_data:  # a second gzip member, or junk: what the replica reads of it is not what was read here
        raise PayloadError("body", "CorruptBody", f"{len(inflater.unused_data)} bytes follow the end of the {coding} "
                                                  f"stream", f"compress the whole body once with {coding}")
    return out


def features_from_http(body: bytes, headers: Mapping[str, str], inputs: InputNames = InputNames(),
                       max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> RequestFeatures:
    """Features of a KServe v2 HTTP/REST infer request body (JSON, or Triton's binary tensor extension).

    Args:
        body: The request body as received (possibly compressed; see the module docstring).
        headers: Request headers; looked up case-insensitively (``Inference-Header-Content-Length``,
            ``Content-Encoding``).
        inputs: The image and text input names.
        max_body_bytes: Largest body accepted, bytes, before and after inflating.
    Returns:
        The request's features.
    Raises:
        PayloadError: See the module docstring for the list; ``field`` and ``reason`` say which.
    """
    if len(body) > max_body_bytes:
        raise PayloadError("body", "BodyTooLarge", f"{len(body)} bytes exceed the gateway's limit of "
                                                   f"{max_body_bytes} bytes", "send fewer or smaller images per "
                                                                              "request")
    body = _inflate(body, _header(headers, "content-encoding"), max_body_bytes)
    declared = _header(headers, HEADER_CONTENT_LENGTH)
    if declared is None:
        json_part, binary = body, memoryview(b"")
    else:
        field = "header Inference-Header-Content-Length"
        digits = declared.strip().removeprefix("+")  # Triton's strtoul takes a "+"; int() also takes "1_07" and
        json_length = int(digits) if digits.isascii() and digits.isdigit() else -1  # fullwidth digits: Triton not
        if json_length < 0 or json_length > len(body):
            raise PayloadError(field, "BadHeaderLength", f"is {_short(declared)}, not a length from 0 to the body's "
                                                         f"{len(body)} bytes",
                               "set it to the byte length of the JSON part that starts the body")
        json_part, binary = body[:json_length], memoryview(body)[json_length:]
    try:  # UTF-8 as Triton reads it (json.loads of bytes would also take UTF-16 and UTF-32), each key once
        request = json.loads(bytes(json_part).decode("utf-8"), object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        where = "the JSON part of the body" if declared is not None else "the body"
        raise PayloadError("body", "MalformedJson", f"{where} is not valid JSON ({_short(str(exc), 120)})",
                           "send a KServe v2 inference request as UTF-8 JSON") from None
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list):
        raise PayloadError("inputs", "MalformedRequest", "the request has no \"inputs\" list",
                           'send {"inputs": [{"name": ..., "datatype": ..., "shape": [...], "data": [...]}]}')
    images: list[Chunk] | None = None
    texts: list[Chunk] | None = None
    seen: set[str] = set()
    offset = 0
    budget = _WalkBudget()
    for position, tensor in enumerate(request["inputs"]):
        if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str):
            raise PayloadError(f"inputs[{position}]", "MalformedRequest", "is not an object with a string \"name\"",
                               "give every input a name, datatype, shape and data")
        name: str = tensor["name"]
        if name in seen:
            raise PayloadError(f"inputs[{name}]", "DuplicateInput", "appears twice", "send each input once")
        seen.add(name)
        parameters = tensor.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise PayloadError(f"inputs[{name}].parameters", "MalformedRequest", "is not an object",
                               "send parameters as a JSON object")
        size = parameters.get("binary_data_size")
        chunk: memoryview | None = None
        if size is not None:
            field = f"inputs[{name}].parameters.binary_data_size"
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise PayloadError(field, "MalformedRequest", f"is {_short(size)}, not a byte count",
                                   "set it to the byte length of this input's binary data")
            if offset + size > len(binary):
                missing = "there is no binary section (no Inference-Header-Content-Length header)" \
                    if declared is None else f"only {len(binary) - offset} bytes of binary data remain"
                raise PayloadError(field, "TruncatedBinaryData", f"is {size} but {missing}",
                                   "send the whole binary data of every input, in the order of \"inputs\", and the "
                                   "JSON length in Inference-Header-Content-Length")
            chunk = binary[offset:offset + size]
            offset += size
        if chunk is not None and "data" in tensor:  # Triton: "Input must set only one of the following fields"
            raise PayloadError(f"inputs[{name}].data", "MalformedRequest", "is set beside "
                                                                           "parameters.binary_data_size",
                               "send the input's elements either in data or as binary data, not both")
        if name not in (inputs.images, inputs.text):
            _check_other_http_input(tensor, name, parameters, chunk, len(body), budget)
            continue
        if "shared_memory_region" in parameters:
            raise _refuse_shared_memory(name, f"inputs[{name}].parameters.shared_memory_region")
        _check_datatype(tensor.get("datatype"), name)
        expected = _shape_elements(tensor.get("shape"), f"inputs[{name}].shape")
        if chunk is not None:
            elements: list[Chunk] = list(_split_bytes(chunk, f"inputs[{name}] binary data", expected))
        else:
            elements = _json_elements(tensor, name, expected, tensor["shape"])
        _check_count(len(elements), expected, f"inputs[{name}].shape", tensor["shape"])
        if name == inputs.images:
            images = elements
        else:
            texts = elements
    if offset != len(binary):
        raise PayloadError("body", "TrailingBinaryData", f"{len(binary) - offset} bytes follow the last input's "
                                                         "binary data",
                           "set each binary_data_size to its input's byte length and send nothing after them")
    return _features(images, texts, inputs, "data")


def _check_other_http_input(tensor: Mapping[str, Any], name: str, parameters: Mapping[str, Any],
                            chunk: memoryview | None, cap: int, budget: _WalkBudget) -> None:
    """An input the gateway does not read is one Triton would read: a known datatype, a shape of non-negative
    integers, and data of that shape (binary: :func:`_check_other_binary`; JSON: its element count and types). In
    shared memory: datatype and shape only. ``cap``: the body's length, above which no element count can be the
    data's."""
    element_bytes, dims = _other_head(name, tensor.get("datatype"), tensor.get("shape"))
    if "shared_memory_region" in parameters:  # the replica's to read, not the gateway's
        return
    if chunk is not None:
        _check_other_binary(name, element_bytes, dims, cap, chunk, f"inputs[{name}] binary data", budget)
        return
    field = f"inputs[{name}].data"
    if "data" not in tensor:
        raise PayloadError(field, "MissingData", "input has neither data nor binary_data_size",
                           "send the elements in \"data\" or as binary data")
    if 0 in dims:  # Triton appends no data for a tensor of 0 elements and never reads its "data" (any datatype)
        return
    data, datatype = tensor["data"], tensor["datatype"]
    if not isinstance(data, list):
        raise PayloadError(field, "MalformedRequest", f"must be a JSON array, got {type(data).__name__} "
                                                      f"{_short(data)}", 'send the elements in a list, e.g. [1, 2]')
    if datatype not in JSON_ELEMENT_TYPES:
        raise PayloadError(field, "UnsupportedJsonData", f"{datatype} elements cannot be sent as JSON",
                           f"send the {datatype} input as binary data (the binary tensor extension)")
    count, found = _tensor_elements(dims, cap), _json_count(data, datatype, field)
    if found != count:
        raise _mismatch(name, dims, count, cap, f"the data has {found}")


def _json_elements(tensor: Mapping[str, Any], name: str, limit: int, shape: Sequence[int]) -> list[Chunk]:
    """The BYTES elements of a JSON ``data`` (a list, nested row-major or flat): each a string, as its UTF-8; stops
    after ``limit + 1`` elements."""
    if "data" not in tensor:
        raise PayloadError(f"inputs[{name}].data", "MissingData", "input has neither data nor binary_data_size",
                           "send the elements in \"data\" or as binary data")
    if not isinstance(tensor["data"], list):  # Triton: "expected 'data' to be an array"
        raise PayloadError(f"inputs[{name}].data", "MalformedRequest",
                           f"must be a JSON array, got {type(tensor['data']).__name__} {_short(tensor['data'])}",
                           'send the elements in a list, e.g. "data": ["a photo of a cat"]')
    out: list[Chunk] = []
    stack = [tensor["data"]]
    # Triton flattens any nesting (empty lists included); the gateway reads at most the lists a row-major array of
    # the shape has (counted up to 4 * MAX_ELEMENTS) plus 4 * MAX_ELEMENTS, so that a body of nested empty lists
    # cannot keep it looping.
    row_lists = 1 + sum(math.prod(shape[:i]) for i in range(1, len(shape)))
    lists, max_lists = 0, min(row_lists, 4 * MAX_ELEMENTS) + 4 * MAX_ELEMENTS
    while stack and len(out) <= limit:
        item = stack.pop()
        if isinstance(item, list):
            lists += 1
            if lists > max_lists:
                raise PayloadError(f"inputs[{name}].data", "TooManyElements", f"nests more than {max_lists} lists",
                                   "send the data flat, or nested as the shape")
            stack.extend(reversed(item))
        elif isinstance(item, str):
            out.append(item.encode("utf-8", "surrogatepass"))
        else:
            raise PayloadError(f"inputs[{name}].data[{len(out)}]", "WrongElementType",
                               f"a BYTES element must be a JSON string, got {type(item).__name__}",
                               "send text as a JSON string, and images as binary data (the binary tensor extension)")
    return out


# ---- gRPC


def preload(grpc: bool = True) -> None:
    """Load now what reading a request needs and would otherwise load on the first request: the
    ``inference.ModelInferRequest`` message class (``tritonclient.grpc``, imported lazily so that importing this
    module stays light; only with ``grpc``, when the gateway serves gRPC) and the WordPiece vocabulary. About 135 ms
    and 16 ms of CPU on the 2-vCPU development machine, measured with ``time.process_time`` in a fresh interpreter,
    added to the first request's latency; on a busy node, where a gateway pod's share of the CPU is its 100m
    request, over a second. :meth:`modalscale.gateway.server.Gateway.start` calls it."""
    if grpc:
        from tritonclient.grpc import service_pb2  # noqa: F401
    wordpiece.vocabulary()


def features_from_grpc(message: bytes, inputs: InputNames = InputNames()) -> RequestFeatures:
    """Features of a serialized ``inference.ModelInferRequest`` (the KServe v2 gRPC protocol).

    Args:
        message: The request message's bytes as received (no gRPC framing).
        inputs: The image and text input names.
    Returns:
        The request's features.
    Raises:
        PayloadError: See the module docstring; ``field`` names the input or ``message``.
    """
    from google.protobuf.message import DecodeError
    from tritonclient.grpc import service_pb2

    try:
        request = service_pb2.ModelInferRequest.FromString(message)
    except DecodeError as exc:
        raise PayloadError("message", "MalformedProtobuf", f"is not an inference.ModelInferRequest ({exc})",
                           "send a serialized ModelInferRequest (KServe v2 gRPC)") from None
    raw = request.raw_input_contents
    images: list[Chunk] | None = None
    texts: list[Chunk] | None = None
    seen: set[str] = set()
    budget = _WalkBudget()
    entry = 0  # Triton takes raw_input_contents in order for the inputs not in shared memory (tritonclient sends
    # no entry for one in shared memory): the entry of the next such input
    for tensor in request.inputs:
        name = str(tensor.name)
        position, shared = entry, "shared_memory_region" in tensor.parameters
        if raw and not shared:
            if entry == len(raw):  # Triton: "unable to find data for input tensor"
                raise _raw_count(len(raw), request.inputs)
            entry += 1
        if raw and tensor.HasField("contents"):  # Triton refuses the request whichever input it is
            raise PayloadError(f"inputs[{name}].contents", "MalformedRequest",
                               "is set while the request also carries raw_input_contents",
                               "send every input's elements either in raw_input_contents or in contents, not both")
        if name in seen:
            raise PayloadError(f"inputs[{name}]", "DuplicateInput", "appears twice", "send each input once")
        seen.add(name)
        if name not in (inputs.images, inputs.text):
            _check_other_grpc_input(tensor, (position, raw[position]) if raw and not shared else None,
                                    len(message), budget)
            continue
        if shared:
            raise _refuse_shared_memory(name, f"inputs[{name}].parameters[shared_memory_region]")
        _check_datatype(str(tensor.datatype), name)
        expected = _shape_elements([int(d) for d in tensor.shape], f"inputs[{name}].shape")
        if raw:
            elements: list[Chunk] = list(_split_bytes(raw[position], f"raw_input_contents[{position}] ({name})",
                                                      expected))
        else:
            contents = tensor.contents.bytes_contents
            elements = list(contents) if len(contents) <= expected else list(contents[:expected + 1])
        _check_count(len(elements), expected, f"inputs[{name}].shape", list(tensor.shape))
        if name == inputs.images:
            images = elements
        else:
            texts = elements
    if raw and entry != len(raw):
        raise _raw_count(len(raw), request.inputs)
    return _features(images, texts, inputs, "contents")


def _raw_count(entries: int, tensors: Sequence[Any]) -> PayloadError:
    unshared = sum("shared_memory_region" not in tensor.parameters for tensor in tensors)
    return PayloadError("raw_input_contents", "MalformedRequest", f"has {entries} entries for {unshared} inputs "
                                                                  "not in shared memory",
                        "send one raw_input_contents entry per input not in shared memory, in the order of inputs, "
                        "or none")


def _check_other_grpc_input(tensor: Any, raw: tuple[int, bytes] | None, cap: int, budget: _WalkBudget) -> None:
    """An input of a ModelInferRequest the gateway does not read is one Triton would read: a known datatype, a
    non-negative shape, and data of that shape (``raw``: its position and ``raw_input_contents`` entry,
    :func:`_check_other_binary`; else the count of its typed ``contents`` field, :data:`GRPC_CONTENTS`). In shared
    memory: datatype and shape only. ``cap``: the message's length, above which no element count can be the
    data's."""
    name, datatype = str(tensor.name), str(tensor.datatype)
    element_bytes, dims = _other_head(name, datatype, tensor.shape)
    if "shared_memory_region" in tensor.parameters:  # the replica's to read, not the gateway's
        return
    if raw is not None:
        position, data = raw
        _check_other_binary(name, element_bytes, dims, cap, data, f"raw_input_contents[{position}] ({name})", budget)
        return
    contents = GRPC_CONTENTS.get(datatype)
    if contents is None:  # FP16 / BF16 have no typed field
        return
    count, found = _tensor_elements(dims, cap), len(getattr(tensor.contents, contents))
    if found != count:
        raise _mismatch(name, dims, count, cap, f"contents.{contents} has {found}")
