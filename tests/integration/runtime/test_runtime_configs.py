"""The real tritonserver accepts the generated config.pbtxt for a reduced pairwise set of switches, and every
variant answers; lower precisions stay close to FP32.

Reduced set (one server, one model per row, to keep the start-up cost of ~10 stub processes to one server
start): all 8 combinations of batching mode {none, static, dynamic, dynamic+preferred sizes} x response
cache {off, on}; each precision appears with response cache on and off and with modality-aware batching on
and off; instance_count 2 in two rows; the embedding cache both ways. KIND_GPU cannot be started here (no GPU).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pytest

from modalscale.runtime.client import MultimodalClient, scrape_metrics
from modalscale.runtime.repo_config import Precision, RuntimeConfig, build_repository, server_arguments
from modalscale.runtime.server import TritonProcess, free_port, write_repository
from modalscale.runtime.workload import photo_bytes

BATCHING = {
    "none": {"max_batch_size": 0},
    "static": {"max_batch_size": 8, "dynamic_batching": False},
    "dynamic": {"max_batch_size": 8},
    "preferred": {"max_batch_size": 8, "preferred_batch_sizes": (2, 4), "max_queue_delay_microseconds": 500},
}
P = Precision
ROWS = [  # (batching, response_cache, instances, precision, modality_aware, embedding_cache)
    ("none", False, 1, P.FP32, True, True),
    ("none", True, 1, P.INT8, False, False),
    ("static", False, 2, P.FP16, False, True),
    ("static", True, 1, P.BF16, True, False),
    ("dynamic", False, 1, P.INT8, True, False),
    ("dynamic", True, 2, P.FP32, False, True),
    ("preferred", False, 1, P.BF16, False, True),
    ("preferred", True, 1, P.FP16, True, False),
]


def _config(row: tuple) -> RuntimeConfig:  # type: ignore[type-arg]
    batching, cache, instances, precision, aware, embedding_cache = row
    name = f"mm_{batching}_{'rc' if cache else 'norc'}_{precision.value.lower()}"
    return RuntimeConfig(model_name=name, response_cache=cache, instance_count=instances, precision=precision,
                         modality_aware_batching=aware, embedding_cache=embedding_cache, **BATCHING[batching])


CONFIGS = [_config(row) for row in ROWS]


def test_reduced_set_covers_the_claimed_pairs() -> None:
    assert {(r[0], r[1]) for r in ROWS} == set(itertools.product(BATCHING, (False, True)))
    assert {(r[3], r[1]) for r in ROWS} == set(itertools.product(Precision, (False, True)))
    assert {(r[3], r[4]) for r in ROWS} == set(itertools.product(Precision, (False, True)))
    assert {r[2] for r in ROWS} == {1, 2} and {r[5] for r in ROWS} == {False, True}


@pytest.fixture(scope="module")
def many_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    repo = tmp_path_factory.mktemp("triton-configs")
    for cfg in CONFIGS:
        write_repository(build_repository(cfg), repo)
    extra = sorted({arg for cfg in CONFIGS for arg in server_arguments(cfg)}, key=lambda a: not a.startswith("--"))
    server = TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                           extra_args=extra, exit_timeout_s=5,
                           log_path=tmp_path_factory.mktemp("triton-configs-log") / "tritonserver.log")
    server.start(ready_timeout_s=600)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def answers(many_models: TritonProcess) -> dict[str, object]:
    out = {}
    for cfg in CONFIGS:
        with MultimodalClient(many_models.http_url, "http", model_name=cfg.model_name) as client:
            out[cfg.model_name] = client.infer(images=[photo_bytes("chelsea")], text="a photo of a cat")
    return out


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.model_name for c in CONFIGS])
def test_generated_config_is_accepted_and_answers(many_models: TritonProcess, answers: dict, cfg: RuntimeConfig
                                                  ) -> None:
    with MultimodalClient(many_models.http_url, "http", model_name=cfg.model_name) as client:
        assert client.is_ready()
    result = answers[cfg.model_name]
    assert result.modality == "image_text"
    assert result.embedding.shape == (256,)
    assert 281 <= int(result.image_classes[0]) <= 287  # a cat class, at every precision


@pytest.mark.parametrize("precision", [P.FP16, P.BF16, P.INT8], ids=lambda p: p.value)
def test_lower_precision_embeddings_stay_close_to_fp32(answers: dict, precision: Precision) -> None:
    reference = answers["mm_none_norc_fp32"].embedding
    for cfg in CONFIGS:
        if cfg.precision is precision:
            cosine = float(np.dot(reference, answers[cfg.model_name].embedding))
            assert cosine > 0.97, (cfg.model_name, cosine)


def test_response_cache_answers_a_repeated_request(many_models: TritonProcess) -> None:
    name = "mm_dynamic_rc_fp32"
    with MultimodalClient(many_models.http_url, "http", model_name=name) as client:
        first = client.infer(text="a dog on the grass")
        before = scrape_metrics(many_models.metrics_url)
        second = client.infer(text="a dog on the grass")
        after = scrape_metrics(many_models.metrics_url)
    np.testing.assert_array_equal(first.embedding, second.embedding)
    key = f'nv_cache_num_hits_per_model{{model="{name}",version="1"}}'
    assert after[key] - before.get(key, 0.0) == 1
    # served from Triton's cache: the model itself did not see the request
    assert (after['modalscale_requests_total{modality="text"}']
            == before['modalscale_requests_total{modality="text"}'])
