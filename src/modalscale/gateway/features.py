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
Inputs with other names are not read (their binary sections are still walked, to find the next input's bytes). A
well-formed request with neither named input (a user's model with other inputs) is forwarded and counted as demand:
:data:`FEATURELESS`, the ``text`` class with 0 images and 0 tokens.

What is refused with :class:`PayloadError` (HTTP 400 / gRPC INVALID_ARGUMENT; the field and the fix in its message):
a body over ``max_body_bytes`` (raw or inflated), an unknown content encoding, a bad
``Inference-Header-Content-Length``, malformed JSON or protobuf, a request that is not a v2 infer request, an image or
text input that is not BYTES, a shape whose element count differs from the data, a JSON element that is not a string,
a binary section shorter or longer than the ``binary_data_size`` values say, more than :data:`MAX_ELEMENTS` images
or texts, an image or text input in shared memory (the gateway cannot read a replica's shared memory), a request with
no image and only blank text (the named inputs present, nothing in them), an empty image, an image whose header is
truncated, of another format or too long to walk (:data:`modalscale.gateway.image_headers.MAX_STEPS`), and text that
is not UTF-8. Every structural fault in that list is one Triton refuses too (checked against a real tritonserver by
``tests/integration/runtime/test_runtime_gateway_wire.py``), except a truncated gzip stream, of which Triton serves
what it could inflate. Every content fault is one the built-in model refuses, except an image in a format other than
these five (TIFF, ICO, PPM, ...), which the built-in model's Pillow reads and the gateway refuses
(``UnsupportedImageFormat``). The limits are the gateway's own.
What the replica still checks itself (per-model limits the gateway does not know): image pixels, images per request
and text length limits, and the pixels of an image whose header is whole.

Cost, measured on the shared 2-core EPYC (300 calls each, tritonclient-built requests): one 1600x1200 JPEG (192 KB)
and 32 tokens 299 us over HTTP binary, 382 us over gRPC; four 640x480 JPEGs 550 / 609 us; a 128-token text 70 / 40
us. The image digest dominates: BLAKE2b-128 of the 192 KB image alone took 338 us (SHA-256, which this CPU runs in
hardware, 195 us).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


def _shape_elements(shape: Any, field: str) -> int:
    """Element count of a shape, at most :data:`MAX_ELEMENTS`; at most :data:`MAX_DIMS` dimensions, each at most
    :data:`MAX_ELEMENTS` (checked before anything is multiplied)."""
    if not isinstance(shape, Sequence) or isinstance(shape, (str, bytes)):
        raise PayloadError(field, "MalformedRequest", f"shape must be a list of non-negative integers, got "
                                                      f"{_short(shape)}", "send the tensor's shape, e.g. [1, 2]")
    if len(shape) > MAX_DIMS:
        raise PayloadError(field, "TooManyElements", f"shape has {len(shape)} dimensions, more than the gateway reads "
                                                     f"({MAX_DIMS})", "send the tensor's shape, e.g. [1, 2]")
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise PayloadError(field, "MalformedRequest", f"shape must be a list of non-negative integers, got "
                                                      f"{_short(shape)}", "send the tensor's shape, e.g. [1, 2]")
    if any(d > MAX_ELEMENTS for d in shape):
        raise PayloadError(field, "TooManyElements", f"shape {_short(list(shape))} has a dimension above the "
                                                     f"{MAX_ELEMENTS} elements the gateway reads",
                           f"send at most {MAX_ELEMENTS} images or texts per request")
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise PayloadError(field, "TooManyElements", f"shape {list(shape)} holds {count} elements, more than the "
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
        if name not in (inputs.images, inputs.text):
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
    if raw and len(raw) != len(request.inputs):
        raise PayloadError("raw_input_contents", "MalformedRequest", f"has {len(raw)} entries for "
                                                                     f"{len(request.inputs)} inputs",
                           "send one raw_input_contents entry per input, in the order of inputs, or none")
    images: list[Chunk] | None = None
    texts: list[Chunk] | None = None
    seen: set[str] = set()
    for position, tensor in enumerate(request.inputs):
        name = str(tensor.name)
        if raw and tensor.HasField("contents"):  # Triton refuses the request whichever input it is
            raise PayloadError(f"inputs[{name}].contents", "MalformedRequest",
                               "is set while the request also carries raw_input_contents",
                               "send every input's elements either in raw_input_contents or in contents, not both")
        if name in seen:
            raise PayloadError(f"inputs[{name}]", "DuplicateInput", "appears twice", "send each input once")
        seen.add(name)
        if name not in (inputs.images, inputs.text):
            continue
        if "shared_memory_region" in tensor.parameters:
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
    return _features(images, texts, inputs, "contents")
