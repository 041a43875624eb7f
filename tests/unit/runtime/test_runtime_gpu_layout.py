"""``gpu_layout.pad_images``: the orchestrator's padding of a request's images to the GPU layout's fixed sides (no
model needed; the encoder passes are checked with the real weights in
``tests/integration/runtime/test_runtime_encoder.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from modalscale.runtime.model.gpu_layout import pad_images
from modalscale.runtime.model.inputs import DecodedImage

SIDES = (128, 256, 384)


def _image(h: int, w: int, value: float) -> DecodedImage:
    return DecodedImage(pixels=h * w, width=w, height=h, array=np.full((3, h, w), value, np.float32),
                        digest=bytes([int(value)]) * 32)


def test_images_group_by_fixed_side_in_order_of_first_use_float16_zero_beyond_valid() -> None:
    images = [_image(288, 384, 1.5), _image(96, 64, 2.0), _image(384, 256, -0.25), _image(128, 128, 3.0)]
    batches = pad_images(images, [0, 1, 2, 3], SIDES)
    assert [(b.side, b.members) for b in batches] == [(384, (0, 2)), (128, (1, 3))]
    big = batches[0]
    assert big.pixels.shape == (2, 3, 384, 384) and big.pixels.dtype == np.float16
    assert big.valid_hw.tolist() == [[288, 384], [384, 256]] and big.valid_hw.dtype == np.int32
    assert (big.pixels[0, :, :288, :] == 1.5).all() and (big.pixels[0, :, 288:, :] == 0).all()
    assert (big.pixels[1, :, :, :256] == -0.25).all() and (big.pixels[1, :, :, 256:] == 0).all()


def test_only_the_images_to_encode_are_padded() -> None:
    images = [_image(96, 64, 1.0), _image(288, 384, 2.0)]
    assert [(b.side, b.members) for b in pad_images(images, [1], SIDES)] == [(384, (1,))]
    assert pad_images(images, [], SIDES) == []


def test_an_image_without_pixels_or_beyond_every_side_is_refused() -> None:
    cached = DecodedImage(pixels=1, width=1, height=1, array=None, digest=b"\0" * 32, cached=("entry",))
    with pytest.raises(ValueError, match="not decoded"):
        pad_images([cached], [0], SIDES)
    with pytest.raises(ValueError, match="exceeds every fixed side"):
        pad_images([_image(416, 64, 1.0)], [0], SIDES)
