"""A tenant over its budget is refused at the gateway (429 + Retry-After, gRPC RESOURCE_EXHAUSTED) while another
tenant is served by a real tritonserver; lifting the annotation admits it again without a restart.

The replica's own ``nv_inference_request_success`` says what reached it: a refused request never does.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections.abc import Callable

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from modalscale.api.annotations import TenantReject, reject_annotation_key
from modalscale.costmodel.showback import REFUSED_CODES, REQUESTS_METRIC
from modalscale.runtime.server import TritonProcess
from tests.integration.gateway.conftest import (
    MODEL,
    RunningGateway,
    endpoint,
    request_count,
    settled_request_count,
    text_request,
)

INFER = f"/v2/models/{MODEL}/infer"
HEADER = "x-modalscale-tenant"


def rejecting(tenants: tuple[str, ...], seconds: int) -> tuple[dict[str, str], dt.datetime]:
    until = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)).replace(microsecond=0)
    return {reject_annotation_key("ml", "acme-daily"): TenantReject("ml/acme-daily", tenants, until, 100).encode(),
            "unrelated": "x"}, until


def test_the_rejected_tenant_gets_429_with_retry_after_to_the_period_end_and_the_other_tenant_is_served(
        replicas: tuple[TritonProcess, TritonProcess], make_gateway: Callable[..., RunningGateway]) -> None:
    replica = replicas[0]
    annotations, until = rejecting(("acme",), 3600)
    gw = make_gateway([endpoint(replica)], annotations=annotations)
    before = settled_request_count(replica)
    with httpx.Client(base_url=gw.http, timeout=30) as client:
        refused = client.post(INFER, json=text_request(), headers={HEADER: "acme"})
        served = client.post(INFER, json=text_request(), headers={HEADER: "globex"})
        health = client.get("/v2/health/ready", headers={HEADER: "acme"})
    left_s = (until - dt.datetime.now(dt.UTC)).total_seconds()
    assert refused.status_code == 429
    assert left_s - 5 <= int(refused.headers["Retry-After"]) <= left_s + 5
    assert "acme" in refused.json()["error"] and "ml/acme-daily" in refused.json()["error"]
    assert served.status_code == 200 and health.status_code == 200  # only infer calls are refused
    assert request_count(replica) == before + 1  # the refused request never reached the replica
    assert gw.metric("modalscale_gateway_requests_total", tenant="acme", code="429") == 1
    assert gw.metric("modalscale_gateway_rejected_total", reason="TenantBudgetExceeded") == 1
    # Showback's USD per request leaves the refusal out (it cost no replica time) and counts the served request.
    assert sum(gw.metric(REQUESTS_METRIC, tenant="acme", code=c) for c in REFUSED_CODES) == 1
    assert gw.metric(REQUESTS_METRIC, tenant="globex") == gw.metric(REQUESTS_METRIC, tenant="globex", code="200") == 1


@pytest.mark.parametrize("path", [f"/v2/models/{MODEL}/generate", f"/v2/models/{MODEL}/generate_stream",
                                  f"/v2/models/{MODEL}/versions/1/generate", f"{INFER}/",
                                  f"/v2//models/{MODEL}/infer"])
def test_no_other_path_runs_the_model_past_the_tenant_budget(
        path: str, replicas: tuple[TritonProcess, TritonProcess], make_gateway: Callable[..., RunningGateway]) -> None:
    """Found by an adversarial probe (6 Dec 2026): a tenant refused on ``/infer`` was served on Triton's
    ``/generate``, past its budget, its admission and its features. The gateway answers every other spelling of a
    model call itself (generate: 501, infer with extra slashes: 404), for every tenant, and names the path to use."""
    replica = replicas[0]
    annotations, _ = rejecting(("acme",), 3600)
    gw = make_gateway([endpoint(replica)], annotations=annotations)
    before = settled_request_count(replica)
    with httpx.Client(base_url=gw.http, timeout=30) as client:
        answers = [client.post(path, json={"TEXT": "hello"}, headers={HEADER: tenant}) for tenant in ("acme", "globex")]
    code = 501 if "generate" in path else 404
    assert [a.status_code for a in answers] == [code, code], [a.text for a in answers]
    assert all("/infer only" in a.json()["error"] for a in answers), [a.text for a in answers]
    assert settled_request_count(replica) == before  # nothing reached the replica


def test_grpc_infer_of_the_rejected_tenant_gets_resource_exhausted_with_retry_after(
        replicas: tuple[TritonProcess, TritonProcess], make_gateway: Callable[..., RunningGateway]) -> None:
    from tritonclient.utils import InferenceServerException

    annotations, _ = rejecting(("acme",), 600)
    gw = make_gateway([endpoint(replicas[0])], annotations=annotations)
    text = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"hello"]], dtype=object))
    with grpcclient.InferenceServerClient(gw.grpc) as client:
        with pytest.raises(InferenceServerException) as exhausted:
            client.infer(MODEL, [text], headers={HEADER: "acme"})
        ok = client.infer(MODEL, [text], headers={HEADER: "globex"})
    assert exhausted.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert gw.metric(REQUESTS_METRIC, tenant="acme", code="RESOURCE_EXHAUSTED") == 1
    assert "RESOURCE_EXHAUSTED" in REFUSED_CODES  # not a request showback prices
    assert "over its budget" in (exhausted.value.message() or "")
    assert ok.as_numpy("SIZES") is not None
    # The trailing metadata carries Retry-After (a raw gRPC call shows it; tritonclient drops trailers).
    channel = grpc.insecure_channel(gw.grpc)
    try:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as raw:
            call(b"", metadata=((HEADER, "acme"),), timeout=10)
        trailers = dict(raw.value.trailing_metadata() or ())  # type: ignore[attr-defined]
        assert 590 <= int(trailers["retry-after"]) <= 600
    finally:
        channel.close()


def test_a_lifted_rejection_admits_the_tenant_without_a_restart_and_a_folded_tenant_is_still_refused(
        replicas: tuple[TritonProcess, TritonProcess], make_gateway: Callable[..., RunningGateway]) -> None:
    annotations, _ = rejecting(("acme",), 3600)
    gw = make_gateway([endpoint(replicas[0])], annotations=annotations, max_tenants=1)
    with httpx.Client(base_url=gw.http, timeout=30) as client:
        assert client.post(INFER, json=text_request(), headers={HEADER: "globex"}).status_code == 200
        # The gateway keeps 1 tenant name (globex): acme's label folds to "other", its budget still holds.
        assert client.post(INFER, json=text_request(), headers={HEADER: "acme"}).status_code == 429
        assert gw.metric("modalscale_gateway_requests_total", tenant="other", code="429") == 1
        gw.set_annotations({})
        assert client.post(INFER, json=text_request(), headers={HEADER: "acme"}).status_code == 200


def test_admission_latency_of_a_refusal(replicas: tuple[TritonProcess, TritonProcess],
                                        make_gateway: Callable[..., RunningGateway]) -> None:
    """Round trip of a refused request against a served one on the same keep-alive connection (printed; the
    figure for docs/benchmarks.md). A refusal does no body parsing and no replica call."""
    annotations, _ = rejecting(("acme",), 3600)
    gw = make_gateway([endpoint(replicas[0])], annotations=annotations)
    refused_ms, served_ms = [], []
    with httpx.Client(base_url=gw.http, timeout=30) as client:
        for _ in range(5):  # warm the connection and the replica
            client.post(INFER, json=text_request(), headers={HEADER: "globex"})
        for _ in range(200):
            t0 = time.perf_counter()
            assert client.post(INFER, json=text_request(), headers={HEADER: "acme"}).status_code == 429
            refused_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            assert client.post(INFER, json=text_request(), headers={HEADER: "globex"}).status_code == 200
            served_ms.append((time.perf_counter() - t0) * 1000)
    p50_r, p50_s = statistics.median(refused_ms), statistics.median(served_ms)
    p95_r = statistics.quantiles(refused_ms, n=20)[18]
    print(f"\nrefused (429) p50 {p50_r:.2f} ms p95 {p95_r:.2f} ms; served p50 {p50_s:.2f} ms; 200 each")
    assert p50_r < p50_s  # a refusal is cheaper than serving, never a wait
