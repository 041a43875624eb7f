"""The replicas' Deployment sizes Triton's response cache as ``modalscale runtime serve`` does: one figure,
:data:`modalscale.runtime.repo_config.RESPONSE_CACHE_BYTES` (64 MiB, docs/runtime-internals.md).

Found by review (7 Dec 2026): the Deployment passed ``--cache-config=local,size=268435456`` (256 MiB) while ``runtime
serve``, the runtime's benchmarks and the docs used 64 MiB, so a service measured locally ran in the cluster with 4x
the cache inside the same memory limit (3Gi on the real node, where 2Gi was already OOM-killed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from modalscale.api.inferenceservice import parse_isvc
from modalscale.operator.isvc.objects import build_deployment
from modalscale.runtime.repo_config import RESPONSE_CACHE_BYTES, RuntimeConfig, server_arguments
from tests.factories import inference_service


def triton_args(**runtime: Any) -> list[str]:
    spec = parse_isvc(inference_service("vc", "ml", runtime=runtime))
    args: list[str] = build_deployment(spec, 1, {"multimodal/config.pbtxt": ""})["spec"]["template"]["spec"][
        "containers"][0]["args"]
    return args


@pytest.mark.parametrize("cache", [True, False], ids=["on", "off"])
def test_the_deployment_sizes_the_response_cache_as_runtime_serve_does(cache: bool) -> None:
    served = server_arguments(RuntimeConfig.from_isvc_spec({"runtime": {"responseCache": cache}}))
    deployed = [a.split("=", 1)[1] for a in triton_args(responseCache=cache) if a.startswith("--cache-config=")]
    assert deployed == served[1:]  # runtime serve: ["--cache-config", VALUE]; the Deployment: --cache-config=VALUE
    if cache:
        assert deployed == [f"local,size={RESPONSE_CACHE_BYTES}"] and RESPONSE_CACHE_BYTES == 64 * 1024 * 1024


def test_the_crd_states_the_size_a_replica_spends_on_the_cache() -> None:
    crd = yaml.safe_load((Path(__file__).resolve().parents[3] / "crds" / "inferenceservices.modalscale.io.yaml")
                         .read_text())
    (version,) = crd["spec"]["versions"]
    runtime = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["runtime"]["properties"]
    assert f"{RESPONSE_CACHE_BYTES // 2**20} MiB" in runtime["responseCache"]["description"]
