"""EXIF orientation in ``decode_image``: the resolution bucket, the resize and the reported width / height follow
the image as displayed (after the orientation is applied), on the FP32 and the INT8 path (JPEG draft mode, pyspng,
``reducing_gap``); images without an orientation keep FP32's exact pixels (real photographs; no model, no server).

Expected values do not come from Pillow's own orientation table: each orientation is written out below from the
EXIF specification's wording, and checked against that wording."""

from __future__ import annotations

import functools
import io
import struct
import zlib
from collections.abc import Callable

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin, PngImagePlugin

from modalscale.runtime.model.inputs import IMAGE_MEAN, IMAGE_STD, DecodedImage, decode_image, resolution_bucket
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import Precision
from modalscale.runtime.workload import photo_at

FP32 = ModelSettings()
INT8 = ModelSettings(precision=Precision.INT8)
ORIENTATION_TAG = 0x0112
JPEG_QUALITY = 95
PNG_LEVEL = 1

DISPLAYED: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    1: lambda a: a,
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: np.swapaxes(a, 0, 1),
    6: lambda a: np.rot90(a, -1),
    7: lambda a: np.swapaxes(np.rot90(a, 2), 0, 1),
    8: lambda a: np.rot90(a, 1),
}
"""EXIF orientation value -> the displayed pixels of stored pixels ``(h, w[, c])``."""

SPEC = {
    1: ("top", "left"), 2: ("top", "right"), 3: ("bottom", "right"), 4: ("bottom", "left"),
    5: ("left", "top"), 6: ("right", "top"), 7: ("right", "bottom"), 8: ("left", "bottom"),
}
"""EXIF 2.32 (CIPA DC-008), tag 0x0112 Orientation: "the 0th row is at the visual <first>, and the 0th column is
the visual <second>" of the image."""


def side(image: np.ndarray, where: str) -> np.ndarray:
    return {"top": image[0], "bottom": image[-1], "left": image[:, 0], "right": image[:, -1]}[where]


@pytest.mark.parametrize("orientation", range(1, 9))
def test_displayed_table_is_the_exif_specifications(orientation: int) -> None:
    """The stored 0th row and 0th column land on the sides the specification names (each of the eight flips and
    turns of a rectangle puts them on a different pair of sides, so this pins the table down): the test's
    expectation is the specification, not Pillow's table."""
    stored = np.arange(5 * 7).reshape(5, 7)
    shown = DISPLAYED[orientation](stored)
    row_side, column_side = SPEC[orientation]
    row, column = side(shown, row_side), side(shown, column_side)
    assert sorted(row) == list(stored[0]) and sorted(column) == list(stored[:, 0])


SOFTWARE_TAG = 0x0131


def exif_with(orientation: int | None) -> Image.Exif:
    """An EXIF block with a Software tag and, unless None, the orientation tag."""
    exif = Image.Exif()
    exif[SOFTWARE_TAG] = "modalscale test"
    if orientation is not None:
        exif[ORIENTATION_TAG] = orientation
    return exif


def encode(pixels: np.ndarray, fmt: str, orientation: int | None = None, exif: Image.Exif | None = None) -> bytes:
    """``pixels`` encoded as ``fmt`` (JPEG quality 95; PNG at zlib level 1: lossless at any level, and the default 6
    made PNG encoding most of this module's time), with EXIF orientation ``orientation`` (None: no EXIF unless
    ``exif`` is given)."""
    buf = io.BytesIO()
    params: dict[str, object] = {"quality": JPEG_QUALITY} if fmt == "JPEG" else {"compress_level": PNG_LEVEL}
    if orientation is not None:
        params["exif"] = exif_with(orientation)
    elif exif is not None:
        params["exif"] = exif
    Image.fromarray(np.ascontiguousarray(pixels)).save(buf, format=fmt, **params)
    return buf.getvalue()


@functools.cache
def photo_pixels(name: str, width: int, height: int) -> np.ndarray:
    """The photograph at ``width`` x ``height`` as uint8 (h, w, 3), taken from a lossless PPM (the pixels a PNG
    holds, without the PNG's zlib level 6: 4.4 s of CPU for 1600x1200, the PPM 0.04 s); read-only, made once per
    size for the module."""
    pixels = np.asarray(Image.open(io.BytesIO(photo_at(name, width, height, "PPM"))).convert("RGB"))
    pixels.setflags(write=False)
    return pixels


@functools.cache
def encoded_photo(name: str, width: int, height: int, fmt: str, orientation: int | None, turned: int = 1) -> bytes:
    """:func:`encode` of the photograph's pixels as orientation ``turned`` displays them (1: as stored), with EXIF
    orientation ``orientation``; made once for the module (the FP32 and INT8 cases decode the same bytes)."""
    return encode(DISPLAYED[turned](photo_pixels(name, width, height)), fmt, orientation)


def mean_diff_levels(a: DecodedImage, b: DecodedImage) -> float:
    """Mean absolute difference of two decoded arrays in 0..255 pixel levels."""
    return float(np.abs(a.array - b.array).mean()) * IMAGE_STD


JPEG_MEAN_DIFF_LEVELS = 3.0
"""Bound on the mean absolute difference (0..255 levels) between a JPEG stored turned, with its orientation tag,
and the same photograph turned beforehand and stored plainly (quality 95; two different JPEG encodings, whose
8x8 blocks and 2x2 chroma subsampling fall on different pixels): measured 0.0 (orientation 1) to 1.29 on the
cases below, the largest at the odd 203x157, the same on both paths; 0.22 at most in the draft-mode test. The wrong
orientation gives at least 34 on the same cases (checked in the test for 2-4, where the bucket cannot tell)."""

CASES = [("astronaut", (400, 200)), ("chelsea", (203, 157)), ("coffee", (1600, 1200))]
"""Photograph and stored size: the 400x200 of the report (bucket 192x384 stored, 384x192 displayed), odd sides
(JPEG blocks do not tile them), and a large image (INT8: JPEG draft mode; PNG: ``reducing_gap`` reduce)."""


@pytest.mark.parametrize("settings", [FP32, INT8], ids=["fp32", "int8"])
@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_bucket_resize_and_size_follow_the_displayed_orientation(orientation: int, fmt: str,
                                                                 settings: ModelSettings) -> None:
    """A photo stored with orientation tag 1..8 decodes as that photo rotated / flipped beforehand and stored
    without EXIF: the same bucket, width and height (the displayed ones; pixels unchanged) and the same array
    (PNG exactly; JPEG within :data:`JPEG_MEAN_DIFF_LEVELS`, the two being different JPEG encodings)."""
    for name, (width, height) in CASES:
        stored = photo_pixels(name, width, height)
        shown = DISPLAYED[orientation](stored)
        got = decode_image(encoded_photo(name, width, height, fmt, orientation), 0, settings)
        expected = decode_image(encoded_photo(name, width, height, fmt, None, turned=orientation), 0, settings)
        shown_w, shown_h = shown.shape[1], shown.shape[0]
        assert (got.width, got.height, got.pixels) == (shown_w, shown_h, width * height), name
        assert (expected.width, expected.height) == (shown_w, shown_h)
        assert got.bucket == expected.bucket == resolution_bucket(shown_w, shown_h, settings.max_image_side_pixels)
        if fmt == "PNG":
            assert np.array_equal(got.array, expected.array), name
        else:
            assert mean_diff_levels(got, expected) < JPEG_MEAN_DIFF_LEVELS, (name, mean_diff_levels(got, expected))
            if orientation in (2, 3, 4):  # same bucket either way: the bound does tell orientations apart
                unturned = decode_image(encoded_photo(name, width, height, fmt, None), 0, settings)
                assert mean_diff_levels(unturned, expected) > 5 * JPEG_MEAN_DIFF_LEVELS, name


def test_the_reported_squash_is_gone() -> None:
    """The report: a 400x200 JPEG with orientation 6 (displayed 200x400) came out as (3, 192, 384)."""
    data = encode(photo_pixels("astronaut", 400, 200), "JPEG", 6)
    for settings in (FP32, INT8):
        decoded = decode_image(data, 0, settings)
        assert decoded.array.shape == (3, 384, 192)
        assert (decoded.width, decoded.height) == (200, 400)


@pytest.fixture
def drafts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Records ``(requested size, size libjpeg will decode at)`` of every JPEG draft call."""
    calls: list[tuple[tuple[int, int], tuple[int, int]]] = []
    real = JpegImagePlugin.JpegImageFile.draft

    def recording(self: JpegImagePlugin.JpegImageFile, mode: str | None,
                  size: tuple[int, int] | None) -> object:
        result = real(self, mode, size)
        assert size is not None
        calls.append((size, self.size))
        return result

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", recording)
    return calls


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("size", [(1600, 1200), (1600, 400)], ids=str)
def test_int8_draft_decodes_a_turned_jpeg_at_its_buckets_scale(orientation: int, size: tuple[int, int],
                                                               drafts: list[tuple[tuple[int, int], tuple[int, int]]]
                                                               ) -> None:
    """Draft mode runs before the orientation is applied, so libjpeg is asked for the bucket in the stored
    orientation: a turned JPEG is decoded at the same 1/2, 1/4 or 1/8 scale as the same photo stored upright
    (1600x1200: 1/4; 1600x400: 1/4, where asking for the displayed bucket unturned would decode it in full), and
    never below its bucket."""
    stored = photo_pixels("rocket", *size)
    shown = DISPLAYED[orientation](stored)
    turned = decode_image(encode(stored, "JPEG", orientation), 0, INT8)
    upright = decode_image(encode(shown, "JPEG"), 0, INT8)
    assert len(drafts) == 2
    (_, turned_size), (_, upright_size) = drafts
    swapped = orientation >= 5
    assert turned_size == (upright_size[::-1] if swapped else upright_size)
    assert turned_size == (size[0] // 4, size[1] // 4)
    bucket_h, bucket_w = turned.bucket
    stored_bucket = (bucket_h, bucket_w) if swapped else (bucket_w, bucket_h)
    assert turned_size[0] >= stored_bucket[0] and turned_size[1] >= stored_bucket[1]
    assert turned.bucket == upright.bucket
    assert mean_diff_levels(turned, upright) < JPEG_MEAN_DIFF_LEVELS


def pillow_fp32(data: bytes) -> np.ndarray:
    """FP32's array from plain Pillow calls, the bucket taken from the stored size (what decode_image computed
    before orientation was taken into account; for an image with no orientation to apply it is still the
    answer)."""
    image = Image.open(io.BytesIO(data))
    rgb = image.convert("RGB")
    bucket_h, bucket_w = resolution_bucket(*image.size, FP32.max_image_side_pixels)
    resized = rgb.resize((bucket_w, bucket_h), Image.Resampling.BILINEAR)
    return ((np.asarray(resized, dtype=np.float32) - IMAGE_MEAN) / IMAGE_STD).transpose(2, 0, 1)


@pytest.mark.parametrize("tag", ["no-exif", "exif-without-orientation", "orientation-1"])
@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_fp32_without_an_orientation_is_bit_identical(fmt: str, tag: str) -> None:
    """No orientation to apply: FP32's array is exactly Pillow's decode, resize and normalisation, as before."""
    for name, (width, height) in [("astronaut", (640, 480)), ("china", (400, 200)), ("flower", (203, 157)),
                                  ("coffee", (1600, 1200))]:
        stored = photo_pixels(name, width, height)
        if tag == "exif-without-orientation":
            data = encode(stored, fmt, exif=exif_with(None))
            exif = Image.open(io.BytesIO(data)).getexif()
            assert ORIENTATION_TAG not in exif and exif[SOFTWARE_TAG] == "modalscale test"
        else:
            data = encode(stored, fmt, {"no-exif": None, "orientation-1": 1}[tag])
        decoded = decode_image(data, 0, FP32)
        assert np.array_equal(decoded.array, pillow_fp32(data)), name
        assert (decoded.width, decoded.height) == (width, height)


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _xmp(orientation: int) -> str:
    return (f'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description tiff:Orientation="{orientation}"/>'
            "</rdf:RDF></x:xmpmeta>")


def _png_exif_after_idat(pixels: np.ndarray, orientation: int) -> bytes:
    """An eXIf chunk after the image data (the PNG spec allows it): Pillow only sees it once it has decoded."""
    data = encode(pixels, "PNG")
    iend = data.rindex(b"IEND") - 4
    exif = exif_with(orientation).tobytes()[6:]  # without the "Exif\0\0" header, as the eXIf chunk holds it
    return data[:iend] + _png_chunk(b"eXIf", exif) + data[iend:]


def _png_with(pixels: np.ndarray, info: PngImagePlugin.PngInfo) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG", pnginfo=info, compress_level=PNG_LEVEL)
    return buf.getvalue()


def _png_xmp(pixels: np.ndarray, orientation: int) -> bytes:
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", _xmp(orientation))
    return _png_with(pixels, info)


def _png_raw_profile(pixels: np.ndarray, orientation: int) -> bytes:
    exif = exif_with(orientation).tobytes()
    info = PngImagePlugin.PngInfo()
    info.add_text("Raw profile type exif", f"\nexif\n{len(exif):8}\n{exif.hex()}\n", zip=True)
    return _png_with(pixels, info)


def _jpeg_xmp(pixels: np.ndarray, orientation: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=JPEG_QUALITY, xmp=_xmp(orientation).encode())
    return buf.getvalue()


OTHER_SOURCES: dict[str, tuple[str, Callable[[np.ndarray, int], bytes]]] = {
    "png-exif-after-idat": ("PNG", _png_exif_after_idat),
    "png-xmp": ("PNG", _png_xmp),
    "png-raw-profile-exif": ("PNG", _png_raw_profile),
    "jpeg-xmp": ("JPEG", _jpeg_xmp),
}
"""Orientation given elsewhere than a leading EXIF block: each is one Pillow's ``exif_transpose`` applies."""


@functools.cache
def written_rocket(source: str, orientation: int) -> bytes:
    """The 1600x1200 rocket written by ``source`` with ``orientation``, made once for the module (the FP32 and INT8
    cases decode the same bytes)."""
    return OTHER_SOURCES[source][1](photo_pixels("rocket", 1600, 1200), orientation)


@pytest.mark.parametrize("settings", [FP32, INT8], ids=["fp32", "int8"])
@pytest.mark.parametrize("orientation", [6, 7])
@pytest.mark.parametrize("source", list(OTHER_SOURCES))
def test_orientation_from_other_sources_follows_the_displayed_orientation(source: str, orientation: int,
                                                                          settings: ModelSettings) -> None:
    """A quarter turn found in XMP, a raw-profile text chunk or an eXIf chunk after the image data (known only once
    Pillow has decoded): the displayed bucket and size too (INT8 JPEG: the draft is asked for the turned bucket)."""
    fmt = OTHER_SOURCES[source][0]
    got = decode_image(written_rocket(source, orientation), 0, settings)
    expected = decode_image(encoded_photo("rocket", 1600, 1200, fmt, None, turned=orientation), 0, settings)
    assert (got.width, got.height, got.bucket) == (1200, 1600, (384, 288)) == (expected.width, expected.height,
                                                                              expected.bucket)
    if fmt == "PNG":
        assert np.array_equal(got.array, expected.array)
    else:
        assert mean_diff_levels(got, expected) < JPEG_MEAN_DIFF_LEVELS
