"""Validation and decoding of one request's inputs (Pillow in memory; no torch, no server)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from modalscale.runtime.model.inputs import (
    IMAGE_MEAN,
    IMAGE_STD,
    Modality,
    RequestError,
    decode_image,
    decode_text,
    parse_request,
    resolution_bucket,
)
from modalscale.runtime.model.settings import ModelSettings

SETTINGS = ModelSettings()


def encode(image: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return buf.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR declares width x height, with an empty IDAT (what a decompression bomb looks like)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"") + chunk(b"IEND", b"")


@pytest.mark.parametrize(("width", "height", "expected"), [
    (640, 427, (288, 384)),   # scale 0.6: 427*0.6=256.2 -> ceil(256.2/32)*32 = 288; 640*0.6=384
    (100, 50, (64, 128)),     # no upscaling: ceil(50/32)*32=64, ceil(100/32)*32=128
    (1, 1, (32, 32)),
    (384, 384, (384, 384)),
    (4000, 1000, (96, 384)),  # scale 0.096: 96.0 -> 96, 384
], ids=["photo", "small", "tiny", "exact", "wide"])
def test_resolution_bucket(width: int, height: int, expected: tuple[int, int]) -> None:
    assert resolution_bucket(width, height, 384) == expected


def test_bucket_is_bounded_and_a_multiple_of_32() -> None:
    for w in (1, 31, 33, 500, 1999, 20000):
        for h in (1, 64, 700, 20000):
            bh, bw = resolution_bucket(w, h, 384)
            assert 32 <= bh <= 384 and 32 <= bw <= 384 and bh % 32 == 0 and bw % 32 == 0


def test_rgb_png_decodes_to_normalised_chw() -> None:
    image = Image.new("RGB", (40, 20), (255, 0, 127))
    decoded = decode_image(encode(image), 0, SETTINGS)
    assert (decoded.width, decoded.height, decoded.pixels) == (40, 20, 800)
    assert decoded.array.shape == (3, 32, 64) and decoded.array.dtype == np.float32
    assert decoded.array[0, 0, 0] == pytest.approx((255 - IMAGE_MEAN) / IMAGE_STD)
    assert decoded.array[1, 0, 0] == pytest.approx((0 - IMAGE_MEAN) / IMAGE_STD)
    assert decoded.array[2, 0, 0] == pytest.approx(0.0)


def test_grayscale_png_is_converted_to_rgb() -> None:
    decoded = decode_image(encode(Image.new("L", (10, 10), 200)), 0, SETTINGS)
    assert decoded.array.shape[0] == 3
    assert np.allclose(decoded.array[:, 0, 0], (200 - IMAGE_MEAN) / IMAGE_STD)


def test_alpha_png_is_composited_on_white() -> None:
    decoded = decode_image(encode(Image.new("RGBA", (8, 8), (0, 0, 0, 0))), 0, SETTINGS)
    assert np.allclose(decoded.array, (255 - IMAGE_MEAN) / IMAGE_STD)


def test_jpeg_decodes_and_digest_identifies_bytes() -> None:
    data = encode(Image.new("RGB", (64, 48), (10, 20, 30)), "JPEG")
    a, b = decode_image(data, 0, SETTINGS), decode_image(data, 1, SETTINGS)
    assert a.digest == b.digest and len(a.digest) == 32
    other = encode(Image.new("RGB", (64, 48), (200, 20, 30)), "JPEG")
    assert decode_image(other, 0, SETTINGS).digest != a.digest


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "EmptyImage"),
    (b"definitely not an image", "CorruptImage"),
    (png_header_only(0, 0), None),
    (png_header_only(20000, 20000), "ImageTooLarge"),
], ids=["empty", "garbage", "zero-size", "huge"])
def test_bad_images_raise_request_error_naming_the_index(data: bytes, reason: str | None) -> None:
    with pytest.raises(RequestError) as info:
        decode_image(data, 3, SETTINGS)
    assert str(info.value).startswith("IMAGES[3]:")
    if reason is not None:
        assert info.value.reason == reason
    else:  # Pillow refuses a 0x0 IHDR itself or we do; either way a clear reason
        assert info.value.reason in {"CorruptImage", "ImageTooSmall"}


def test_unrecognised_bytes_say_which_formats_are_read_and_carry_no_object_address() -> None:
    # Pillow's own message is "cannot identify image file <_io.BytesIO object at 0x7f...>": an address that
    # differs per request and tells the client nothing.
    with pytest.raises(RequestError) as info:
        decode_image(b"definitely not an image", 2, SETTINGS)
    message = str(info.value)
    assert info.value.reason == "CorruptImage"
    assert "BytesIO" not in message and " at 0x" not in message
    assert message.startswith("IMAGES[2]: not a recognised image format") and "JPEG" in message and "PNG" in message


def test_truncated_jpeg_is_corrupt() -> None:
    data = encode(Image.new("RGB", (64, 64), (1, 2, 3)), "JPEG")
    with pytest.raises(RequestError) as info:
        decode_image(data[: len(data) // 2], 0, SETTINGS)
    assert info.value.reason == "CorruptImage"


def test_text_rules() -> None:
    assert decode_text("héllo".encode(), SETTINGS) == "héllo"
    assert decode_text(b"   ", SETTINGS) is None
    with pytest.raises(RequestError, match="^TEXT: not valid UTF-8"):
        decode_text(b"\xff\xfe\xfa", SETTINGS)
    with pytest.raises(RequestError, match="^TEXT: 16385 bytes exceeds"):
        decode_text(b"a" * 16385, SETTINGS)


def objects(*items: bytes) -> np.ndarray:
    return np.array([list(items)], dtype=object)


def test_parse_request_modalities() -> None:
    png = encode(Image.new("RGB", (5, 5)))
    assert parse_request(objects(png), None, SETTINGS).modality is Modality.IMAGE
    assert parse_request(None, objects(b"hi"), SETTINGS).modality is Modality.TEXT
    both = parse_request(objects(png, png), objects(b"hi"), SETTINGS)
    assert both.modality is Modality.IMAGE_TEXT and len(both.images) == 2 and both.text == "hi"
    assert parse_request(objects(png), objects(b" "), SETTINGS).modality is Modality.IMAGE


@pytest.mark.parametrize(("images", "text", "reason"), [
    (None, None, "MissingInput"),
    (np.empty((1, 0), dtype=object), None, "EmptyRequest"),
    (np.empty((1, 0), dtype=object), np.array([[b""]], dtype=object), "EmptyRequest"),
    (None, np.array([[b"a", b"b"]], dtype=object), "BadTextShape"),
], ids=["missing", "no-images", "blank-text", "two-texts"])
def test_parse_request_rejects_missing_and_empty(images, text, reason: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_request(images, text, SETTINGS)
    assert info.value.reason == reason


@pytest.mark.parametrize(("images", "text", "reason", "words"), [
    (np.array([[b"a"], [b"b"]], dtype=object), None, "BadImagesShape",
     "IMAGES: shape [2, 1] has a batch dimension of 2"),
    (np.array([[b"a", b"b"]] * 3, dtype=object), None, "BadImagesShape",
     "IMAGES: shape [3, 2] has a batch dimension of 3"),
    (np.empty((0, 1), dtype=object), np.array([[b"hi"]], dtype=object), "BadImagesShape", "a batch dimension of 0"),
    (None, np.array([[b"a"], [b"b"]], dtype=object), "BadTextShape", "TEXT: shape [2, 1] has a batch dimension of 2"),
], ids=["images-2x1", "images-3x2", "images-0x1", "text-2x1"])
def test_a_batch_dimension_other_than_1_is_refused_naming_the_input(images, text, reason: str, words: str) -> None:
    """A batched model (no router) takes a client's leading dimension up to ``max_batch_size``: IMAGES [2, 1] was
    read as one request of two images, answered with one embedding of both, where the client sent two items."""
    with pytest.raises(RequestError) as info:
        parse_request(images, text, SETTINGS)
    assert info.value.reason == reason
    assert words in str(info.value)
    assert ("[1, n]" if reason == "BadImagesShape" else "[1, 1]") in str(info.value)


def test_too_many_images_rejected_before_decoding() -> None:
    with pytest.raises(RequestError) as info:
        parse_request(objects(*([b"not decoded"] * 17)), None, SETTINGS)
    assert info.value.reason == "TooManyImages"
    assert "17 images exceed the limit of 16" in str(info.value)


def test_int8_decodes_large_jpegs_in_draft_mode_close_to_a_full_decode() -> None:
    """With INT8 a JPEG much larger than its resolution bucket is decoded by libjpeg at 1/2, 1/4 or 1/8 scale (never
    below the bucket), then resized as before; FP32 keeps the full decode (its outputs stay bit-identical)."""
    import io as _io

    from modalscale.runtime.repo_config import Precision
    from modalscale.runtime.workload import photo_at

    data = photo_at("astronaut", 1600, 1200)  # bucket 288 x 384: libjpeg can decode at 1/4 (400 x 300)
    full = decode_image(data, 0, SETTINGS)
    draft = decode_image(data, 0, ModelSettings(precision=Precision.INT8))
    assert full.bucket == draft.bucket == (288, 384)
    assert (draft.pixels, draft.width, draft.height) == (full.pixels, full.width, full.height) == (1920000, 1600, 1200)
    assert draft.digest == full.digest
    assert not np.array_equal(draft.array, full.array)  # it did take the draft path
    assert float(np.abs(draft.array - full.array).mean()) < 0.02  # of a normalised range of about 2 (measured 0.004)
    png = _io.BytesIO()
    Image.open(_io.BytesIO(data)).save(png, format="PNG")
    png_full = decode_image(png.getvalue(), 0, SETTINGS)
    png_int8 = decode_image(png.getvalue(), 0, ModelSettings(precision=Precision.INT8))
    # no draft mode for PNG: it differs from FP32 only by the INT8 resize's reducing gap (test_runtime_int8_decode)
    assert float(np.abs(png_int8.array - png_full.array).mean()) < 0.02
    small = photo_at("astronaut", 320, 240)
    assert np.array_equal(decode_image(small, 0, ModelSettings(precision=Precision.INT8)).array,
                          decode_image(small, 0, SETTINGS).array)  # already at its bucket: nothing to skip
