"""Validate and decode one request's inputs (pure apart from decoding bytes; no torch, no Triton).

Every problem with a request raises :class:`RequestError` with a message naming the input, so the Python
backend can answer that request with an error while the rest of the batch is served.
"""

from __future__ import annotations

import enum
import hashlib
import io
import math
import re
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from modalscale.runtime.model import png_decode
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import Precision

BUCKET_STEP_PIXELS = 32
"""Resolution buckets are multiples of this many pixels (the image encoder's total stride)."""

IMAGE_MEAN = 127.0
IMAGE_STD = 128.0
"""EfficientNet-Lite input normalisation, ``(x - 127) / 128`` on 0..255 RGB (as in the TF-Lite reference)."""

INT8_REDUCING_GAP: float | None = 2.0
"""Pillow's ``reducing_gap`` for the INT8 path's downscale (None: the FP32 path's plain BILINEAR resize): an image
at least ``2 * gap`` times its bucket on a side is first shrunk by the integer factor ``int(side / bucket / gap)``
with a box filter (``Image.reduce``), then resized BILINEAR. At 2.0 that is a longer side >= 1536 px (4x the 384
bucket), PNG or another non-JPEG format: a JPEG's draft decode already lands below twice its bucket. Measured
against the FP32 path on the six photographs at 640x480 to 2000x1000 (42 PNGs; image features of the FP32
encoder): 2.0 gives mean absolute pixel difference 0.12 of 255 (max 7), feature cosine min 0.9989, top-1 41/42
(the one change a near tie, 5.1 % vs 5.0 %); 1.0 gives 0.69 (max 40), cosine min 0.992, top-1 40/42. Resize of
a 1600x1200 image 5.9 -> 3.6 CPU-ms at 2.0 (2.4 at 1.2)."""

_QUARTER_TURNS = frozenset((5, 6, 7, 8))
"""EXIF orientations whose displayed image is the stored one turned a quarter (width and height swap): 5 transpose,
6 turn clockwise, 7 transverse, 8 turn anticlockwise (EXIF 2.32, tag 0x0112)."""

_PNG_SPNG_FORMATS = {0: ("L", "L"), 2: ("RGB", "RGB"), 4: ("LA", "RGBA"), 6: ("RGBA", "RGBA")}
"""8-bit PNG colour type -> (Pillow's mode for it, the pyspng output format that gives Pillow's pixels). LA is
taken as RGBA (grey replicated), which is what the alpha compositing converts it to anyway."""


class Modality(str, enum.Enum):
    """Modality class of a request (the ``modality`` label of ``modalscale_requests_total``)."""

    IMAGE = "image"
    TEXT = "text"
    IMAGE_TEXT = "image_text"


class RequestError(ValueError):
    """The request is invalid; ``reason`` is a short CamelCase label for the error counter."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class DecodedImage:
    """One decoded, resized and normalised image."""

    pixels: int
    """``width * height`` of the image as received, before resizing."""
    width: int
    height: int
    """Size in pixels as displayed, before resizing: the stored size with its EXIF orientation applied (a quarter
    turn, orientation 5-8, swaps the stored width and height)."""
    array: NDArray[np.float32] | None
    """float32, shape (3, bucket_h, bucket_w), normalised with IMAGE_MEAN / IMAGE_STD; None when the image was not
    decoded because the embedding cache holds it (then ``cached`` is set)."""
    digest: bytes
    """SHA-256 of the encoded bytes (the embedding-cache key)."""
    cached: Any = None
    """The embedding-cache entry found for ``digest`` before decoding (decoding was skipped), else None."""

    @property
    def bucket(self) -> tuple[int, int]:
        """``(bucket_h, bucket_w)`` in pixels.

        Raises:
            ValueError: The image was not decoded (cache hit).
        """
        if self.array is None:
            raise ValueError("image was not decoded (embedding cache hit)")
        return int(self.array.shape[1]), int(self.array.shape[2])


@dataclass(frozen=True)
class ParsedRequest:
    """A validated request."""

    images: tuple[DecodedImage, ...]
    text: str | None
    """Decoded text, None when absent or empty."""

    @property
    def modality(self) -> Modality:
        """Modality class."""
        if self.images and self.text is not None:
            return Modality.IMAGE_TEXT
        return Modality.IMAGE if self.images else Modality.TEXT


def resolution_bucket(width: int, height: int, max_side_pixels: int,
                      step: int = BUCKET_STEP_PIXELS) -> tuple[int, int]:
    """Encoder input size for an image: scale down so the longer side is <= ``max_side_pixels``, then round
    each side up to a multiple of ``step`` (so compute grows with the image's pixels, in a few buckets).

    Args:
        width, height: Image size in pixels (>= 1).
        max_side_pixels: Bound of the longer side, a multiple of ``step``.
    Returns:
        ``(bucket_h, bucket_w)`` in pixels, each in ``[step, max_side_pixels]``.
    """
    scale = min(1.0, max_side_pixels / max(width, height))
    bucket_h = min(max_side_pixels, max(step, math.ceil(height * scale / step) * step))
    bucket_w = min(max_side_pixels, max(step, math.ceil(width * scale / step) * step))
    return bucket_h, bucket_w


_OBJECT_REPR = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")


def _without_addresses(message: str) -> str:
    """``message`` with Python object reprs (``<_io.BytesIO object at 0x7f...>``) replaced by ``the image bytes``:
    an address differs per request and tells a client nothing."""
    return _OBJECT_REPR.sub("the image bytes", message)


def decode_image(data: bytes, index: int, settings: ModelSettings, digest: bytes | None = None) -> DecodedImage:
    """Decode one encoded image into the encoder's input.

    Grayscale, palette and alpha images are converted to RGB (alpha composited onto white); the EXIF orientation
    (from EXIF or an XMP ``tiff:Orientation``, as Pillow's ``ImageOps.exif_transpose`` reads it) is applied before
    anything depends on the shape: the resolution bucket, the resize and the reported ``width`` / ``height`` are
    those of the image as displayed (orientations 5-8 swap the stored width and height; ``pixels`` and the
    size limit are unchanged). The declared size is checked before the pixels are decoded. With ``precision``
    INT8 a JPEG is decoded in libjpeg's draft mode at the smallest 1/2, 1/4 or 1/8 scale not below its
    resolution bucket (the bucket turned back to the stored orientation, since the draft decode comes before
    the orientation is applied; the same bucket and resize follow). Measured on 640x480 to 1600x1200 photos:
    mean absolute difference 0.003-0.004 of the normalised range (about 2); decode CPU of a 1600x1200 JPEG
    13.7 -> 3.5 ms. With INT8 a plain 8-bit RGB / RGBA / L / LA PNG (interlaced or not; no tRNS, no APNG, no EXIF
    or XMP orientation anywhere in the file) is inflated by pyspng (libspng) instead of Pillow, to the same pixels
    byte for byte (Pillow still reads the header and does every size check; a PNG pyspng cannot decode goes to
    Pillow, so a damaged PNG gets today's answer), the downscale uses Pillow's ``reducing_gap``
    :data:`INT8_REDUCING_GAP`, and the normalisation is written in place (same values). FP32 (and FP16 / BF16)
    keep Pillow's full decode, plain resize and the plain normalisation expression, bit-identical to before for
    every image without a quarter-turn orientation.

    Args:
        data: Encoded image bytes (any format Pillow reads: JPEG, PNG, WebP, BMP, GIF ...).
        index: Position in the request's IMAGES (for messages).
        settings: Bounds.
        digest: SHA-256 of ``data`` if already computed.
    Returns:
        The decoded image.
    Raises:
        RequestError: Empty, undecodable or truncated bytes; zero or too many pixels.
    """
    if not data:
        raise RequestError("EmptyImage", f"IMAGES[{index}]: empty bytes")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image: Image.Image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width <= 0 or height <= 0:
                raise RequestError("ImageTooSmall", f"IMAGES[{index}]: image has zero size ({width}x{height})")
            if width * height > settings.max_image_pixels:
                raise RequestError(
                    "ImageTooLarge", f"IMAGES[{index}]: {width}x{height} = {width * height} pixels exceeds the "
                    f"limit of {settings.max_image_pixels} pixels")
            fast = settings.precision is Precision.INT8
            spng_image = _png_by_pyspng(data, image) if fast and image.format == "PNG" else None
            if spng_image is not None:
                image = spng_image  # never has an orientation (_png_by_pyspng refuses those)
            else:
                if fast and image.format == "JPEG":
                    # libjpeg scales by 1/2, 1/4 or 1/8 while decoding, never below the requested size: a large
                    # photo is decoded at about its bucket instead of in full (FP32 keeps the full decode). The
                    # draft runs before the orientation is applied, so it asks for the bucket in the stored
                    # orientation: turned back for a quarter turn (the EXIF of a JPEG is read with its header).
                    turned = image.getexif().get(ExifTags.Base.Orientation) in _QUARTER_TURNS
                    shown_w, shown_h = (height, width) if turned else (width, height)
                    bucket_h, bucket_w = resolution_bucket(shown_w, shown_h, settings.max_image_side_pixels)
                    image.draft("RGB", (bucket_h, bucket_w) if turned else (bucket_w, bucket_h))
                image.load()
                stored_size = image.size
                image = ImageOps.exif_transpose(image)
                if image.size != stored_size:  # a quarter turn (orientation 5-8): report the displayed size
                    width, height = height, width
            rgb = _to_rgb(image)  # in the try: a palette PNG's tRNS longer than its palette fails here (ValueError)
    except RequestError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise RequestError("ImageTooLarge", f"IMAGES[{index}]: exceeds the limit of {settings.max_image_pixels} "
                                            f"pixels ({exc})") from None
    except UnidentifiedImageError:
        raise RequestError("CorruptImage", f"IMAGES[{index}]: not a recognised image format (send the encoded "
                                           f"bytes of a JPEG, PNG, WebP, BMP or GIF file)") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise RequestError("CorruptImage", f"IMAGES[{index}]: cannot decode image "
                                           f"({type(exc).__name__}: {_without_addresses(str(exc))})") from None
    bucket_h, bucket_w = resolution_bucket(width, height, settings.max_image_side_pixels)
    gap = INT8_REDUCING_GAP if settings.precision is Precision.INT8 else None
    resized = rgb.resize((bucket_w, bucket_h), Image.Resampling.BILINEAR, reducing_gap=gap)
    if settings.precision is Precision.INT8:
        array = _normalised_chw(resized)
    else:
        array = np.ascontiguousarray(((np.asarray(resized, dtype=np.float32) - IMAGE_MEAN) / IMAGE_STD)
                                     .transpose(2, 0, 1))
    return DecodedImage(pixels=width * height, width=width, height=height, array=array,
                        digest=digest or hashlib.sha256(data).digest())


def _normalised_chw(image: Image.Image) -> NDArray[np.float32]:
    """``(x - IMAGE_MEAN) / IMAGE_STD`` of an RGB image as float32 (3, h, w), written straight into its final
    C-contiguous layout: the same float32 operations as the plain expression, so the same values bit for bit, but
    one allocation instead of four full-size ones. Measured on a 384x288 image alone (200 calls x 10 interleaved
    rounds, load 3.4, shared machine): 2.0 -> 0.34 CPU-ms, the difference being page faults of the temporaries that
    glibc hands back to the OS between calls; inside a loop of whole decode_image calls, where larger buffers keep
    the heap mapped, no difference was measurable (1.01x). Which of the two a server process sees depends on its
    allocation history."""
    pixels = np.asarray(image).transpose(2, 0, 1)
    out = np.empty(pixels.shape, dtype=np.float32)
    np.subtract(pixels, IMAGE_MEAN, out=out, dtype=np.float32)
    np.divide(out, IMAGE_STD, out=out, dtype=np.float32)
    return out


def _png_by_pyspng(data: bytes, image: Image.Image) -> Image.Image | None:
    """The pixels of the PNG ``data`` (already opened by Pillow as ``image``, header checked) decoded by pyspng, as a
    Pillow image equal to what ``image.load()`` + ``ImageOps.exif_transpose`` give; None when Pillow must decode it:
    not 8-bit RGB / RGBA / L / LA, a tRNS chunk, an APNG, any EXIF (an eXIf chunk, or a text chunk whose keyword
    names exif) or an XMP text that could hold ``tiff:Orientation`` (compressed, or containing "Orientation"), in
    any position in the file; a chunk with a wrong CRC-32 or no IEND; or libspng cannot decode it (damaged, a wrong
    Adler-32 included: Pillow then gives today's answer or error). libspng is called with its checks on
    (:func:`png_decode.decode`): ``pyspng.load`` turns them off, Adler-32 included, so image data altered and framed
    again with right chunk CRCs decoded to the altered pixels where Pillow raised CorruptImage."""
    if len(data) < 33 or data[12:16] != b"IHDR" or data[24] != 8 or data[25] not in _PNG_SPNG_FORMATS:
        return None
    pillow_mode, spng_format = _PNG_SPNG_FORMATS[data[25]]
    if (not png_decode.AVAILABLE or image.mode != pillow_mode or "transparency" in image.info
            or not _png_chunks_allow_pyspng(data)):
        return None
    try:
        pixels = png_decode.decode(data, spng_format, image.width, image.height)
    except png_decode.SpngError:  # libspng's error (a bad Adler-32, truncated, bad zlib stream, ...)
        return None
    return Image.fromarray(pixels)


_PNG_REFUSED_CHUNKS = frozenset((b"eXIf", b"tRNS", b"acTL", b"fcTL", b"fdAT"))
_PNG_TEXT_CHUNKS = frozenset((b"tEXt", b"zTXt", b"iTXt"))


def _png_chunks_allow_pyspng(data: bytes) -> bool:
    """Walk the PNG's chunks and say whether pyspng may decode it: every chunk up to IEND is complete and its CRC-32
    is right, and none of them can make Pillow's pixels or orientation differ from pyspng's plain decode (see
    :func:`_png_by_pyspng`).

    The CRCs are checked here because libspng, even with its checks on (:mod:`png_decode`), decoded a PNG whose
    last IDAT chunk had a wrong CRC; it checks zlib's Adler-32, which shows image data altered and framed again
    with right CRCs.
    """
    view = memoryview(data)
    pos, end = 8, len(data)
    while pos + 12 <= end:
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        crc_at = pos + 8 + length
        if crc_at + 4 > end or zlib.crc32(view[pos + 4:crc_at]) != int.from_bytes(data[crc_at:crc_at + 4], "big"):
            return False
        if kind in _PNG_REFUSED_CHUNKS:
            return False
        if kind in _PNG_TEXT_CHUNKS:
            keyword, _, rest = data[pos + 8:crc_at].partition(b"\0")
            keyword = keyword.lower()
            if b"exif" in keyword:
                return False
            compressed = kind == b"zTXt" or (kind == b"iTXt" and rest[:1] != b"\0")
            if b"xmp" in keyword and (compressed or b"Orientation" in rest):
                return False
        if kind == b"IEND":
            return True
        pos = crc_at + 4
    return False



def _to_rgb(image: Image.Image) -> Image.Image:
    if image.mode == "RGB":
        return image
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA"):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def decode_text(raw: bytes, settings: ModelSettings) -> str | None:
    """Decode the TEXT element.

    Returns:
        The text, or None when it is empty or only whitespace.
    Raises:
        RequestError: Not valid UTF-8, or longer than ``settings.max_text_bytes`` bytes.
    """
    if len(raw) > settings.max_text_bytes:
        raise RequestError("TextTooLong",
                           f"TEXT: {len(raw)} bytes exceeds the limit of {settings.max_text_bytes} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError("InvalidUtf8", f"TEXT: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    return text if text.strip() else None


CacheLookup = Callable[[bytes], "tuple[Any, int, int] | None"]
"""SHA-256 digest -> ``(cache entry, width, height)`` of an image already encoded, or None."""


def check_request(images: NDArray[np.object_] | None, text: NDArray[np.object_] | None, settings: ModelSettings
                  ) -> tuple[list[object], str | None]:
    """The checks of :func:`parse_request` that decode no image, in its order: what a front (stage ``front``) checks
    itself before it sends the images on to the image encoder pool, which makes the per-image checks.

    Args:
        images, text, settings: As for :func:`parse_request`.
    Returns:
        ``(image elements, decoded text or None)``; the elements are not checked.
    Raises:
        RequestError: Neither input, a batch dimension other than 1 (``[b, ...]`` with b != 1: a batched model
            without the router takes up to ``max_batch_size``, which would be read as one request's images),
            too many images, a bad text, or nothing to encode.
    """
    if images is None and text is None:
        raise RequestError("MissingInput", "request has neither IMAGES nor TEXT; send at least one")
    for name, tensor, reason, shape in (("IMAGES", images, "BadImagesShape", "[1, n]"),
                                        ("TEXT", text, "BadTextShape", "[1, 1]")):
        dims = np.shape(tensor) if tensor is not None else ()
        if len(dims) >= 2 and dims[0] != 1:
            raise RequestError(reason, f"{name}: shape {list(dims)} has a batch dimension of {dims[0]}; a request is "
                                       f"one item with one embedding: send {name} {shape} and each further item as "
                                       f"a request of its own")
    image_items = [] if images is None else list(np.asarray(images, dtype=object).reshape(-1))
    if len(image_items) > settings.max_images_per_request:
        raise RequestError("TooManyImages", f"IMAGES: {len(image_items)} images exceed the limit of "
                                            f"{settings.max_images_per_request} per request")
    decoded_text = None
    if text is not None:
        items = list(np.asarray(text, dtype=object).reshape(-1))
        if len(items) != 1:
            raise RequestError("BadTextShape", f"TEXT: expected exactly one element, got {len(items)}")
        decoded_text = decode_text(_as_bytes(items[0], "TEXT"), settings)
    if not image_items and decoded_text is None:
        raise RequestError("EmptyRequest", "request is empty: IMAGES has no image and TEXT is absent or blank")
    return image_items, decoded_text


def image_bytes(items: list[object]) -> list[bytes]:
    """The image elements as bytes (what a front forwards).

    Raises:
        RequestError: An element is not bytes or str (``BadElementType``).
    """
    return [_as_bytes(item, f"IMAGES[{i}]") for i, item in enumerate(items)]


def parse_request(images: NDArray[np.object_] | None, text: NDArray[np.object_] | None, settings: ModelSettings,
                  lookup: CacheLookup | None = None) -> ParsedRequest:
    """Validate and decode one request.

    Args:
        images: The IMAGES tensor as numpy (object array of bytes, shape (1, n) or (n,)), or None if absent; a
            leading dimension other than 1 is refused (``BadImagesShape``).
        text: The TEXT tensor (object array with one bytes element), or None if absent.
        settings: Bounds.
        lookup: The embedding cache: an image whose digest it knows is not decoded again (byte-identical bytes
            decoded and passed validation before), and carries the cache entry instead of pixels.
    Returns:
        The parsed request.
    Raises:
        RequestError: Missing/empty content, too many images, a bad image or a bad text.
    """
    image_items, decoded_text = check_request(images, text, settings)
    decoded = []
    for i, item in enumerate(image_items):
        data = _as_bytes(item, f"IMAGES[{i}]")
        digest = hashlib.sha256(data).digest()
        known = lookup(digest) if lookup is not None and data else None
        if known is not None:
            entry, width, height = known
            decoded.append(DecodedImage(pixels=width * height, width=width, height=height, array=None,
                                        digest=digest, cached=entry))
        else:
            decoded.append(decode_image(data, i, settings, digest))
    return ParsedRequest(images=tuple(decoded), text=decoded_text)


def _as_bytes(item: object, name: str) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, np.bytes_):
        return bytes(item)
    if isinstance(item, str):
        return item.encode("utf-8")
    raise RequestError("BadElementType", f"{name}: expected bytes, got {type(item).__name__}")
