"""Image sizes from encoded headers (modalscale.gateway.image_headers) against Pillow's full decode, on the real
photographs the runtime tests use and on re-encodings of them in every supported format."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable

import pytest
from PIL import Image

from modalscale.gateway.image_headers import MAX_STEPS, ImageHeaderError, Steps, image_size
from modalscale.runtime.workload import photo_bytes, photo_names


def _encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **options)
    return buf.getvalue()


def _photo(name: str) -> Image.Image:
    with Image.open(io.BytesIO(photo_bytes(name))) as image:
        return image.convert("RGB")


def _with_alpha(image: Image.Image) -> Image.Image:
    rgba = image.convert("RGBA")
    rgba.putalpha(200)
    return rgba


def _exif_rotated(image: Image.Image) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: turn clockwise (the stored size is what counts for pixels)
    return _encode(image, "JPEG", exif=exif)


def _gif_frame_beyond_screen(image: Image.Image) -> bytes:
    """A GIF whose first frame extends past its logical screen (Pillow grows the size to the frame's extent)."""
    data = bytearray(_encode(image.resize((40, 30)), "GIF"))
    struct.pack_into("<HH", data, 6, 20, 10)  # logical screen 20x10, frame stays 40x30 at (0, 0)
    assert _decoded_size(bytes(data)) == (40, 30)
    return bytes(data)


RECODINGS: dict[str, Callable[[Image.Image], bytes]] = {
    "jpeg-progressive": lambda im: _encode(im, "JPEG", progressive=True, quality=80),
    "jpeg-grey": lambda im: _encode(im.convert("L"), "JPEG"),
    "jpeg-exif-orientation-6": _exif_rotated,
    "png-palette-interlaced": lambda im: _encode(im.convert("P"), "PNG", interlace=1),
    "png-rgba": lambda im: _encode(_with_alpha(im), "PNG"),
    "webp-lossy-vp8": lambda im: _encode(im, "WEBP", quality=70),
    "webp-lossless-vp8l": lambda im: _encode(im, "WEBP", lossless=True),
    "webp-alpha-vp8x": lambda im: _encode(_with_alpha(im), "WEBP", quality=70),
    "webp-exif-vp8x": lambda im: _encode(im, "WEBP", exif=b"Exif\x00\x00II*\x00\x08\x00\x00\x00\x00\x00"),
    "gif": lambda im: _encode(im, "GIF"),
    "gif-frame-beyond-screen": _gif_frame_beyond_screen,
    "bmp": lambda im: _encode(im, "BMP"),
}


def _decoded_size(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return image.size


@pytest.mark.parametrize("name", photo_names())
def test_size_of_every_shipped_photograph_equals_pillows_decoded_size(name: str) -> None:
    data = photo_bytes(name)
    fmt, width, height = image_size(data)
    assert (width, height) == _decoded_size(data)
    assert fmt in ("PNG", "JPEG")


@pytest.mark.parametrize("recoding", sorted(RECODINGS))
@pytest.mark.parametrize("name", ["chelsea", "rocket"])
def test_size_of_each_format_equals_pillows_decoded_size(name: str, recoding: str) -> None:
    photo = _photo(name)
    # an odd size, so that a swapped or off-by-one side shows
    data = RECODINGS[recoding](photo.resize((photo.width - 17, photo.height - 6)))
    assert image_size(data)[1:] == _decoded_size(data)
    assert image_size(memoryview(data))[1:] == _decoded_size(data)


def test_webp_sides_up_to_the_format_limit_are_read_without_loss() -> None:
    wide = _encode(Image.new("RGB", (16383, 2)), "WEBP", lossless=True)
    assert image_size(wide)[1:] == (16383, 2)
    assert image_size(_encode(Image.new("RGB", (3, 16383)), "WEBP", quality=50))[1:] == (3, 16383)


def test_top_down_bmp_counts_its_absolute_height() -> None:
    data = bytearray(_encode(Image.new("RGB", (7, 5)), "BMP"))
    struct.pack_into("<i", data, 22, -5)
    assert image_size(bytes(data))[1:] == (7, 5) == _decoded_size(bytes(data))


@pytest.mark.parametrize("name", photo_names())
def test_every_truncation_inside_the_header_is_refused(name: str) -> None:
    data = photo_bytes(name)
    cut = data.index(b"IDAT") + 4 if data.startswith(b"\x89PNG") else _jpeg_scan_start(data)
    for length in range(0, cut, max(1, cut // 97)):
        with pytest.raises(ImageHeaderError) as caught:
            image_size(data[:length])
        assert caught.value.reason in ("CorruptImageHeader", "UnsupportedImageFormat"), length
    # once the header is whole, the size is known (the pixels are the replica's business)
    assert image_size(data[:cut + 1024])[1:] == _decoded_size(data)


def _jpeg_scan_start(data: bytes) -> int:
    """Offset just past the SOS segment (where the entropy-coded data starts): a plain walk of the segments (the
    bytes FF DA also occur inside APP segments, e.g. an embedded thumbnail)."""
    pos = 2
    while data[pos + 1] != 0xDA:
        assert data[pos] == 0xFF
        pos += 2 + struct.unpack_from(">H", data, pos + 2)[0]
    return pos + 2 + struct.unpack_from(">H", data, pos + 2)[0]


@pytest.mark.parametrize("recoding", ["webp-lossy-vp8", "webp-lossless-vp8l", "webp-alpha-vp8x", "gif", "bmp"])
def test_truncated_headers_of_other_formats_are_refused(recoding: str) -> None:
    data = RECODINGS[recoding](_photo("coffee").resize((64, 48)))
    for length in (4, 12, 20, 25):
        with pytest.raises(ImageHeaderError, match="header|not a JPEG") as caught:
            image_size(data[:length])
        assert caught.value.reason in ("CorruptImageHeader", "UnsupportedImageFormat")


@pytest.mark.parametrize(("data", "reason", "match"), [
    (b"", "UnsupportedImageFormat", "not a JPEG, PNG, WebP, GIF or BMP"),
    (b"hello, world", "UnsupportedImageFormat", "first bytes 68656c6c"),
    (b"II*\x00" + bytes(60), "UnsupportedImageFormat", "not a JPEG"),  # TIFF
    (b"\xff\xd8\xff\xd9", "CorruptImageHeader", "EOI"),
    (b"\xff\xd8\xff\xda\x00\x02", "CorruptImageHeader", "no frame header"),
], ids=["empty", "text", "tiff", "jpeg-eoi-only", "jpeg-sos-without-sof"])
def test_bytes_that_are_no_supported_image_are_refused_with_a_reason(data: bytes, reason: str, match: str) -> None:
    with pytest.raises(ImageHeaderError, match=match) as caught:
        image_size(data)
    assert caught.value.reason == reason


def test_png_with_a_broken_ihdr_crc_is_refused_as_pillow_refuses_it() -> None:
    data = bytearray(photo_bytes("coffee"))
    data[20] ^= 0x01  # width's low byte: the IHDR CRC no longer matches
    with pytest.raises(ImageHeaderError, match="CRC") as caught:
        image_size(bytes(data))
    assert caught.value.reason == "CorruptImageHeader"
    with pytest.raises(Image.UnidentifiedImageError):  # Pillow's PNG plugin: "broken PNG file"
        Image.open(io.BytesIO(bytes(data)))


def test_zero_sized_image_is_refused() -> None:
    data = bytearray(_encode(Image.new("RGB", (5, 5)), "GIF"))
    struct.pack_into("<HH", data, 6, 0, 0)
    struct.pack_into("<HH", data, data.index(b",") + 5, 0, 0)
    with pytest.raises(ImageHeaderError, match="zero size"):
        image_size(bytes(data))


CRAFTED = {
    "jpeg-junk": b"\xff\xd8\xff\xe0\x00\x02" + bytes(1 << 20),
    "jpeg-fill": b"\xff\xd8" + b"\xff" * (1 << 20),
    "png-empty-chunks": photo_bytes("coffee")[:33] + (b"\x00\x00\x00\x00tEXt" + struct.pack(">I", zlib.crc32(b"tEXt"))
                                                      ) * (1 << 16),
    "gif-tiny-sub-blocks": b"GIF89a\x01\x00\x01\x00\x00\x00\x00\x21\xfe" + b"\x01a" * (1 << 18),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_headers_that_would_take_a_loop_turn_per_few_bytes_are_refused(name: str) -> None:
    steps = Steps()
    with pytest.raises(ImageHeaderError, match="too many steps") as caught:
        image_size(CRAFTED[name], steps)
    assert caught.value.reason == "CorruptImageHeader"
    assert steps.left < 0


def test_the_step_budget_is_shared_by_the_images_of_a_request() -> None:
    jpeg = photo_bytes("rocket")
    used = MAX_STEPS - _left_after(jpeg)
    steps = Steps(limit=used + used // 2)
    image_size(jpeg, steps)
    with pytest.raises(ImageHeaderError, match="too many steps"):
        image_size(jpeg, steps)
    assert MAX_STEPS // used >= 500  # a request of hundreds of real JPEGs fits in the default budget


def _left_after(data: bytes) -> int:
    steps = Steps()
    image_size(data, steps)
    return steps.left


def _saved(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (37, 23), (200, 30, 60)).save(out, fmt)
    return out.getvalue()


@pytest.mark.parametrize("case", ["jpeg-ff00-before-a-segment", "gif-stray-byte-before-the-image"])
def test_bytes_pillow_skips_between_blocks_are_skipped_not_refused(case: str) -> None:
    """Found by an adversarial probe (6 Dec 2026): Pillow opens and loads both, at 37 x 23; the gateway answered
    400 (``CorruptImageHeader``), refusing an image the replica decodes."""
    if case.startswith("jpeg"):
        jpg = _saved("JPEG")
        data = jpg[:2] + b"\xff\x00" + jpg[2:]
    else:
        gif = _saved("GIF")
        d = gif.index(b",")
        data = gif[:d] + b"\x00" + gif[d:]
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        assert im.size == (37, 23)
    assert image_size(data)[1:] == (37, 23)


# ---- headers the runtime refuses: found by an adversarial probe (6 Dec 2026); each reached a replica, which refused it


def _png_chunk(kind: bytes, body: bytes, crc: int | None = None) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) if crc is None
                                                                     else crc)


def _riff(*chunks: bytes) -> bytes:
    body = b"WEBP" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _riff_chunk(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("<I", len(body)) + body + (b"\x00" if len(body) % 2 else b"")


def _vp8x(width: int, height: int, flags: int = 0) -> bytes:
    return _riff_chunk(b"VP8X", bytes([flags, 0, 0, 0]) + (width - 1).to_bytes(3, "little")
                       + (height - 1).to_bytes(3, "little"))


def _webp_still_chunk() -> bytes:
    """The one image chunk (``VP8 ``) of a 37 x 23 lossy WebP, whole."""
    data = _saved("WEBP")
    assert data[12:16] == b"VP8 " and len(data) == 20 + struct.unpack_from("<I", data, 16)[0] + (data[16] & 1)
    return data[12:]


def _jpeg_with(segment: bytes) -> bytes:
    jpg = _saved("JPEG")
    return jpg[:2] + segment + jpg[2:]


def _jpeg_two_sofs() -> bytes:
    jpg = _saved("JPEG")
    i = jpg.index(b"\xff\xc0")
    end = i + 2 + struct.unpack_from(">H", jpg, i + 2)[0]
    second = bytearray(jpg[i:end])
    struct.pack_into(">HH", second, 5, 50, 60)
    return jpg[:end] + bytes(second) + jpg[end:]


def _gif_cut(after_descriptor: int) -> bytes:
    gif = _saved("GIF")
    return gif[:gif.index(b",") + after_descriptor]


JPEG_LOSSLESS = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffc3000b080003000501011100ffc400160001010100000000000000000000000000030008"
    "ffda0008010100010000cfeeeef3bbbceeefffd9")
"""A 5 x 3 grey lossless (SOF3, Huffman) JPEG, written by libjpeg-turbo 3.2 (``jpeg_enable_lossless``); the runtime
decodes it."""
JPEG_ARITHMETIC = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300080606070605080707070909080a0c140d0c0b0b0c1912130f141d1a1f1e1d1a"
    "1c1c20242e2720222c231c1c2837292c30313434341f27393d38323c2e333432ffc9000b080003000501011100ffcc000600101005ffda0008"
    "010100003f00ff00d1dd4ce9dcffd9")
"""A 5 x 3 grey sequential arithmetic-coded (SOF9) JPEG, written by libjpeg-turbo 3.2 (``arith_code``); the runtime
decodes it."""


def _with_sof(jpg: bytes, marker: int) -> bytes:
    """``jpg`` with its frame header's marker replaced by ``marker`` (the rest of the file unchanged)."""
    i = next(i for i in range(2, len(jpg)) if jpg[i] == 0xFF and jpg[i + 1] in (0xC0, 0xC2, 0xC3, 0xC9))
    return jpg[:i + 1] + bytes([marker]) + jpg[i + 2:]


def _jpeg_dqt(body: bytes) -> bytes:
    """A 37 x 23 JPEG with an extra DQT segment of ``body`` before its own."""
    jpg = _saved("JPEG")
    i = jpg.index(b"\xff\xdb")
    return jpg[:i] + b"\xff\xdb" + struct.pack(">H", 2 + len(body)) + body + jpg[i:]


def _jpeg_first_dqt_cut_by_one() -> bytes:
    """The JPEG's first DQT segment (one 8-bit table, 65 bytes) with its length and body one byte shorter."""
    jpg = _saved("JPEG")
    i = jpg.index(b"\xff\xdb")
    assert struct.unpack_from(">H", jpg, i + 2)[0] == 67
    return jpg[:i] + b"\xff\xdb\x00\x42" + jpg[i + 4:i + 68] + jpg[i + 69:]


def _png_with(chunk: bytes, image: Image.Image | None = None) -> bytes:
    """A 37 x 23 PNG (of ``image``, default RGB) with ``chunk`` right after its IHDR."""
    out = io.BytesIO()
    (image or Image.new("RGB", (37, 23), (200, 30, 60))).save(out, "PNG")
    png = out.getvalue()
    return png[:33] + chunk + png[33:]


def _palette_png_with_trns(alphas: int | bytes) -> bytes:
    """A 37 x 23 palette PNG of 4 colours with a tRNS chunk before its IDAT (after PLTE): ``alphas`` values of 0x80,
    or that body."""
    image = Image.new("P", (37, 23), 1)
    image.putpalette([10, 20, 30] * 4)
    out = io.BytesIO()
    image.save(out, "PNG")
    png = out.getvalue()
    at = png.index(b"IDAT") - 4
    body = alphas if isinstance(alphas, bytes) else b"\x80" * alphas
    return png[:at] + _png_chunk(b"tRNS", body) + png[at:]


def _gif_with(offset: int, value: bytes) -> bytes:
    """The 37 x 23 GIF with ``value`` written at ``offset`` after the start of its first image descriptor."""
    gif = bytearray(_saved("GIF"))
    at = gif.index(b",") + offset
    gif[at:at + len(value)] = value
    return bytes(gif)


def _gif_lzw_code_size(bits: int) -> bytes:
    """The 37 x 23 GIF with its first frame's LZW minimum code size byte set to ``bits``."""
    gif = _saved("GIF")
    d = gif.index(b",")
    flags = gif[d + 9]
    at = d + 10 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    return gif[:at] + bytes([bits]) + gif[at + 1:]


def _gif_extension(ext: bytes) -> bytes:
    """The 37 x 23 GIF with the extension block ``ext`` (introducer, label, sub-blocks) before its image descriptor."""
    gif = _saved("GIF")
    d = gif.index(b",")
    return gif[:d] + ext + gif[d:]


def _gif_frames(gif: bytes) -> list[int]:
    """Offsets of the image descriptors of a well-formed GIF (each block walked as the GIF89a spec has it)."""
    pos, out = 13 + (3 << ((gif[10] & 7) + 1) if gif[10] & 0x80 else 0), []
    while gif[pos] != 0x3B:
        if gif[pos] == 0x2C:
            out.append(pos)
            pos += 10 + (3 << ((gif[pos + 9] & 7) + 1) if gif[pos + 9] & 0x80 else 0)  # to the LZW code size
        else:
            pos += 1  # to the label
        pos += 1
        while gif[pos]:
            pos += gif[pos] + 1
        pos += 1
    return out


def _gif_second_frame(offset: int | None, value: bytes = b"", cut: bool = False) -> bytes:
    """A 40 x 30 GIF of two frames with ``value`` written at ``offset`` after the start of its second image descriptor
    (``offset`` None: at its LZW code size), or cut there when ``cut``."""
    gif = _animated("GIF")
    d = _gif_frames(gif)[1]
    at = d + (offset if offset is not None else 10 + (3 << ((gif[d + 9] & 7) + 1) if gif[d + 9] & 0x80 else 10))
    return gif[:at] if cut else gif[:at] + value + gif[at + len(value):]


GIF_LZW_CODE_SIZE_12 = bytes.fromhex(
    "47494638396105000400810000000000ffffffff000000ff002c0000000005000400000c24001000040001000002800000000140000080002000"
    "004000100000200008000010000220003b")
"""A 5 x 4 GIF whose LZW minimum code size is 12 (the largest Pillow's decoder takes): clear, 20 literal 13-bit codes
(0, 1, 2, 0, ...) and end, written by hand; Pillow decodes it to those pixels."""


def _with_riff_size(webp: bytes, delta: int) -> bytes:
    return webp[:4] + struct.pack("<I", struct.unpack_from("<I", webp, 4)[0] + delta) + webp[8:]


def _webp_animation(*before_the_frame: bytes, flags: int = 0x02) -> bytes:
    """A 37 x 23 animated WebP: ``VP8X`` with ``flags``, the chunks ``before_the_frame``, one ``ANMF`` frame."""
    frame = _riff_chunk(b"ANMF", bytes(6) + (36).to_bytes(3, "little") + (22).to_bytes(3, "little") + bytes(4)
                        + _webp_still_chunk())
    return _riff(_vp8x(37, 23, flags=flags), *before_the_frame, frame)


def _webp_alpha_chunks() -> bytes:
    """The ``ALPH`` and ``VP8 `` chunks of a 37 x 23 lossy WebP with alpha (Pillow writes them after a ``VP8X``)."""
    data = _encode(Image.new("RGBA", (37, 23), (200, 30, 60, 128)), "WEBP")
    assert data[12:16] == b"VP8X" and data[30:34] == b"ALPH"
    return data[30:]


def _frame(x: int = 0, y: int = 0) -> bytes:
    """An ``ANMF`` chunk at offset (``x``, ``y``) (even pixels) holding the 37 x 23 still image."""
    return _riff_chunk(b"ANMF", (x // 2).to_bytes(3, "little") + (y // 2).to_bytes(3, "little")
                       + (36).to_bytes(3, "little") + (22).to_bytes(3, "little") + bytes(4) + _webp_still_chunk())


def _cut_chunk(kind: bytes = b"EXIF") -> bytes:
    """A chunk header that says 100 bytes, with 10 after it: placed last, the RIFF size cuts it."""
    return kind + struct.pack("<I", 100) + bytes(10)


REFUSED_BY_THE_RUNTIME: dict[str, Callable[[], bytes]] = {
    "png-bad-crc-in-a-chunk-before-idat": lambda: _saved("PNG")[:33] + _png_chunk(b"tEXt", b"k\x00v", crc=1234)
    + _saved("PNG")[33:],
    "webp-vp8x-without-an-image": lambda: _riff(_vp8x(37, 23)),
    "webp-vp8x-canvas-larger-than-its-image": lambda: _riff(_vp8x(100, 90), _webp_still_chunk()),
    "webp-vp8x-animation-frame-outside-the-canvas": lambda: _riff(
        _vp8x(37, 23, flags=0x02), _riff_chunk(b"ANIM", bytes(6)),
        _riff_chunk(b"ANMF", (4).to_bytes(3, "little") + bytes(3) + (36).to_bytes(3, "little")
                    + (22).to_bytes(3, "little") + bytes(4) + _webp_still_chunk())),
    **{f"jpeg-marker-{m:02x}-before-sos": (lambda m=m: _jpeg_with(bytes([0xFF, m, 0, 4, 0, 0])))
       for m in (0x01, 0x02, 0x30, 0xBF, 0xC8, 0xDE, 0xDF, 0xF0, 0xFD)},
    "jpeg-two-sofs": _jpeg_two_sofs,
    "gif-cut-after-the-image-descriptor": lambda: _gif_cut(10),
    # found by review (7 Dec 2026): each passed the gateway, and the runtime refused it
    "jpeg-second-soi-read-as-a-segment": lambda: _jpeg_with(b"\xff\xd8\x00\x02"),  # libjpeg: "two SOI markers"
    "jpeg-dqt-cut-short": _jpeg_first_dqt_cut_by_one,  # Pillow's open: "bad quantization table marker"
    "jpeg-dqt-16-bit-table-of-64-bytes": lambda: _jpeg_dqt(b"\x10" + b"\x01" * 64),
    "jpeg-dqt-index-4": lambda: _jpeg_dqt(b"\x04" + b"\x01" * 64),  # libjpeg: "Bogus DQT index 4"
    **{f"jpeg-sof{m - 0xC0}": (lambda m=m, base=base: _with_sof(base(), m))  # libjpeg: "Unsupported JPEG process" or
       for m, base in ((0xC5, lambda: _saved("JPEG")), (0xC6, lambda: _encode(Image.new("RGB", (37, 23)), "JPEG",
                                                                                progressive=True)),
                       (0xC7, lambda: JPEG_LOSSLESS), (0xCB, lambda: JPEG_LOSSLESS),  # "arithmetic coding is not
                       (0xCD, lambda: JPEG_ARITHMETIC), (0xCE, lambda: JPEG_ARITHMETIC),  # implemented"
                       (0xCF, lambda: JPEG_LOSSLESS))},
    "png-srgb-empty": lambda: _png_with(_png_chunk(b"sRGB", b"")),  # Pillow's open: "Truncated sRGB chunk"
    "png-phys-8-bytes": lambda: _png_with(_png_chunk(b"pHYs", bytes(8))),
    "png-actl-7-bytes": lambda: _png_with(_png_chunk(b"acTL", bytes(7))),
    "png-trns-rgb-5-bytes": lambda: _png_with(_png_chunk(b"tRNS", bytes(5))),
    "png-trns-grey-1-byte": lambda: _png_with(_png_chunk(b"tRNS", bytes(1)), Image.new("L", (37, 23))),
    "png-iend-before-idat": lambda: _png_with(_png_chunk(b"IEND", b"")),  # Pillow: "cannot load this image"
    # found by review: the runtime's RGB conversion raised a bare ValueError ("palette index out of range") that
    # failed the whole batch; decode_image now refuses it as CorruptImage
    "png-palette-trns-of-257-alphas": lambda: _palette_png_with_trns(257),
    "png-palette-trns-one-transparent-index-280": lambda: _palette_png_with_trns(b"\xff" * 280 + b"\0" + b"\xff" * 5),
    "gif-lzw-code-size-13": lambda: _gif_lzw_code_size(13),  # Pillow's decoder: "codec configuration error"
    "gif-first-frame-0x0": lambda: _gif_with(5, bytes(4)),  # Pillow: "tile cannot extend outside image"
    # Pillow's open reads a graphic control extension's first sub-block as flags, delay (2 bytes) and a transparent
    # index when the flags' bit 0 says so: shorter, it fails (struct.error / IndexError: "cannot identify"); and
    # after an extension's first sub-block, if that is the terminator, it reads sub-blocks up to one more terminator
    # (the image descriptor that follows is read as the length of one)
    "gif-graphic-control-extension-of-2-bytes": lambda: _gif_extension(b"\x21\xf9\x02\x00\x00\x00"),
    "gif-graphic-control-extension-of-3-bytes-with-transparency": lambda: _gif_extension(
        b"\x21\xf9\x03\x01\x00\x00\x00"),
    "gif-graphic-control-extension-without-a-sub-block": lambda: _gif_extension(b"\x21\xf9\x00"),
    "gif-application-extension-without-a-sub-block": lambda: _gif_extension(b"\x21\xff\x00"),
    "gif-netscape-extension-without-its-loop-sub-block": lambda: _gif_extension(b"\x21\xff\x0bNETSCAPE2.0\x00"),
    "webp-riff-size-beyond-the-data": lambda: _with_riff_size(_saved("WEBP"), 2),  # the demuxer: partial file
    "webp-riff-size-cuts-the-image-chunk": lambda: _with_riff_size(_saved("WEBP"), -2),
    "webp-riff-chunk-4-bytes-after-the-image": lambda: _with_riff_size(_saved("WEBP") + bytes(4), 4),
    "webp-vp8x-animation-without-anim": lambda: _webp_animation(),  # the demuxer: 'ANIM' precedes frames
    "webp-vp8x-anim-chunk-of-4-bytes": lambda: _webp_animation(_riff_chunk(b"ANIM", bytes(4))),
    **{f"webp-vp8x-reserved-flag-{flag:02x}": (lambda flag=flag: _riff(_vp8x(37, 23, flags=flag), _webp_still_chunk()))
       for flag in (0x01, 0x40, 0x80)},
    # the cases the note of 7 Dec 2026 left (libwebp's WebPGetFeatures and WebPDemux refuse each)
    "webp-vp8x-chunk-of-8-bytes": lambda: _riff(_riff_chunk(b"VP8X", _vp8x(37, 23)[8:16]), _webp_still_chunk()),
    "webp-vp8x-chunk-of-12-bytes": lambda: _riff(_riff_chunk(b"VP8X", _vp8x(37, 23)[8:] + bytes(2)),
                                                 _webp_still_chunk()),
    "webp-simple-chunk-after-the-image-cut-by-the-riff-end": lambda: _riff(_webp_still_chunk(), _cut_chunk()),
    "webp-vp8x-still-chunk-after-the-image-cut-by-the-riff-end": lambda: _riff(_vp8x(37, 23), _webp_still_chunk(),
                                                                               _cut_chunk()),
    "webp-vp8x-still-4-bytes-after-the-last-chunk": lambda: _riff(_vp8x(37, 23), _webp_still_chunk(), bytes(4)),
    "webp-vp8x-still-two-images": lambda: _riff(_vp8x(37, 23), _webp_still_chunk(), _webp_still_chunk()),
    "webp-vp8x-second-vp8x": lambda: _riff(_vp8x(37, 23), _vp8x(37, 23), _webp_still_chunk()),
    "webp-vp8x-alph-without-an-image": lambda: _riff(_vp8x(37, 23, flags=0x10), _riff_chunk(b"ALPH", bytes(4)),
                                                     _riff_chunk(b"EXIF", bytes(4)), _webp_still_chunk()),
    "webp-animation-second-frame-outside-the-canvas": lambda: _riff(
        _vp8x(37, 23, flags=0x02), _riff_chunk(b"ANIM", bytes(6)), _frame(), _frame(2, 0)),
    "webp-animation-image-chunk-outside-its-frames": lambda: _riff(
        _vp8x(37, 23, flags=0x02), _riff_chunk(b"ANIM", bytes(6)), _frame(), _webp_still_chunk()),
    "webp-animation-chunk-after-the-frames-cut-by-the-riff-end": lambda: _riff(
        _vp8x(37, 23, flags=0x02), _riff_chunk(b"ANIM", bytes(6)), _frame(), _frame(), _cut_chunk(b"XMP ")),
    "webp-animation-anmf-of-12-bytes": lambda: _riff(
        _vp8x(37, 23, flags=0x02), _riff_chunk(b"ANIM", bytes(6)), _frame(), _riff_chunk(b"ANMF", bytes(12))),
}


@pytest.mark.parametrize("case", sorted(REFUSED_BY_THE_RUNTIME))
def test_a_header_the_runtime_refuses_is_refused_by_the_gateway(case: str) -> None:
    """Issue 19, admission: undecodable image headers get 400 at the gateway and cost a replica nothing. The
    runtime's own decode (``decode_image``, Pillow and libjpeg / libwebp behind it) is asked first, so this fails
    if a Pillow upgrade starts reading one of them."""
    from modalscale.runtime.model.inputs import RequestError, decode_image
    from modalscale.runtime.model.settings import ModelSettings

    data = REFUSED_BY_THE_RUNTIME[case]()
    with pytest.raises(RequestError):
        decode_image(data, 0, ModelSettings())
    with pytest.raises(ImageHeaderError) as caught:
        image_size(data)
    assert caught.value.reason == "CorruptImageHeader", caught.value


def _animated(fmt: str, **options: object) -> bytes:
    frames = [Image.new("RGB", (40, 30), (10, 200, 30)), Image.new("RGB", (40, 30), (200, 10, 30))]
    out = io.BytesIO()
    frames[0].save(out, fmt, save_all=True, append_images=frames[1:], duration=100, **options)
    return out.getvalue()


READ_BY_THE_RUNTIME: dict[str, Callable[[], bytes]] = {
    "png-bad-crc-in-idat": lambda: (lambda p, i: p[:i] + bytes([p[i] ^ 0xFF]) + p[i + 1:])(
        _saved("PNG"), _saved("PNG").index(b"IEND") - 5),  # IDAT's CRC: Pillow checks none before the decode
    "webp-vp8x-canvas-equal-to-its-image": lambda: _riff(_vp8x(37, 23), _webp_still_chunk()),
    "png-palette-trns-of-256-alphas-for-4-colours": lambda: _palette_png_with_trns(256),
    # found by review: Pillow reads one 0x00 among 0xFF bytes as one transparent index, whatever the length
    "png-palette-trns-one-transparent-index-in-300-bytes": lambda: _palette_png_with_trns(b"\0" + b"\xff" * 299),
    "webp-animated": lambda: _animated("WEBP", loop=0),
    "webp-animated-lossless": lambda: _animated("WEBP", lossless=True),
    "apng": lambda: _animated("PNG"),
    "gif-animated": lambda: _animated("GIF"),
    "jpeg-dnl-before-sos": lambda: _jpeg_with(b"\xff\xdc\x00\x04\x00\x17"),
    # found by review: the demuxer sizes an animation frame by its bitstream (37 x 23 at 26,24 fits 64 x 48), not by
    # the 30 x 30 its ANMF header says
    "webp-animation-frame-header-larger-than-its-bitstream": lambda: _riff(
        _vp8x(64, 48, flags=0x02), _riff_chunk(b"ANIM", bytes(6)),
        _riff_chunk(b"ANMF", (13).to_bytes(3, "little") + (12).to_bytes(3, "little") + (29).to_bytes(3, "little")
                    + (29).to_bytes(3, "little") + bytes(4) + _webp_still_chunk())),
    # the neighbours of the 7 Dec 2026 cases, which the runtime reads
    "jpeg-lossless-sof3": lambda: JPEG_LOSSLESS,
    "jpeg-arithmetic-sof9": lambda: JPEG_ARITHMETIC,
    "jpeg-empty-dqt": lambda: _jpeg_dqt(b""),
    "jpeg-dqt-16-bit-table-index-3": lambda: _jpeg_dqt(b"\x13" + b"\x00\x01" * 64),
    "png-srgb-2-bytes": lambda: _png_with(_png_chunk(b"sRGB", bytes(2))),
    "png-trns-grey-2-bytes": lambda: _png_with(_png_chunk(b"tRNS", bytes(2)), Image.new("L", (37, 23))),
    "png-trns-rgba-1-byte": lambda: _png_with(_png_chunk(b"tRNS", bytes(1)), Image.new("RGBA", (37, 23))),
    "gif-lzw-code-size-12": lambda: GIF_LZW_CODE_SIZE_12,
    # the neighbours of the GIF extensions the runtime refuses
    "gif-graphic-control-extension-of-3-bytes": lambda: _gif_extension(b"\x21\xf9\x03\x00\x00\x00\x00"),
    "gif-graphic-control-extension-of-4-bytes-with-transparency": lambda: _gif_extension(
        b"\x21\xf9\x04\x01\x00\x00\x05\x00"),
    "gif-graphic-control-extension-without-a-sub-block-and-a-second-terminator": lambda: _gif_extension(
        b"\x21\xf9\x00\x00"),
    "gif-comment-extension-without-a-sub-block": lambda: _gif_extension(b"\x21\xfe\x00"),
    "gif-netscape-extension-of-one-byte-loop-sub-block": lambda: _gif_extension(
        b"\x21\xff\x0bNETSCAPE2.0\x01\x01\x00"),
    # the runtime decodes a GIF's first frame only (Pillow's open reads up to it, and load decodes it): the faults of
    # a later frame are the runtime's to ignore too, and refusing them would refuse GIFs it serves
    "gif-second-frame-cut-inside-its-descriptor": lambda: _gif_second_frame(5, cut=True),
    "gif-second-frame-cut-inside-its-data": lambda: _gif_second_frame(None, cut=True),
    "gif-second-frame-0x0": lambda: _gif_second_frame(5, bytes(4)),
    "gif-second-frame-lzw-code-size-13": lambda: _gif_second_frame(None, b"\x0d"),
    "gif-second-frame-outside-the-logical-screen": lambda: _gif_second_frame(1, struct.pack("<HH", 1000, 1000)),
    "gif-extension-cut-after-the-first-frame": lambda: (lambda g: g[:_gif_frames(g)[1]] + b"\x21\xf9\x04\x00")(
        _animated("GIF")),
    "webp-bytes-after-the-riff-chunk": lambda: _saved("WEBP") + bytes(5),
    "webp-riff-chunk-a-chunk-header-after-the-image": lambda: _with_riff_size(_saved("WEBP") + bytes(8), 8),
    "webp-anim-chunk-of-5-bytes": lambda: _webp_animation(_riff_chunk(b"ANIM", bytes(5))),
    "webp-vp8x-reserved-bytes-after-the-flags": lambda: _riff(_vp8x(37, 23)[:9] + b"\xff" * 3 + _vp8x(37, 23)[12:],
                                                              _webp_still_chunk()),
    # the neighbours of the cases above: the demuxer reads one chunk after a simple file's image, and no more
    "webp-simple-two-chunks-after-the-image-the-second-cut": lambda: _riff(
        _webp_still_chunk(), _riff_chunk(b"ABCD", bytes(4)), _cut_chunk()),
    "webp-simple-chunk-after-the-image": lambda: _riff(_webp_still_chunk(), _riff_chunk(b"EXIF", bytes(10))),
    # an ALPH there is read too: the demuxer drops alpha from a file without the VP8X alpha flag
    "webp-simple-alph-after-the-image": lambda: _riff(_webp_still_chunk(), _riff_chunk(b"ALPH", bytes(4))),
    "webp-vp8x-still-chunks-after-the-image": lambda: _riff(
        _vp8x(37, 23), _webp_still_chunk(), _riff_chunk(b"EXIF", bytes(10)), _riff_chunk(b"XMP ", b"x")),
    "webp-vp8x-alph-then-vp8": lambda: _riff(_vp8x(37, 23, flags=0x10), _webp_alpha_chunks()),
    "webp-animation-of-three-frames-and-metadata-after": lambda: _riff(
        _vp8x(41, 27, flags=0x02), _riff_chunk(b"ANIM", bytes(6)), _frame(), _frame(2, 4), _frame(4, 2),
        _riff_chunk(b"XMP ", bytes(5))),
}


@pytest.mark.parametrize("case", sorted(READ_BY_THE_RUNTIME))
def test_the_valid_neighbours_of_those_headers_are_read_as_the_runtime_reads_them(case: str) -> None:
    from modalscale.runtime.model.inputs import decode_image
    from modalscale.runtime.model.settings import ModelSettings

    data = READ_BY_THE_RUNTIME[case]()
    decoded = decode_image(data, 0, ModelSettings())
    assert image_size(data)[1:] == (decoded.width, decoded.height) == _decoded_size(data)


def _opens(data: bytes) -> bool:
    """Whether Pillow's open (the runtime's first step) reads the header."""
    try:
        Image.open(io.BytesIO(data)).close()
    except Exception:  # any refusal of Pillow's is the finding
        return False
    return True


def _reads(data: bytes) -> bool:
    try:
        image_size(data)
    except ImageHeaderError:
        return False
    return True


def test_every_png_ihdr_mode_and_filter_is_read_exactly_when_pillow_opens_it() -> None:
    """Found by review: an IHDR with a bit depth / colour type pair PNG does not define, or a filter method other
    than 0, passed the gateway and Pillow's open refused it at the replica."""
    base = _saved("PNG")
    wrong = []
    for depth in range(17):
        for colour in range(8):
            for filter_method in (0, 1):
                body = struct.pack(">IIBBBBB", 37, 23, depth, colour, 0, filter_method, 0)
                data = base[:12] + b"IHDR" + body + struct.pack(">I", zlib.crc32(b"IHDR" + body)) + base[33:]
                if _reads(data) != _opens(data):
                    wrong.append((depth, colour, filter_method, _opens(data)))
    assert not wrong, wrong


def test_jpeg_sample_precision_and_component_count_are_read_exactly_when_pillow_opens_them() -> None:
    base = _saved("JPEG")
    sof = base.index(b"\xff\xc0")
    wrong = []
    for offset, values in ((4, range(17)), (9, range(8))):  # precision; component count
        for value in values:
            data = bytearray(base)
            data[sof + offset] = value
            if _reads(bytes(data)) != _opens(bytes(data)):
                wrong.append((offset, value, _opens(bytes(data))))
    assert not wrong, wrong


def _decodes(data: bytes) -> bool:
    """Whether the runtime's ``decode_image`` reads ``data``."""
    from modalscale.runtime.model.inputs import RequestError, decode_image
    from modalscale.runtime.model.settings import ModelSettings

    try:
        decode_image(data, 0, ModelSettings())
    except RequestError:
        return False
    return True


def test_every_short_gif_extension_before_the_first_frame_is_read_exactly_when_the_runtime_decodes_it() -> None:
    """Found by review (issue 19): an extension's first sub-block of each length 0-5 (flags byte 0 or 1), with and
    without a second terminator, under each label Pillow treats apart (graphic control, comment, application, the
    NETSCAPE loop, another): the gateway refuses exactly those the runtime's ``decode_image`` refuses."""
    wrong = []
    for label, lead in ((0xF9, b""), (0xFE, b""), (0xFF, b""), (0xFF, b"NETSCAPE2.0"), (0x01, b"")):
        for length in range(6):
            for flags in (0, 1):
                first = (lead + bytes([flags]) + bytes(length))[:length] if length else b""
                for tail in (b"\x00", b"\x00\x00"):
                    ext = bytes([0x21, label]) + (bytes([len(first)]) + first if first else b"") + tail
                    if lead and first:  # the NETSCAPE block: its loop sub-block of ``length`` bytes follows
                        ext = bytes([0x21, label, 11]) + lead + bytes([length]) + bytes([1]) * length + tail
                    data = _gif_extension(ext)
                    if _reads(data) != _decodes(data):
                        wrong.append((hex(label), lead, length, flags, tail, _decodes(data)))
    assert not wrong, wrong


def test_a_long_animation_is_read_without_refusal_and_leaves_half_the_budget_for_the_next_images() -> None:
    """An animated WebP's chunks after its first frame are walked (to find one the RIFF size cuts) only while more
    than half the request's step budget is left: 300 frames against a budget of 100 are not refused for their number,
    the walk stops at half the budget, and the next image's header is still read."""
    animation = _riff(_vp8x(37, 23, flags=0x02), _riff_chunk(b"ANIM", bytes(6)), *[_frame()] * 300)
    steps = Steps(limit=100)
    assert image_size(animation, steps) == ("WebP", 37, 23)
    assert steps.left == 50
    assert image_size(_saved("PNG"), steps) == ("PNG", 37, 23)
    short = _riff(_vp8x(37, 23, flags=0x02), _riff_chunk(b"ANIM", bytes(6)), *[_frame()] * 3, _cut_chunk())
    with pytest.raises(ImageHeaderError, match="runs past the end of its RIFF chunk"):
        image_size(short, Steps(limit=100))  # walked to its end within the budget: the cut chunk is found
