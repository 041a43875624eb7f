"""Width and height of an encoded image from its header alone (pure; no pixel decode, no Pillow).

Formats: JPEG (baseline, progressive, lossless, arithmetic: any SOFn), PNG (IHDR, CRC checked as Pillow does),
WebP (``VP8 `` lossy, ``VP8L`` lossless, ``VP8X`` extended: the canvas size), GIF (the logical screen grown to the
first frame's extent, as Pillow reports it) and BMP (Windows and OS/2 headers; a top-down image's negative height
counts as its absolute value). The size is the stored one: an EXIF orientation 5-8 swaps what a viewer shows but not
``width * height``, the only product the gateway exports.

Why not ``PIL.Image.open(...).size`` (which also reads only the header): Pillow is not in the operator image the
gateway runs from (``Dockerfile.operator``: base dependencies only), and this reader is about 8x faster. Measured
on the six photographs of ``modalscale.runtime.workload`` (3 PNG, 3 JPEG, 451x300 to 640x512; 2000 calls each on the
shared 2-core EPYC, load 0.4-0.9): this reader 1.7-3.2 us per image (median 2.7; a JPEG walks its segments up to
SOS), ``Image.open(io.BytesIO(data)).size`` 12.9-33.5 us (median 22).
``tests/unit/gateway/test_gateway_image_headers.py`` checks the size against Pillow's full decode on every test image.

These header faults, which the runtime refuses too, are refused here, so that they cost no replica any CPU: every JPEG
segment up to the start of scan is one a decoder reads (one frame header of 8-bit samples in 1, 3 or 4 components of a
process libjpeg decodes, no second SOI, every DQT table whole with an index 0-3, no marker Pillow or libjpeg stops at),
a PNG's IHDR is one PNG defines and every chunk before IDAT has its CRC-32 right, is no IEND and is not shorter than
Pillow's open reads (sRGB 1 byte, pHYs 9, acTL 8, a grey or truecolour tRNS 2 or 6; a palette's tRNS holds at most 256
values, or names one transparent index below 256), a WebP is as long as its RIFF header says and every chunk the
demuxer reads lies inside the RIFF chunk, an extended WebP has a 10-byte VP8X with no flag libwebp does not define, one
still image or only animation frames, each frame inside its canvas, and an ANIM chunk before the first ANMF (as
libwebp's demuxer requires), and a GIF's blocks before its first image descriptor are read as Pillow's open reads them
(a graphic control extension of at least 3 bytes, 4 with a transparent colour; after the first sub-block of an extension
other than a comment, even the terminator, sub-blocks up to one more) and that descriptor is whole with its color table
and an LZW code size of at most 12, and has no zero side. A GIF's frames after the first are not walked, because the
runtime does not read them either: Pillow's open stops at the first frame's descriptor and ``decode_image`` loads that
frame only, so a later frame cut short, of zero size, with an LZW code size of 13 or outside the logical screen is
served, and refusing it here would refuse what a replica serves. Not every fault the runtime finds in a header is
checked (for example an animated WebP's chunks beyond the step budget): those, and what only the pixel decode finds (a
broken IDAT, scan or LZW stream), still reach a replica, which refuses them.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

FORMATS: Final = ("JPEG", "PNG", "WebP", "GIF", "BMP")
"""Formats :func:`image_size` reads."""

MAX_STEPS: Final = 16_384
"""Default bound of the header walk, in steps, shared by the images of a request (:class:`Steps`): a step is one JPEG
marker segment, one quantization table of a DQT segment after its first or one byte outside a segment (junk and fill
bytes, skipped one at a time as libjpeg and Pillow do), one PNG chunk before the image data, one WebP chunk, or one GIF
extension sub-block before the first frame. Real files take a few: the six workload photographs 3-5 (PNG) and 22-24
(JPEG), so a request of hundreds of images fits. A crafted file
(a JPEG of 64 MiB of junk, a PNG of millions of empty chunks) would otherwise cost a Python loop turn per 1-12 bytes
of the body. Measured, shared 2-core EPYC, per step: JPEG junk 75 ns, GIF sub-block 150 ns, PNG chunk 430 ns; and
with each chunk's CRC-32 checked (6 Dec 2026, idle machine, best of 7 walks of 16384 empty chunks): 910 ns against
630 ns without in the same run; so the bound holds a request's header walk to at most about 15 ms."""


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_MODES = frozenset({(1, 0), (2, 0), (4, 0), (8, 0), (16, 0), (8, 2), (16, 2), (1, 3), (2, 3), (4, 3), (8, 3),
                        (8, 4), (16, 4), (8, 6), (16, 6)})
"""(bit depth, colour type) pairs PNG defines (ISO/IEC 15948 11.2.2), the ones Pillow's open reads."""
_PNG_SHORTEST = {colour: {b"sRGB": 1, b"pHYs": 9, b"acTL": 8, b"tRNS": {0: 2, 2: 6}.get(colour, 0)}
                 for colour in (0, 2, 3, 4, 6)}
"""Colour type -> chunk type -> the shortest body of that chunk before IDAT that the runtime reads. Pillow's open
raises on a shorter sRGB, pHYs, acTL ("Truncated ... chunk") and on a tRNS shorter than one grey (2 bytes) or RGB (6)
sample; longer ones it reads."""
_PNG_CHUNK = struct.Struct(">I4s")
"""A PNG chunk's length and type."""
_PNG_CRC = struct.Struct(">I")
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
"""Start-of-frame markers SOF0-SOF15 (C4 is DHT, C8 is reserved JPG, CC is DAC)."""
_JPEG_STANDALONE = frozenset(range(0xD0, 0xD8))
"""Markers without a length field that Pillow's open skips before SOS (RSTn)."""
_JPEG_SOF_UNSUPPORTED = frozenset((0xC5, 0xC6, 0xC7, 0xCB, 0xCD, 0xCE, 0xCF))
"""Frame headers libjpeg-turbo (3.2, the one in Pillow's wheels) stops at when it loads: the differential (hierarchical)
processes SOF5-SOF7 and SOF13-SOF15 (``JERR_SOF_UNSUPPORTED``) and lossless arithmetic SOF11 (``JERR_ARITH_NOTIMPL``).
It decodes SOF0-SOF3 (lossless Huffman included), SOF9 and SOF10."""
_JPEG_REFUSED = (frozenset(range(0x01, 0xC0)) | {0xC8, 0xD8, 0xDE, 0xDF} | frozenset(range(0xF0, 0xFE))
                 | _JPEG_SOF_UNSUPPORTED)
"""Markers the runtime refuses before its start of scan: Pillow's open has no entry for TEM and 0x02-0xBF ("no
marker found") and stops at DHP; libjpeg (at load) stops at JPG, EXP and JPG0-JPG13 (``JERR_SOF_UNSUPPORTED``,
``JERR_UNKNOWN_MARKER``), at a second SOI (``JERR_SOI_DUPLICATE``) and at :data:`_JPEG_SOF_UNSUPPORTED`."""
_WEBP_FLAGS = 0x3E
"""VP8X flag bits libwebp defines (ICC profile 0x20, alpha 0x10, EXIF 0x08, XMP 0x04, animation 0x02): its demuxer
refuses a file that sets another bit of the flags byte (0x01, 0x40, 0x80); it ignores the three bytes after it."""
_BMP_INFO_HEADERS = frozenset((40, 52, 56, 64, 108, 124))
"""DIB header sizes with signed 32-bit sides that Pillow's BmpImagePlugin reads (12, OS/2 core, is apart)."""


class Steps:
    """A budget of header-walk steps, shared by the images of one request (:data:`MAX_STEPS`)."""

    __slots__ = ("left", "reserve")

    def __init__(self, limit: int = MAX_STEPS) -> None:
        self.left = limit
        self.reserve = limit // 2

    def spare(self) -> bool:
        """Spend one step of a walk that may stop early without refusing (a WebP's chunks after its first frame)
        while more than half the budget is left, so that such walks never starve the headers of a request's later
        images. Returns False (nothing spent) once they would."""
        if self.left <= self.reserve:
            return False
        self.left -= 1
        return True

    def take(self, fmt: str, count: int = 1) -> None:
        """Spend ``count`` steps.

        Raises:
            ImageHeaderError: The budget is spent (``CorruptImageHeader``).
        """
        self.left -= count
        if self.left < 0:
            raise _corrupt(fmt, "takes too many steps to read (junk bytes, or too many segments, chunks or blocks "
                                "before the image data)")


class ImageHeaderError(ValueError):
    """The bytes are not an image of a supported format, or its header is truncated or inconsistent.

    Attributes:
        reason: ``UnsupportedImageFormat`` or ``CorruptImageHeader``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _corrupt(fmt: str, what: str) -> ImageHeaderError:
    return ImageHeaderError("CorruptImageHeader", f"{fmt} header {what}")


def image_size(data: bytes | memoryview, steps: Steps | None = None) -> tuple[str, int, int]:
    """Format, width and height of an encoded image, from its header.

    Args:
        data: The encoded file (bytes or a memoryview of them; not copied).
        steps: Budget of the walk (shared by a request's images); default a fresh :class:`Steps`.
    Returns:
        ``(format, width_px, height_px)``, format one of :data:`FORMATS`; both sides >= 1.
    Raises:
        ImageHeaderError: Not one of :data:`FORMATS` (``UnsupportedImageFormat``), or the header is truncated, has
            a zero side, a bad PNG IHDR CRC or takes more than ``steps`` to read (``CorruptImageHeader``).
    """
    steps = Steps() if steps is None else steps
    head = bytes(data[:16])
    if head[:3] == b"\xff\xd8\xff":
        fmt, width, height = "JPEG", *_jpeg(data, steps)
    elif head[:8] == _PNG_SIGNATURE:
        fmt, width, height = "PNG", *_png(data, steps)
    elif head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        fmt, width, height = "WebP", *_webp(data, steps)
    elif head[:6] in (b"GIF87a", b"GIF89a"):
        fmt, width, height = "GIF", *_gif(data, steps)
    elif head[:2] == b"BM":
        fmt, width, height = "BMP", *_bmp(data)
    else:
        raise ImageHeaderError("UnsupportedImageFormat", "not a JPEG, PNG, WebP, GIF or BMP file (first bytes "
                                                         f"{head[:8].hex()})")
    if width <= 0 or height <= 0:
        raise _corrupt(fmt, f"declares a zero size ({width}x{height})")
    return fmt, width, height


def _jpeg(data: bytes | memoryview, steps: Steps) -> tuple[int, int]:
    """Walk the marker segments after SOI up to the start of scan (ITU T.81 B.1.1), as Pillow's open does: the size
    is the first SOFn's; the header counts as whole only when every segment up to and including SOS is."""
    pos, end = 2, len(data)
    size: tuple[int, int] | None = None
    while True:
        steps.take("JPEG")
        while pos < end and data[pos] != 0xFF:  # tolerate garbage between segments, as libjpeg does (warns)
            steps.take("JPEG")
            pos += 1
        while pos < end and data[pos] == 0xFF:  # fill bytes (the marker's own 0xFF is one)
            steps.take("JPEG")
            pos += 1
        if pos >= end:
            raise _corrupt("JPEG", "is truncated before its start of scan")
        marker = data[pos]
        pos += 1
        if marker == 0x00 or marker in _JPEG_STANDALONE:  # 0xFF00 between segments is a stuffed byte: libjpeg
            continue                                        # (next_marker) and Pillow skip it as garbage
        if marker in _JPEG_REFUSED:
            raise _jpeg_refused(marker)
        if marker == 0xD9:
            raise _corrupt("JPEG", "ends (EOI) before its start of scan")
        if pos + 2 > end:
            raise _corrupt("JPEG", "is truncated inside a segment length")
        (length,) = struct.unpack_from(">H", data, pos)
        if length < 2 or pos + length > end:
            raise _corrupt("JPEG", f"is truncated inside marker segment 0xFF{marker:02X}")
        if marker in _JPEG_SOF:
            if size is not None:  # libjpeg: "Invalid JPEG file structure: two SOF markers"
                raise _corrupt("JPEG", "has two frame headers (SOF) before its start of scan")
            if length < 8:
                raise _corrupt("JPEG", "frame header is shorter than 8 bytes")
            if data[pos + 2] != 8 or data[pos + 7] not in (1, 3, 4):  # what Pillow's open reads
                raise _corrupt("JPEG", f"frame has {data[pos + 2]}-bit samples and {data[pos + 7]} components; "
                                       "8-bit samples in 1, 3 or 4 components are read")
            height, width = struct.unpack_from(">HH", data, pos + 3)
            size = int(width), int(height)
        elif marker == 0xDB and (length != 67 or data[pos + 2] > 3):  # not the usual one 8-bit table 0-3
            _jpeg_dqt(data, pos + 2, pos + length, steps)
        if marker == 0xDA:
            if size is None:
                raise _corrupt("JPEG", "has no frame header (SOF) before its start of scan")
            return size
        pos += length


def _jpeg_refused(marker: int) -> ImageHeaderError:
    """The error for a marker of :data:`_JPEG_REFUSED` before the start of scan."""
    if marker == 0xD8:
        return _corrupt("JPEG", "has a second start of image (SOI, 0xFFD8) before its start of scan")
    if marker in _JPEG_SOF_UNSUPPORTED:
        return _corrupt("JPEG", f"frame header is SOF{marker - 0xC0} (0xFF{marker:02X}: a differential or lossless "
                                "arithmetic process), which the decoder does not support")
    return _corrupt("JPEG", f"has marker 0xFF{marker:02X} before its start of scan, which no decoder reads")


def _jpeg_dqt(data: bytes | memoryview, pos: int, end: int, steps: Steps) -> None:
    """Check the quantization tables of the DQT segment whose body is ``data[pos:end]`` (ITU T.81 B.2.4.1): each is
    a precision / index byte and 64 values of 1 byte (precision 0) or 2 (any other precision, as Pillow and libjpeg
    read it), and the tables fill the segment exactly (Pillow's open: "bad quantization table marker"); the index is
    0-3 (libjpeg at load: "Bogus DQT index"). One step per table after the first (the segment's step pays for it)."""
    while pos < end:
        spec = data[pos]
        pos += 65 if spec < 0x10 else 129
        if pos > end:
            raise _corrupt("JPEG", "quantization table (DQT) is cut short by its segment length")
        if spec & 0x0F > 3:
            raise _corrupt("JPEG", f"quantization table (DQT) has index {spec & 0x0F}; 0-3 are read")
        if pos < end:
            steps.take("JPEG")


def _png(data: bytes | memoryview, steps: Steps) -> tuple[int, int]:
    """IHDR (length 13), then every chunk up to the first IDAT must be complete, each with its CRC-32 right: Pillow's
    open checks each chunk it reads before the image data (IDAT's own are not checked before the decode)."""
    end = len(data)
    if end < 33 or bytes(data[12:16]) != b"IHDR":
        raise _corrupt("PNG", "is truncated or does not start with IHDR")
    length, width, height = struct.unpack_from(">I4xII", data, 8)
    (crc,) = struct.unpack_from(">I", data, 29)
    if length != 13 or zlib.crc32(data[12:29]) != crc:
        raise _corrupt("PNG", "IHDR chunk is broken (length or CRC-32 wrong)")
    if (data[24], data[25]) not in _PNG_MODES or data[27] != 0:
        raise _corrupt("PNG", f"IHDR has bit depth {data[24]} with colour type {data[25]}, or filter method "
                              f"{data[27]}, which PNG does not define")
    pos, header, crc_of = 33, _PNG_CHUNK.unpack_from, _PNG_CRC.unpack_from
    while pos + 8 <= end:
        steps.take("PNG")
        length, kind = header(data, pos)
        if kind == b"IDAT":
            return int(width), int(height)
        if pos + 12 + length > end:
            break
        if zlib.crc32(data[pos + 4:pos + 8 + length]) != crc_of(data, pos + 8 + length)[0]:
            raise _corrupt("PNG", f"{kind.decode('latin-1')!r} chunk is broken (CRC-32 wrong)")
        if kind == b"IEND":  # ends Pillow's header walk as IDAT does; the load then fails ("cannot load this image")
            raise _corrupt("PNG", "ends (IEND) before its first IDAT chunk")
        if length < (shortest := _PNG_SHORTEST[data[25]].get(kind, 0)):
            raise _corrupt("PNG", f"{kind.decode('latin-1')!r} chunk is {length} bytes long, shorter than the "
                                  f"{shortest} the decoder reads")
        if kind == b"tRNS" and data[25] == 3 and length > 256 and not _one_transparent_index(data, pos + 8, length):
            raise _corrupt("PNG", f"'tRNS' chunk has {length} alpha values, more than a palette's 256")
        pos += 12 + length
    raise _corrupt("PNG", "is truncated before its first IDAT chunk")


def _one_transparent_index(data: bytes | memoryview, pos: int, length: int) -> bool:
    """Whether the palette tRNS body ``data[pos:pos + length]`` is one 0x00 below index 256 among 0xFF bytes: Pillow
    reads that as one transparent palette index (its ``_simple_palette``), which converts; any other body longer than
    256 values it keeps as alphas, and its RGBA conversion fails ("palette index out of range")."""
    body = bytes(data[pos:pos + length])
    index = body.find(b"\x00")
    return 0 <= index < 256 and body.count(b"\xff") == length - 1


def _webp(data: bytes | memoryview, steps: Steps) -> tuple[int, int]:
    """RIFF container (Google, "WebP Container Specification"; RFC 9649), read as libwebp's demuxer validates it
    (Pillow opens every WebP through it, ``WebPDemux`` in libwebp 1.x ``src/demux/demux.c``): the data holds the whole
    RIFF chunk (bytes after it are ignored) and every chunk read lies inside it. A simple file's image chunk is
    followed by nothing or by a whole chunk (the demuxer reads that one more, and no later one). An extended file
    (``VP8X``, exactly 10 bytes as libwebp's ``WebPGetFeatures`` requires) sets no flag libwebp does not define and
    is walked to its RIFF end by :func:`_webp_extended`."""
    end = len(data)
    if end < 25:  # RIFF header, chunk header, and a VP8L header's 5 bytes (VP8 and VP8X need 10)
        raise _corrupt("WebP", "is truncated (shorter than 25 bytes)")
    riff_end = 8 + int.from_bytes(data[4:8], "little")
    if riff_end > end:  # the demuxer refuses a partial file
        raise _corrupt("WebP", f"is truncated: its RIFF header says {riff_end} bytes, the data has {end}")
    kind = bytes(data[12:16])
    if kind in (b"VP8 ", b"VP8L"):
        length = int.from_bytes(data[16:20], "little")
        after = 20 + length + (length & 1)
        left = riff_end - after
        if not (left == 0 or left >= 8):
            raise _corrupt("WebP", f"{kind.decode('latin-1')!r} chunk of {length} bytes does not fit its RIFF chunk "
                                   f"({riff_end} bytes)" if left < 0 else
                                   f"RIFF chunk has {left} bytes after its image chunk, fewer than a chunk header")
        if left:  # the demuxer reads the next chunk's header too: that chunk must fit (no later one is read)
            _webp_chunk(data, after, riff_end)
        return _webp_frame(data, 12, riff_end)
    if kind == b"VP8X":  # extended: flags (4 bytes), canvas width - 1 and height - 1 (24 bits each)
        length = int.from_bytes(data[16:20], "little")
        if length != 10:
            raise _corrupt("WebP", f"VP8X chunk is {length} bytes long, not 10")
        if riff_end < 30:
            raise _corrupt("WebP", "is truncated inside its VP8X chunk")
        flags = data[20]
        if flags & ~_WEBP_FLAGS:
            raise _corrupt("WebP", f"VP8X flags 0x{flags:02X} set a bit libwebp does not define (reserved)")
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        _webp_extended(data, flags & 0x02 != 0, width, height, riff_end, steps)
        return width, height
    raise _corrupt("WebP", f"first chunk is {kind!r}, not VP8, VP8L or VP8X")


def _webp_chunk(data: bytes | memoryview, pos: int, end: int) -> tuple[bytes, int, int]:
    """``(kind, length, padded length)`` of the chunk whose header starts at ``pos`` (at most ``end - 8``).

    Raises:
        ImageHeaderError: Its body (padded to an even length) runs past ``end``, the RIFF chunk's end.
    """
    kind = bytes(data[pos:pos + 4])
    length = int(struct.unpack_from("<I", data, pos + 4)[0])
    padded = length + (length & 1)
    if pos + 8 + padded > end:
        raise _corrupt("WebP", f"{kind.decode('latin-1')!r} chunk of {length} bytes runs past the end of its RIFF "
                               "chunk")
    return kind, length, padded


def _webp_frame(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """Width and height of the ``VP8 `` or ``VP8L`` chunk whose header starts at ``pos`` (its header before
    ``end``: 10 bytes of a VP8 frame header, 5 of a VP8L one)."""
    lossy = bytes(data[pos:pos + 4]) == b"VP8 "
    if pos + (18 if lossy else 13) > end:
        raise _corrupt("WebP", "is truncated inside its image chunk header")
    if lossy:  # lossy: frame tag, start code 9d 01 2a, 14-bit sides (RFC 6386 9.1)
        if bytes(data[pos + 11:pos + 14]) != b"\x9d\x01\x2a":
            raise _corrupt("WebP", "VP8 frame has no start code")
        width, height = struct.unpack_from("<HH", data, pos + 14)
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    if data[pos + 8] != 0x2F:  # lossless: signature 0x2f, then 14 bits width - 1, 14 bits height - 1
        raise _corrupt("WebP", "VP8L chunk has no signature byte 0x2f")
    (bits,) = struct.unpack_from("<I", data, pos + 9)
    return (int(bits) & 0x3FFF) + 1, ((int(bits) >> 14) & 0x3FFF) + 1


_WEBP_IMAGE_CHUNKS = (b"ALPH", b"VP8 ", b"VP8L")


def _webp_extended(data: bytes | memoryview, animated: bool, width: int, height: int, end: int, steps: Steps) -> None:
    """Walk every chunk after ``VP8X`` to the RIFF chunk's ``end``, as the demuxer does: each lies inside it, and
    no bytes too few for a chunk header are left at the end. A still image has one image (an optional ``ALPH``, then
    ``VP8 `` or ``VP8L``, whose size must be the canvas's) and no image chunk after it; an animation has no image chunk
    outside its frames, an ``ANIM`` of at least 6 bytes before its first ``ANMF``, and each ``ANMF`` of at least 16
    bytes, its frame (sized by its bitstream) inside the canvas.

    Every chunk takes a step; once the file's first frame is read, the walk goes on only while more than half the
    budget is left (:meth:`Steps.spare`) and then ends without refusing (the runtime judges the rest): a long
    animation is never refused for its length, nor does it starve a later image of the request.

    Raises:
        ImageHeaderError: Any of the above broken (libwebp ``WebPDemux`` refuses each), or no frame at all.
    """
    pos, anim, frames, alpha = 30, False, 0, False
    while pos < end:
        if not frames:
            steps.take("WebP")
        elif not steps.spare():
            return
        if pos + 8 > end:
            raise _corrupt("WebP", f"RIFF chunk ends with {end - pos} bytes, fewer than a chunk header")
        kind, length, padded = _webp_chunk(data, pos, end)
        if kind == b"VP8X":
            raise _corrupt("WebP", "has a second VP8X chunk")
        if kind in _WEBP_IMAGE_CHUNKS:
            if animated or anim:
                raise _corrupt("WebP", f"animation has a {kind.decode('latin-1')!r} chunk outside its frames (ANMF)")
            if frames:
                raise _corrupt("WebP", f"still image has a second image ({kind.decode('latin-1')!r} chunk)")
            if kind == b"ALPH":
                alpha = True
            else:
                if alpha and kind == b"VP8L":
                    raise _corrupt("WebP", "has an ALPH chunk before a VP8L image (VP8L carries its own alpha)")
                frame = _webp_frame(data, pos, end)
                if frame != (width, height):
                    raise _corrupt("WebP", f"image is {frame[0]}x{frame[1]}, not its canvas's {width}x{height}")
                frames, alpha = 1, False
        elif alpha:
            raise _corrupt("WebP", "has an ALPH chunk with no VP8 image after it")
        elif kind == b"ANIM":
            if padded < 6:
                raise _corrupt("WebP", f"ANIM chunk is {length} bytes long, shorter than 6")
            anim = True
        elif kind == b"ANMF":
            if not anim:
                raise _corrupt("WebP", "has an animation frame (ANMF) before its ANIM chunk")
            if padded < 16:
                raise _corrupt("WebP", f"ANMF chunk is {length} bytes long, shorter than its 16-byte header")
            if animated and _webp_animation_frame(data, pos, length, end, width, height, steps, frames > 0):
                frames += 1
        pos += 8 + padded
    if alpha:
        raise _corrupt("WebP", "has an ALPH chunk with no VP8 image after it")
    if not frames:
        raise _corrupt("WebP", "has no image (truncated, or no VP8, VP8L or ANMF frame)")


def _webp_animation_frame(data: bytes | memoryview, pos: int, length: int, end: int, width: int, height: int,
                          steps: Steps, spare: bool) -> bool:
    """Check the frame of the ``ANMF`` chunk at ``pos``: its offset (2 x 24 bits, in units of 2 pixels) plus its
    bitstream's size (the demuxer sizes a frame by its bitstream, not by the header's width and height) inside the
    ``width`` x ``height`` canvas. True when it has a ``VP8 `` / ``VP8L`` image (False: not a frame, which the
    demuxer skips, or ``spare`` and the budget for spare steps is spent: not checked).

    Raises:
        ImageHeaderError: The frame is outside the canvas.
    """
    x, y = (2 * int.from_bytes(data[pos + i:pos + i + 3], "little") for i in (8, 11))
    inner, stop = pos + 24, min(end, pos + 8 + length)
    while inner + 8 <= stop and bytes(data[inner:inner + 4]) not in (b"VP8 ", b"VP8L"):
        if not spare:
            steps.take("WebP")
        elif not steps.spare():
            return False
        inner += 8 + int(struct.unpack_from("<I", data, inner + 4)[0])
        inner += inner & 1
    if not (inner + 8 <= end and bytes(data[inner:inner + 4]) in (b"VP8 ", b"VP8L")):
        return False
    w, h = _webp_frame(data, inner, end)
    if x + w > width or y + h > height:
        raise _corrupt("WebP", f"a frame ({w}x{h} at {x},{y}) is outside its {width}x{height} canvas")
    return True


def _gif(data: bytes | memoryview, steps: Steps) -> tuple[int, int]:
    """Logical screen size, grown to the first image descriptor's extent (Pillow's ``GifImagePlugin`` does the
    same when it opens the file). The blocks before that descriptor are read as Pillow's open reads them
    (:func:`_gif_extension`); nothing after the first frame's LZW code size is: the runtime decodes a GIF's first
    frame only."""
    end = len(data)
    if end < 13:
        raise _corrupt("GIF", "is truncated inside its logical screen descriptor")
    width, height = struct.unpack_from("<HH", data, 6)
    flags = data[10]
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    while pos < end:
        block = data[pos]
        if block == 0x2C:  # image descriptor: left, top, width, height, flags; its color table; LZW code size
            if pos + 10 > end:
                break
            code_size_at = pos + 10 + (3 << ((data[pos + 9] & 7) + 1) if data[pos + 9] & 0x80 else 0)
            if code_size_at >= end:
                break  # Pillow's open reads all three
            left, top, frame_w, frame_h = struct.unpack_from("<HHHH", data, pos + 1)
            if not frame_w or not frame_h:  # Pillow's load: "tile cannot extend outside image"
                raise _corrupt("GIF", f"first frame declares a zero size ({frame_w}x{frame_h})")
            if data[code_size_at] > 12:  # Pillow's LZW decoder takes 0-12 ("codec configuration error")
                raise _corrupt("GIF", f"first frame has LZW minimum code size {data[code_size_at]}; at most 12 is "
                                      "decoded")
            return max(int(width), int(left) + int(frame_w)), max(int(height), int(top) + int(frame_h))
        if block == 0x3B:  # the trailer before any image
            break
        if block != 0x21:  # a stray byte: Pillow's reader skips it and reads on
            steps.take("GIF")
            pos += 1
            continue
        if pos + 2 > end:
            break
        pos = _gif_extension(data, pos, end, steps)
    raise _corrupt("GIF", "has no image descriptor (truncated, or no frame)")


def _gif_sub_blocks(data: bytes | memoryview, pos: int, end: int, steps: Steps) -> int:
    """The position after the data sub-blocks at ``pos``, up to and including a zero-length one (one step each)."""
    while pos < end and data[pos]:
        steps.take("GIF")
        pos += data[pos] + 1
    return pos + 1


def _gif_extension(data: bytes | memoryview, pos: int, end: int, steps: Steps) -> int:
    """The position after the extension block at ``pos`` (introducer and label before ``end``), read as Pillow's open
    reads one before the first frame (``GifImagePlugin._seek(0)``): a comment's sub-blocks up to the terminator;
    any other label's first sub-block alone (of any length, the terminator too), the NETSCAPE2.0 application
    block's second one too (its loop count), then sub-blocks up to a terminator. So an extension whose first
    sub-block is its terminator has the image descriptor after it read as the length of one (Pillow then finds no
    image), and a graphic control extension's first sub-block is its flags, delay and, when the flags' bit 0 says
    so, transparent colour index, read at offsets 0, 1-2 and 3.

    Raises:
        ImageHeaderError: A graphic control extension's first sub-block shorter than that (Pillow's open fails:
            IndexError or struct.error, "cannot identify image file").
    """
    label = data[pos + 1]
    pos += 2
    if label == 0xFE:
        return _gif_sub_blocks(data, pos, end, steps)
    if pos >= end:
        return pos
    steps.take("GIF")
    length = data[pos]
    body = bytes(data[pos + 1:pos + 1 + min(length, 16)])
    pos += 1 + length
    if label == 0xF9 and length and len(body) < (4 if body and body[0] & 1 else 3):
        raise _corrupt("GIF", f"graphic control extension before the first frame is {len(body)} bytes long; the "
                              "decoder reads 3 (4 with a transparent colour)")
    if label == 0xFF and length and body.startswith(b"NETSCAPE2.0") and pos < end:
        steps.take("GIF")
        pos += 1 + data[pos]
    return _gif_sub_blocks(data, pos, end, steps)


def _bmp(data: bytes | memoryview) -> tuple[int, int]:
    if len(data) < 26:
        raise _corrupt("BMP", "is truncated inside its DIB header")
    (header_size,) = struct.unpack_from("<I", data, 14)
    if header_size == 12:  # OS/2 BITMAPCOREHEADER: unsigned 16-bit sides
        width, height = struct.unpack_from("<HH", data, 18)
        return int(width), int(height)
    if header_size not in _BMP_INFO_HEADERS:
        raise _corrupt("BMP", f"has an unknown DIB header size {header_size}")
    width, height = struct.unpack_from("<ii", data, 18)
    return int(width), abs(int(height))
