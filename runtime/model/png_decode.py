"""libspng's PNG decoder with its checksums checked (pure apart from decoding bytes; no torch, no Triton).

``pyspng.load`` (pyspng 0.1.4, libspng 0.7.4) tells libspng ``spng_set_crc_action(SPNG_CRC_USE, SPNG_CRC_USE)``, which
also turns off zlib's Adler-32 check, so image data altered and framed again with right chunk CRCs decodes to the
altered pixels, where Pillow refuses it. pyspng exposes no other call, so :func:`decode` calls the same library
(exported by pyspng's extension module) through ``ctypes`` with libspng's default actions: a bad critical chunk CRC
or Adler-32 is an error. Its cost is pyspng's (``decode_image`` INT8 CPU per PNG, ``pyspng.load`` -> this: 384x288
4.0 -> 4.6 ms, 1600x1200 68.1 -> 56.7 ms, noise of a loaded machine; Pillow 5.8 and 100.2); checking the Adler-32
in Python instead, by inflating the stream once more, cost 1.9 of the 4.5 ms ``decode_image`` took at 384x288.

The functions are libspng 0.7's documented C API (``spng.h``); the library is used only when it reports version
0.7.x, else :data:`AVAILABLE` is False and every PNG is Pillow's to decode.
"""

from __future__ import annotations

import ctypes
import logging

import numpy as np
from numpy.typing import NDArray

LOG = logging.getLogger("modalscale.runtime.model.png_decode")

FORMATS = {"L": 64, "RGB": 4, "RGBA": 1}
"""Output format -> libspng's ``enum spng_format`` (``SPNG_FMT_G8``, ``SPNG_FMT_RGB8``, ``SPNG_FMT_RGBA8``)."""

_CHANNELS = {"L": 1, "RGB": 3, "RGBA": 4}
_CHUNK_LIMIT_BYTES = 64 * 1024 * 1024
"""libspng's limit on one chunk and on the chunks it keeps, bytes (pyspng's own)."""


class SpngError(RuntimeError):
    """libspng refused the PNG (``spng_strerror``'s text)."""


def _library() -> ctypes.CDLL | None:
    """pyspng's extension module as a C library with libspng's signatures; None when it is missing or not 0.7.x."""
    try:
        from pyspng import _pyspng_c

        lib = ctypes.CDLL(_pyspng_c.__file__)
        lib.spng_version_string.restype = ctypes.c_char_p
        lib.spng_version_string.argtypes = []
        version = lib.spng_version_string().decode()
    except (ImportError, OSError, AttributeError) as exc:
        LOG.warning("libspng not usable (%s): every PNG is decoded by Pillow", exc)
        return None
    if not version.startswith("0.7."):
        LOG.warning("libspng %s is not the 0.7 this binding was written for: every PNG is decoded by Pillow", version)
        return None
    c_void_p, c_size_t, c_int = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    for name, restype, argtypes in (
            ("spng_ctx_new", c_void_p, [c_int]),
            ("spng_ctx_free", None, [c_void_p]),
            ("spng_set_png_buffer", c_int, [c_void_p, ctypes.c_char_p, c_size_t]),
            ("spng_set_chunk_limits", c_int, [c_void_p, c_size_t, c_size_t]),
            ("spng_decoded_image_size", c_int, [c_void_p, c_int, ctypes.POINTER(c_size_t)]),
            ("spng_decode_image", c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int]),
            ("spng_strerror", ctypes.c_char_p, [c_int])):
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


_LIB = _library()
AVAILABLE = _LIB is not None
"""Whether :func:`decode` can run (else the INT8 path leaves every PNG to Pillow)."""


def decode(data: bytes, fmt: str, width: int, height: int) -> NDArray[np.uint8]:
    """Decode the 8-bit PNG ``data`` of ``width x height`` (its IHDR's) to ``fmt``, checksums checked.

    Args:
        data: The PNG file.
        fmt: ``L``, ``RGB`` or ``RGBA`` (libspng converts: grey to RGB(A), adds opaque alpha ...).
        width, height: The size its IHDR declares (already checked against the pixel limit).
    Returns:
        uint8 ``(height, width)`` for ``L``, else ``(height, width, channels)``.
    Raises:
        SpngError: libspng refused it (a bad chunk CRC or Adler-32, a truncated or broken stream ...), or
            :data:`AVAILABLE` is False.
    """
    lib = _LIB
    if lib is None:
        raise SpngError("libspng is not available")
    ctx = lib.spng_ctx_new(0)
    if not ctx:
        raise SpngError("spng_ctx_new failed")
    try:
        code = lib.spng_set_png_buffer(ctx, data, len(data))
        code = code or lib.spng_set_chunk_limits(ctx, _CHUNK_LIMIT_BYTES, _CHUNK_LIMIT_BYTES)
        size = ctypes.c_size_t()
        code = code or lib.spng_decoded_image_size(ctx, FORMATS[fmt], ctypes.byref(size))
        expected = width * height * _CHANNELS[fmt]
        if not code and size.value != expected:
            raise SpngError(f"decoded size {size.value} bytes, {expected} expected from the header")
        out = np.empty(expected, dtype=np.uint8)
        code = code or lib.spng_decode_image(ctx, out.ctypes.data, expected, FORMATS[fmt], 0)
        if code:
            raise SpngError(lib.spng_strerror(code).decode(errors="replace"))
    finally:
        lib.spng_ctx_free(ctx)
    return out.reshape(height, width) if fmt == "L" else out.reshape(height, width, _CHANNELS[fmt])
