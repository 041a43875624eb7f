"""``max_image_pixels`` is the limit ``decode_image`` enforces, or refused where it is configured.

``decode_image`` turns Pillow's ``DecompressionBombWarning`` into a refusal, and ``Image.open`` raises that warning
for any image above ``Image.MAX_IMAGE_PIXELS`` (89,478,485), whatever the model's own limit says. ``RuntimeConfig``
and ``ModelSettings`` took any ``max_image_pixels`` (up to 2**40), so with a limit of 200 M a 95 M pixel image was
refused as ``ImageTooLarge: IMAGES[0]: exceeds the limit of 200000000 pixels``: a valid request refused, with a
message contradicting itself.
"""

from __future__ import annotations

import io

import pytest
from PIL import Image

from modalscale.api.errors import InvalidSpec
from modalscale.runtime.model.inputs import RequestError, decode_image
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import RuntimeConfig


def _bilevel_png(width: int, height: int) -> bytes:
    """A 1-bit PNG (``width x height`` pixels in a few KiB)."""
    buf = io.BytesIO()
    Image.new("1", (width, height), 1).save(buf, format="PNG")
    return buf.getvalue()


def test_a_limit_the_decoder_cannot_enforce_is_refused_where_it_is_configured() -> None:
    limit = 200_000_000
    data = _bilevel_png(10_000, 9_500)  # 95 M pixels: within the limit, above Pillow's
    with pytest.raises(RequestError) as refused:
        decode_image(data, 0, ModelSettings(max_image_pixels=limit))
    assert refused.value.reason == "ImageTooLarge"  # what such a limit did to a request within it
    with pytest.raises(InvalidSpec, match="max_image_pixels"):
        RuntimeConfig(max_image_pixels=limit)
    with pytest.raises(ValueError, match="parameter max_image_pixels: expected at most 89478485"):
        ModelSettings.from_model_config({"parameters": {"max_image_pixels": {"string_value": str(limit)}}})


def test_the_largest_accepted_limit_is_pillows() -> None:
    assert RuntimeConfig(max_image_pixels=Image.MAX_IMAGE_PIXELS).max_image_pixels == Image.MAX_IMAGE_PIXELS
    settings = ModelSettings.from_model_config(
        {"parameters": {"max_image_pixels": {"string_value": str(Image.MAX_IMAGE_PIXELS)}}})
    assert settings.max_image_pixels == Image.MAX_IMAGE_PIXELS
