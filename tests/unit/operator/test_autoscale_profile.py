"""The pure half of `modalscale profile` (modalscale.autoscaler.profile_design): request design, Triton statistics
-> profile rows, evaluation against the baselines, the ConfigMap manifest."""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any

import numpy as np
import pytest
import yaml

from modalscale.autoscaler.features import Modality
from modalscale.autoscaler.profile_data import PROFILE_COLUMNS, generate_profile
from modalscale.autoscaler.profile_design import (
    ProfileGrid,
    RequestShape,
    batched_rows,
    compute_ns,
    configmap_yaml,
    design,
    evaluate_profile,
    sequential_row,
    to_table,
)


def _stats(count: int, execs: int, input_ns: int, infer_ns: int, output_ns: int,
           batches: list[tuple[int, int, int]] | None = None) -> dict[str, Any]:
    """A ``model_stats`` entry shaped like Triton's statistics API (batches: (size, count, infer ns))."""
    return {
        "inference_count": count, "execution_count": execs,
        "inference_stats": {"compute_input": {"count": count, "ns": input_ns},
                            "compute_infer": {"count": count, "ns": infer_ns},
                            "compute_output": {"count": count, "ns": output_ns}},
        "batch_stats": [{"batch_size": b, "compute_input": {"count": k, "ns": 0},
                         "compute_infer": {"count": k, "ns": ns}, "compute_output": {"count": k, "ns": 0}}
                        for b, k, ns in (batches or [])],
    }


@pytest.mark.parametrize("kwargs", [dict(), dict(image_count=1), dict(image_count=-1, text_tokens=3),
                                    dict(text_tokens=-2)], ids=["empty", "image-without-size", "neg-images",
                                                                "neg-tokens"])
def test_request_shape_refuses_impossible_requests(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        RequestShape(**kwargs)


def test_request_shape_features() -> None:
    shape = RequestShape(image_count=2, width=640, height=480, text_tokens=32)
    assert shape.modality == Modality.IMAGE_TEXT and shape.image_pixels == 2 * 640 * 480
    assert RequestShape(text_tokens=8).modality == Modality.TEXT
    assert RequestShape(1, 10, 10).modality == Modality.IMAGE


def test_grid_draws_equal_modality_parts_from_the_grid_and_is_seeded() -> None:
    grid = ProfileGrid()
    shapes = grid.draw(90, seed=4)
    assert shapes == grid.draw(90, seed=4) and shapes != grid.draw(90, seed=5)
    assert Counter(s.modality for s in shapes) == {m: 30 for m in Modality}
    for s in shapes:
        if s.image_count:
            assert s.image_count in grid.images_per_request and (s.width, s.height) in grid.image_sizes
        if s.text_tokens:
            assert s.text_tokens in grid.text_tokens
    assert len(grid.warmup_shapes()) == len(grid.image_sizes) + len(grid.text_tokens)


def test_design_sends_every_shape_the_given_number_of_times() -> None:
    shapes = [RequestShape(text_tokens=t) for t in (8, 16, 32)]
    sent = design(shapes, 3, seed=1)
    assert Counter(sent) == {s: 3 for s in shapes} and sent != [s for s in shapes for _ in range(3)]
    with pytest.raises(ValueError):
        design(shapes, 0)


def test_sequential_row_is_the_change_of_compute_time_across_one_request() -> None:
    shape = RequestShape(image_count=2, width=640, height=480)
    before = _stats(10, 10, 1_000, 2_002_000_000, 50_000)
    after = _stats(11, 11, 1_300, 2_180_000_000, 53_000)
    row = sequential_row(shape, before, after, time_s=4.5)
    # (300 + 178_000_000 + 3_000) ns = 178.0033 ms
    assert row == {"time_s": 4.5, "modality": "image", "image_count": 2, "image_pixels": 614400,
                   "text_tokens": 0, "batch_size": 1, "service_ms": pytest.approx(178.0033)}
    assert set(row) == set(PROFILE_COLUMNS)


def test_sequential_row_is_dropped_when_other_requests_ran_meanwhile() -> None:
    shape = RequestShape(text_tokens=8)
    assert sequential_row(shape, _stats(1, 1, 0, 10, 0), _stats(3, 2, 0, 90, 0), 1.0) is None


def test_batched_rows_charge_each_request_its_share_of_the_mean_batch_time() -> None:
    # recorded on the real runtime: 16 concurrent images ran as batches of 2, 6 and 8
    shape = RequestShape(image_count=1, width=320, height=240)
    before = _stats(3, 3, 0, 0, 0, [(1, 3, 354_234_178)])
    after = _stats(19, 6, 0, 0, 0, [(1, 3, 354_234_178), (2, 1, 151_691_050), (6, 1, 716_273_206),
                                    (8, 1, 1_764_309_337)])
    rows = batched_rows(shape, before, after, time_s=2.0)
    assert [r["batch_size"] for r in rows] == [2, 6, 8]  # one row per executed batch
    assert [r["service_ms"] for r in rows] == pytest.approx([151.69105 / 2, 716.273206 / 6, 1764.309337 / 8])
    assert compute_ns(after["batch_stats"][3]) == 1_764_309_337


def test_to_table_has_the_profile_columns() -> None:
    rows = [sequential_row(RequestShape(text_tokens=8), _stats(0, 0, 0, 0, 0), _stats(1, 1, 0, 2_000_000, 0), 0.5)]
    table = to_table(rows)
    assert list(table) == list(PROFILE_COLUMNS)
    assert table["service_ms"].tolist() == [2.0] and table["modality"].tolist() == ["text"]


def test_evaluation_on_a_known_law_beats_both_baselines_in_both_splits() -> None:
    profile = generate_profile(600, random_state=2)
    # repeat every row twice with its own noise so the repeat spread exists
    table = {c: np.concatenate([profile[c], profile[c]]) for c in PROFILE_COLUMNS}
    rng = np.random.default_rng(0)
    table["service_ms"] = table["service_ms"] * rng.lognormal(0, 0.05, size=table["service_ms"].shape[0])
    splits = evaluate_profile(table, seed=3)
    assert [s.name for s in splits] == ["requests", "shapes"]
    for split in splits:
        model = split.results["model"]
        assert model.mae_ms < split.results["dummy_mean"].mae_ms
        assert model.mae_ms < split.results["linear_in_tokens"].mae_ms
        assert model.mape_ratio < 0.15
        assert set(split.model_mape_by_modality) == {"text", "image", "image_text"}
    assert splits[0].noise_floor_mape is not None and 0 < splits[0].noise_floor_mape < 0.2
    assert splits[0].n_train + splits[0].results["model"].n_requests == 1200


def test_evaluation_refuses_tiny_profiles_and_bad_ratios() -> None:
    profile = generate_profile(20, random_state=2)
    with pytest.raises(ValueError):
        evaluate_profile({c: v[:5] for c, v in profile.items()})
    with pytest.raises(ValueError):
        evaluate_profile(profile, test_ratio=1.0)


def test_configmap_manifest_carries_the_artifact_in_binary_data() -> None:
    artifact = bytes(range(256)) * 3
    manifest = yaml.safe_load(configmap_yaml("service-time", "model.skops", artifact, "ml"))
    assert manifest["kind"] == "ConfigMap" and manifest["metadata"] == {
        "name": "service-time", "labels": {"app.kubernetes.io/part-of": "modalscale"}, "namespace": "ml"}
    assert base64.b64decode(manifest["binaryData"]["model.skops"]) == artifact
