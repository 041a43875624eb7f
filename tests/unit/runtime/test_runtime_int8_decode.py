"""The INT8 decode path (``precision`` INT8; FP32 is bit-identical to before): PNG pixels from pyspng exactly as
Pillow decodes them, Pillow kept for every PNG pyspng would not match, corrupt PNGs answered as before, and the
downscale's ``reducing_gap`` close to FP32's full-quality resize (real photographs; no model, no server)."""

from __future__ import annotations

import functools
import io
import random
import re
import struct
import zlib
from collections.abc import Iterator

import numpy as np
import pyspng
import pytest
from PIL import Image, PngImagePlugin

from modalscale.runtime.model import inputs
from modalscale.runtime.model.inputs import IMAGE_STD, RequestError, decode_image
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import Precision
from modalscale.runtime.workload import photo_at, photo_names

FP32 = ModelSettings()
INT8 = ModelSettings(precision=Precision.INT8)
AT_BUCKET = (384, 288)
"""A size that is its own resolution bucket: no resize, so the decoded array shows the decoded pixels exactly."""


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
"""Adam7 passes: (x start, y start, x step, y step) (PNG spec 8.2)."""


def raw_png(pixels: np.ndarray, colour_type: int, interlace: bool = False, before_idat: bytes = b"",
            after_idat: bytes = b"", zlevel: int = -1) -> bytes:
    """A PNG written by hand (Pillow writes neither 16-bit RGB nor interlaced PNGs): ``pixels`` (h, w[, c]) uint8
    or uint16, no filtering, optional extra chunks (already framed) before and after the IDAT, zlib ``zlevel``
    (0: stored, the pixels as they are)."""
    h, w = pixels.shape[:2]
    depth = 16 if pixels.dtype == np.uint16 else 8
    px = pixels.reshape(h, w, -1).astype(">u2") if depth == 16 else pixels.reshape(h, w, -1)

    def rows(a: np.ndarray) -> bytes:
        return b"".join(b"\x00" + a[y].tobytes() for y in range(a.shape[0]))

    if interlace:
        raw = b"".join(rows(px[ys::yst, xs::xst]) for xs, ys, xst, yst in ADAM7 if px[ys::yst, xs::xst].size)
    else:
        raw = rows(px)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, colour_type, 0, 0, int(interlace))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + before_idat + chunk(b"IDAT", zlib.compress(raw, zlevel))
            + after_idat + chunk(b"IEND", b""))


def save(image: Image.Image, fmt: str = "PNG", **params: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **params)
    return buf.getvalue()


def photo(name: str, size: tuple[int, int] = AT_BUCKET) -> Image.Image:
    return Image.open(io.BytesIO(photo_at(name, *size, "PNG"))).convert("RGB")


def with_alpha(rgb: Image.Image, name: str) -> Image.Image:
    """``rgb`` plus an alpha channel taken from another photograph, with fully transparent and fully opaque bands
    (so compositing onto white is exercised at 0, 255 and everything between)."""
    others = [n for n in photo_names() if n != name]
    alpha = np.asarray(photo(others[0], rgb.size).convert("L")).copy()
    alpha[:16] = 0
    alpha[-16:] = 255
    return Image.merge("RGBA", (*rgb.split(), Image.fromarray(alpha)))


def in_mode(name: str, mode: str, size: tuple[int, int] = AT_BUCKET) -> Image.Image:
    rgb = photo(name, size)
    if mode == "RGB":
        return rgb
    if mode == "L":
        return rgb.convert("L")
    rgba = with_alpha(rgb, name)
    return rgba if mode == "RGBA" else Image.merge("LA", (rgb.convert("L"), rgba.getchannel("A")))


@pytest.fixture
def spng_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Records the output format of every libspng decode (``png_decode.decode``) decode_image makes."""
    calls: list[str] = []
    real = inputs.png_decode.decode

    def counting(data: bytes, fmt: str, width: int, height: int) -> np.ndarray:
        calls.append(fmt)
        return real(data, fmt, width, height)

    monkeypatch.setattr(inputs.png_decode, "decode", counting)
    yield calls


def outcome(data: bytes, settings: ModelSettings) -> tuple[str, object]:
    """``("array", array)`` or ``("error", (reason, message))``: what a request with these bytes gets back."""
    try:
        return "array", decode_image(data, 2, settings).array
    except RequestError as exc:  # Pillow names the BytesIO object by its address: not part of the answer
        return "error", (exc.reason, re.sub(r" at 0x[0-9a-f]+", "", str(exc)))


def assert_same_outcome(data: bytes) -> tuple[str, object]:
    kind_fp32, fp32 = outcome(data, FP32)
    kind_int8, int8 = outcome(data, INT8)
    assert kind_int8 == kind_fp32, (fp32, int8)
    if kind_fp32 == "array":
        assert np.array_equal(int8, fp32)
    else:
        assert int8 == fp32
    return kind_fp32, fp32


# ------------------------------------------------------------------------------------------------ pyspng's PNGs
@pytest.mark.parametrize("name", photo_names())
@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA"])
def test_int8_png_pixels_from_pyspng_equal_pillows(name: str, mode: str, spng_calls: list[str]) -> None:
    """A plain 8-bit RGB / RGBA / L / LA PNG is inflated by pyspng; the RGB result (alpha composited onto white,
    grey expanded) is Pillow's byte for byte: at its own bucket size the INT8 array equals FP32's."""
    data = save(in_mode(name, mode))
    int8 = decode_image(data, 0, INT8)
    assert spng_calls == [{"LA": "RGBA"}.get(mode, mode)]
    fp32 = decode_image(data, 0, FP32)
    assert np.array_equal(int8.array, fp32.array)
    assert (int8.width, int8.height, int8.pixels, int8.digest) == (fp32.width, fp32.height, fp32.pixels, fp32.digest)
    if mode in ("RGBA", "LA"):  # the transparent top band came out white, as Pillow composites it
        assert np.allclose(int8.array[:, :16], (255 - inputs.IMAGE_MEAN) / IMAGE_STD)


@functools.cache
def large_png(mode: str) -> bytes:
    """The 1600x1200 coffee photograph in ``mode`` as a PNG, written once for both gaps (zlib level 1: the same
    pixels, and level 6 took seconds of CPU at this size)."""
    return save(in_mode("coffee", mode, (1600, 1200)), compress_level=1)


@pytest.mark.parametrize("gap", [None, 2.0], ids=["no-gap", "gap-2"])
@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_int8_large_png_equals_pillows_decode_and_the_same_resize(mode: str, gap: float | None,
                                                                  spng_calls: list[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """At 1600x1200 (where the resize does work): the INT8 array is Pillow's decode, composited onto white,
    resized with the same reducing gap; with no gap that is FP32's array."""
    data = large_png(mode)
    monkeypatch.setattr(inputs, "INT8_REDUCING_GAP", gap)
    int8 = decode_image(data, 0, INT8)
    assert spng_calls == [mode]
    pillow = Image.open(io.BytesIO(data))
    if mode == "RGBA":
        pillow = Image.alpha_composite(Image.new("RGBA", pillow.size, (255, 255, 255, 255)), pillow)
    resized = pillow.convert("RGB").resize((384, 288), Image.Resampling.BILINEAR, reducing_gap=gap)
    expected = (np.asarray(resized, dtype=np.float32) - inputs.IMAGE_MEAN) / IMAGE_STD
    assert np.array_equal(int8.array, expected.transpose(2, 0, 1))
    if gap is None:
        assert np.array_equal(int8.array, decode_image(data, 0, FP32).array)


def test_int8_normalisation_gives_the_plain_expressions_values_for_every_level() -> None:
    """Every 0..255 level in every channel: INT8's in-place normalisation equals ``(x - 127) / 128`` in float32."""
    levels = np.arange(256, dtype=np.uint8)
    pixels = np.stack([np.tile(levels, (32, 1)), np.tile(levels[::-1], (32, 1)), np.tile(np.roll(levels, 85),
                                                                                     (32, 1))], axis=-1)
    data = save(Image.fromarray(pixels))  # 256 x 32: its own bucket
    expected = ((pixels.astype(np.float32) - np.float32(127.0)) / np.float32(128.0)).transpose(2, 0, 1)
    int8 = decode_image(data, 0, INT8).array
    assert int8.dtype == np.float32 and int8.flags.c_contiguous
    assert np.array_equal(int8, expected) and np.array_equal(decode_image(data, 0, FP32).array, expected)


@pytest.mark.parametrize("interlace", [False, True], ids=["plain", "adam7"])
@pytest.mark.parametrize(("mode", "colour_type"), [("RGB", 2), ("L", 0), ("RGBA", 6), ("LA", 4)])
def test_int8_png_written_by_hand_and_interlaced_equal_pillows(mode: str, colour_type: int, interlace: bool,
                                                              spng_calls: list[str]) -> None:
    """Adam7-interlaced PNGs (which Pillow cannot write) decode through pyspng to Pillow's pixels as well."""
    pixels = np.asarray(in_mode("astronaut", mode, (203, 157)))  # odd sizes: every Adam7 pass partly filled
    data = raw_png(pixels, colour_type, interlace)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), pixels)  # the writer is right
    assert np.array_equal(decode_image(data, 0, INT8).array, decode_image(data, 0, FP32).array)
    assert len(spng_calls) == 1


def test_int8_png_with_harmless_text_chunks_still_uses_pyspng(spng_calls: list[str]) -> None:
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", "modalscale test")
    info.add_itxt("XML:com.adobe.xmp", '<x:xmpmeta><rdf:Description xmp:Rating="3"/></x:xmpmeta>')
    data = save(photo("chelsea"), pnginfo=info)
    assert np.array_equal(decode_image(data, 0, INT8).array, decode_image(data, 0, FP32).array)
    assert spng_calls == ["RGB"]


def test_int8_png_with_bytes_after_iend_still_uses_pyspng(spng_calls: list[str]) -> None:
    """Bytes after IEND are ignored by both decoders (benchmarks/runtime_capacity.py salts every image so)."""
    data = save(photo("coffee")) + bytes(range(32))
    assert np.array_equal(decode_image(data, 0, INT8).array, decode_image(data, 0, FP32).array)
    assert spng_calls == ["RGB"]


# -------------------------------------------------------------------------------------------- Pillow's PNGs
def exif_orientation(value: int) -> Image.Exif:
    exif = Image.Exif()
    exif[0x0112] = value
    return exif


def _xmp(value: int) -> PngImagePlugin.PngInfo:
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", f'<x:xmpmeta><rdf:Description tiff:Orientation="{value}"/></x:xmpmeta>')
    return info


def _raw_profile(value: int) -> PngImagePlugin.PngInfo:
    data = exif_orientation(value).tobytes()
    info = PngImagePlugin.PngInfo()
    info.add_text("Raw profile type exif", f"\nexif\n{len(data):8}\n{data.hex()}\n", zip=True)
    return info


def _exif_after_idat(image: Image.Image) -> bytes:
    """An eXIf chunk after the image data (allowed by the PNG spec); Pillow only sees it once it has decoded."""
    exif = exif_orientation(3).tobytes()[6:]  # without the "Exif\0\0" header, as the eXIf chunk holds it
    return raw_png(np.asarray(image), 2, after_idat=chunk(b"eXIf", exif))


def _apng(image: Image.Image) -> bytes:
    return save(image, save_all=True, append_images=[image.transpose(Image.Transpose.ROTATE_180)])


PILLOW_KEEPS = {
    "palette": lambda im: save(im.convert("P", palette=Image.Palette.ADAPTIVE)),
    "palette-transparency": lambda im: save(im.convert("P", palette=Image.Palette.ADAPTIVE), transparency=0),
    "1-bit": lambda im: save(im.convert("1")),
    "16-bit-grey": lambda im: save(Image.fromarray(np.asarray(im.convert("L")).astype(np.uint16) * 257 + 3)),
    "16-bit-rgb": lambda im: raw_png(np.asarray(im).astype(np.uint16) * 257 + 3, 2),
    "16-bit-rgba": lambda im: raw_png(np.asarray(with_alpha(im, "rocket")).astype(np.uint16) * 257, 6),
    "rgb-trns": lambda im: save(im, transparency=(0, 0, 0)),
    "grey-trns": lambda im: save(im.convert("L"), transparency=0),
    "exif-orientation": lambda im: save(im, exif=exif_orientation(3)),
    "exif-after-idat": _exif_after_idat,
    "xmp-orientation": lambda im: save(im, pnginfo=_xmp(3)),
    "raw-profile-exif": lambda im: save(im, pnginfo=_raw_profile(3)),
    "apng": _apng,
}


@pytest.mark.parametrize("kind", list(PILLOW_KEEPS))
def test_int8_keeps_pillow_for_pngs_pyspng_would_not_match(kind: str, spng_calls: list[str]) -> None:
    """Palette, 1-bit, 16-bit, tRNS, an EXIF / XMP orientation (before or after the image data) and APNG: pyspng
    is not asked, and the INT8 array equals FP32's."""
    data = PILLOW_KEEPS[kind](photo("astronaut"))
    int8 = decode_image(data, 0, INT8)
    assert spng_calls == []
    assert np.array_equal(int8.array, decode_image(data, 0, FP32).array)


@pytest.mark.parametrize("kind", ["exif-orientation", "exif-after-idat", "xmp-orientation", "raw-profile-exif"])
def test_int8_png_orientation_is_applied(kind: str) -> None:
    """The orientation fixtures above do carry an orientation Pillow applies (3 = rotate 180 degrees)."""
    image = photo("astronaut")
    rotated = decode_image(save(image.transpose(Image.Transpose.ROTATE_180)), 0, INT8)
    assert np.array_equal(decode_image(PILLOW_KEEPS[kind](image), 0, INT8).array, rotated.array)


# ------------------------------------------------------------------------------------------------ bad PNGs
def _idat_offset(data: bytes) -> int:
    return data.index(b"IDAT") + 4


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """``[(kind, data), ...]`` of a PNG's chunks, CRCs not checked."""
    out, pos = [], 8
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        out.append((data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]))
        pos += 12 + length
    return out


def with_crcs_recomputed(data: bytes) -> bytes:
    return data[:8] + b"".join(chunk(kind, body) for kind, body in _chunks(data))


def _idat_cut(data: bytes) -> bytes:
    """The image data's last 1000 bytes dropped, framed again with right lengths and CRCs."""
    parts = _chunks(data)
    stream = b"".join(body for kind, body in parts if kind == b"IDAT")[:-1000]
    return (data[:8] + b"".join(chunk(kind, body) for kind, body in parts if kind == b"IHDR")
            + chunk(b"IDAT", stream) + chunk(b"IEND", b""))


def _damaged() -> dict[str, bytes]:
    data = save(photo("coffee"))
    idat = _idat_offset(data)
    flipped = bytearray(data)
    flipped[idat + 2000] ^= 0xFF
    zeroed = bytearray(data)
    zeroed[idat + 100: idat + 400] = bytes(300)
    bad_crc = bytearray(data)
    bad_crc[data.index(b"IEND") - 4] ^= 1  # the last IDAT chunk's CRC
    bad_ihdr_crc = bytearray(data)
    bad_ihdr_crc[29] ^= 1  # IHDR's CRC (bytes 29..32)
    stored = raw_png(np.asarray(photo("coffee", (64, 48))), 2, zlevel=0)  # pixels readable in the zlib stream
    pixel = bytearray(stored)
    pixel[_idat_offset(stored) + 400] ^= 0x55
    adler = bytearray(data)
    adler[data.index(b"IEND") - 9] ^= 1  # the zlib stream's Adler-32, the last IDAT's last data bytes
    return {
        "truncated-half": data[: len(data) // 2],
        "truncated-in-first-idat": data[: idat + 50],
        "truncated-before-iend": data[: len(data) - 12],
        "truncated-in-iend-crc": data[:-2],
        "header-only": data[:idat - 8],
        "byte-flipped-in-idat": bytes(flipped),
        "zeroed-run-in-idat": bytes(zeroed),
        "bad-idat-crc": bytes(bad_crc),
        "bad-ihdr-crc": bytes(bad_ihdr_crc),
        # altered, then every chunk framed again with a right CRC (a tool that rewrites chunks): only zlib's
        # Adler-32 shows the damage, which Pillow checks and pyspng (libspng told to ignore CRCs) skips
        "pixel-altered-crc-recomputed": with_crcs_recomputed(bytes(pixel)),
        "adler-altered-crc-recomputed": with_crcs_recomputed(bytes(adler)),
        "idat-cut-crc-recomputed": _idat_cut(data),
        "trailing-garbage": data + b"garbage after IEND",
    }


@pytest.mark.parametrize("kind", list(_damaged()))
def test_int8_damaged_png_gets_what_fp32_gets(kind: str) -> None:
    """A damaged PNG gets exactly the answer it got before (the same RequestError, or the same pixels where Pillow
    tolerates the damage): pyspng's failures fall back to Pillow, which gives today's answer."""
    assert_same_outcome(_damaged()[kind])


@pytest.mark.parametrize("kind", ["bad-ihdr-crc", "pixel-altered-crc-recomputed",
                                  "adler-altered-crc-recomputed", "idat-cut-crc-recomputed", "truncated-in-first-idat"])
def test_int8_refuses_the_corrupt_pngs_pillow_refuses(kind: str) -> None:
    """Damage that only a checksum shows is refused on both paths (400 CorruptImage), never decoded to the damaged
    pixels on the INT8 path: image data altered with its chunk CRCs recomputed decoded there (pyspng skips zlib's
    Adler-32), while FP32 answered CorruptImage."""
    kind_, value = assert_same_outcome(_damaged()[kind])
    assert kind_ == "error" and value[0] == "CorruptImage", value


def test_truncated_png_is_corrupt_on_both_paths() -> None:
    kind, value = assert_same_outcome(_damaged()["truncated-half"])
    assert kind == "error" and value[0] == "CorruptImage"
    assert value[1].startswith("IMAGES[2]: cannot decode image")


def test_int8_randomly_damaged_pngs_get_what_fp32_gets() -> None:
    """40 seeded random damages (byte flips anywhere, truncations): never an answer FP32 would not give."""
    rng = random.Random(13)
    data = save(in_mode("rocket", "RGBA", (160, 96)))
    kinds = set()
    for _ in range(40):
        damaged = bytearray(data)
        if rng.random() < 0.3:
            damaged = damaged[: rng.randrange(8, len(data))]
        else:
            for _ in range(rng.randint(1, 3)):
                damaged[rng.randrange(8, len(damaged))] ^= rng.randrange(1, 256)
        kinds.add(assert_same_outcome(bytes(damaged))[0])
    assert kinds == {"array", "error"}  # both kinds of answer were exercised


# ------------------------------------------------------------------------------------------------ the resize
@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
@pytest.mark.parametrize("size", [(1600, 1200), (1024, 768), (800, 600), (640, 480)], ids=str)
def test_int8_downscale_stays_close_to_fp32(fmt: str, size: tuple[int, int]) -> None:
    """INT8 reduces by an integer box filter first (Pillow's ``reducing_gap``) and, for JPEG, decodes in draft mode:
    same bucket and sizes as FP32, arrays close (bounds about 3x the measured mean difference; measured on these
    photographs: see docs/runtime-internals.md)."""
    for name in ("astronaut", "china"):
        data = photo_at(name, *size, fmt)
        fp32, int8 = decode_image(data, 0, FP32), decode_image(data, 0, INT8)
        assert int8.bucket == fp32.bucket and (int8.width, int8.height) == size
        diff = np.abs(int8.array - fp32.array) * IMAGE_STD  # in 0..255 pixel steps
        assert float(diff.mean()) < 2.0, (name, float(diff.mean()))


def test_int8_image_data_longer_than_the_header_says_gets_pillows_answer() -> None:
    """48 rows of data under a header of 24 rows, CRCs right: both decoders give the header's rows."""
    data = bytearray(raw_png(np.asarray(photo("coffee", (64, 48))), 2))
    data[20:24] = (24).to_bytes(4, "big")
    assert assert_same_outcome(with_crcs_recomputed(bytes(data)))[0] == "array"


def test_libspng_is_called_with_its_checks_on() -> None:
    """pyspng.load decodes image data whose Adler-32 is wrong (it turns libspng's checks off); png_decode.decode
    refuses it, and gives pyspng's pixels for an intact PNG, in every format the INT8 path asks for."""
    from modalscale.runtime.model import png_decode

    assert png_decode.AVAILABLE
    damaged = _damaged()["pixel-altered-crc-recomputed"]
    assert pyspng.load(damaged).shape == (48, 64, 3)
    with pytest.raises(png_decode.SpngError, match="IDAT stream error"):
        png_decode.decode(damaged, "RGB", 64, 48)
    for mode, fmt in (("L", "L"), ("RGB", "RGB"), ("RGBA", "RGBA"), ("LA", "RGBA")):
        data = save(in_mode("rocket", mode, (40, 24)))
        assert np.array_equal(png_decode.decode(data, fmt, 40, 24), pyspng.load(data, fmt))
