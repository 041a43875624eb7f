"""The local ``tritonserver`` command line matches what the operator's pods run where the autoscaler needs it."""

from __future__ import annotations

from pathlib import Path

from modalscale.api.inferenceservice import parse_isvc
from modalscale.operator.isvc.objects import build_deployment
from modalscale.runtime.server import SUMMARY_LATENCIES_ARG, TritonDistribution, TritonProcess
from tests.factories import inference_service


def _pod_args() -> list[str]:
    """The ``tritonserver`` args of a BuiltIn InferenceService's pod."""
    body = inference_service("vc", "ml", uid="u-1", generation=1, resources={"cpu": "2", "memory": "8Gi"},
                             scaling={"mode": "Fixed", "replicas": 1})
    dep = build_deployment(parse_isvc(body), 1, {"multimodal/config.pbtxt": ""})
    return list(dep["spec"]["template"]["spec"]["containers"][0]["args"])


def test_local_server_exports_latency_quantiles_like_the_operators_pods() -> None:
    dist = TritonDistribution(root=Path("/opt/triton"), libs=Path("/opt/libs"))
    command = TritonProcess(Path("/repo"), extra_args=["--cache-config", "local,size=1"]).command(dist, Path("/b"))
    assert command[0] == "/opt/triton/bin/tritonserver"
    assert command.count(SUMMARY_LATENCIES_ARG) == 1
    assert command[-2:] == ["--cache-config", "local,size=1"]  # extra arguments still come last
    assert SUMMARY_LATENCIES_ARG == "--metrics-config=summary_latencies=true"
    assert SUMMARY_LATENCIES_ARG in _pod_args()
