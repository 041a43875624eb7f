"""Pure planning of encoder passes and model settings parsing."""

from __future__ import annotations

import pytest

from modalscale.runtime.model.batching import (
    Group,
    plan_image_groups,
    plan_text_groups,
    route,
    split_evenly,
    text_bucket,
)
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import Precision, RuntimeConfig, model_parameters

SHAPES = [(64, 64), (384, 384), (64, 64), (96, 384)]


def test_images_group_by_exact_bucket_in_order_of_first_appearance_and_are_never_padded() -> None:
    """In every layout (the image plan no longer reads ``modality_aware_batching``): padding a 64x64 image to a
    384x384 neighbour moved its features (the integration tests in test_runtime_encoder.py measure it)."""
    plan = plan_image_groups(SHAPES)
    assert plan == [Group((0, 2), (64, 64)), Group((1,), (384, 384)), Group((3,), (96, 384))]
    assert all(SHAPES[i] == g.pad_to for g in plan for i in g.indices)  # no item is padded


def test_image_plan_pays_only_its_own_pixels() -> None:
    # hand count: the earlier naive plan padded all four to 384x384 = 589824 pixels
    assert sum(g.padded_size() for g in plan_image_groups(SHAPES)) == 2 * 64 * 64 + 384 * 384 + 96 * 384 == 192512
    assert plan_image_groups([(96, 128)] * 3) == [Group((0, 1, 2), (96, 128))]  # one bucket: the one pass as before


def test_image_plan_takes_numpy_shapes_as_plain_int_tuples() -> None:
    import numpy as np

    plan = plan_image_groups([tuple(np.array([64, 96])), (64, 96)])  # type: ignore[list-item]
    assert plan == [Group((0, 1), (64, 96))] and all(type(d) is int for d in plan[0].pad_to)


@pytest.mark.parametrize("aware", [True, False], ids=["aware", "naive"])
def test_groups_cover_each_item_once(aware: bool) -> None:
    for plan in (plan_image_groups(SHAPES), plan_text_groups([3, 40, 7, 256, 17], aware)):
        indices = sorted(i for g in plan for i in g.indices)
        assert indices == list(range(len(indices)))


def test_empty_batches_plan_nothing() -> None:
    assert plan_image_groups([]) == [] and plan_text_groups([], False) == []


def test_text_buckets() -> None:
    assert [text_bucket(n) for n in (1, 16, 17, 64, 65, 256, 300)] == [16, 16, 32, 64, 128, 256, 256]
    assert plan_text_groups([3, 40, 7, 256, 17], True) == [
        Group((0, 2), (7,)), Group((4,), (17,)), Group((1,), (40,)), Group((3,), (256,))]
    assert plan_text_groups([3, 40, 7], False) == [Group((0, 1, 2), (40,))]


def test_split_evenly_adds_up() -> None:
    assert split_evenly(1.0, [1, 3]) == [0.25, 0.75]
    assert split_evenly(2.0, [0, 0]) == [0.0, 0.0]
    assert sum(split_evenly(0.3, [1, 1, 1])) == pytest.approx(0.3)


def test_settings_round_trip_from_generated_parameters() -> None:
    cfg = RuntimeConfig(intra_op_threads=3, precision=Precision.INT8, modality_aware_batching=False,
                        embedding_cache=False, max_images_per_request=4)
    model_config = {"parameters": {k: {"string_value": v} for k, v in model_parameters(cfg).items()}}
    settings = ModelSettings.from_model_config(model_config)
    assert settings == ModelSettings(intra_op_threads=3, precision=Precision.INT8, modality_aware_batching=False,
                                     embedding_cache=False, max_images_per_request=4)


def test_settings_defaults_and_errors() -> None:
    assert ModelSettings.from_model_config({}) == ModelSettings()
    with pytest.raises(ValueError, match="parameter intra_op_threads"):
        ModelSettings.from_model_config({"parameters": {"intra_op_threads": {"string_value": "two"}}})
    with pytest.raises(ValueError, match="parameter embedding_cache"):
        ModelSettings.from_model_config({"parameters": {"embedding_cache": {"string_value": "yes"}}})
    assert ModelSettings().warm_up  # on unless a benchmark's model parameter says false
    assert not ModelSettings.from_model_config({"parameters": {"warm_up": {"string_value": "false"}}}).warm_up
    with pytest.raises(ValueError, match="parameter warm_up: expected true or false"):
        ModelSettings.from_model_config({"parameters": {"warm_up": {"string_value": "off"}}})


@pytest.mark.parametrize(("image_count", "text", "expected"), [
    (None, False, None), (None, True, "text"), (0, True, "text"), (0, False, "image"),
    (1, False, "image"), (3, True, "image_text"),
], ids=["nothing", "text", "empty-images-and-text", "empty-images", "image", "both"])
def test_router_picks_the_modality_queue(image_count: int | None, text: bool, expected: str | None) -> None:
    assert route(image_count, text) == expected
