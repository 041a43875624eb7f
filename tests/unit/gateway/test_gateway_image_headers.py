"""Image sizes from encoded headers (modalscale.gateway.image_headers) against Pillow's full decode, on the real
photographs the runtime tests use and on re-encodings of them in every supported format."""

from __future__ import annotations

import io
import struct
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
    "png-empty-chunks": photo_bytes("coffee")[:33] + b"\x00\x00\x00\x00tEXt\x00\x00\x00\x00" * (1 << 16),
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
