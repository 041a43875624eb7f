"""Real tritonservers as replicas (loopback ports, a small Python-backend model: a user's own model, as the gateway
sees any) and the real gateway in a thread with its own event loop, fed by a static endpoint source.

No Kubernetes here: the EndpointSlice watch is the only part not exercised (its parsing has unit tests).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from modalscale.gateway.balancer import Endpoint
from modalscale.gateway.endpoints import StaticSource
from modalscale.gateway.isvc_watch import AnnotationSource, StaticAnnotations
from modalscale.gateway.server import Gateway
from modalscale.gateway.settings import GatewaySettings
from modalscale.runtime.server import TritonProcess, free_port, write_repository

MODEL = "byo"

CONFIG = f'''name: "{MODEL}"
backend: "python"
max_batch_size: 0
input [
  {{ name: "IMAGES" data_type: TYPE_STRING dims: [ 1, -1 ] optional: true }},
  {{ name: "TEXT" data_type: TYPE_STRING dims: [ 1, 1 ] optional: true }}
]
output [
  {{ name: "SIZES" data_type: TYPE_INT64 dims: [ 3 ] }},
  {{ name: "PAD" data_type: TYPE_UINT8 dims: [ -1 ] }}
]
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
'''

MODEL_PY = '''
import os
import site
import sys
import time

_before = list(sys.path)  # the stub ignores PYTHONPATH: add it as the runtime's generated model.py does
for _entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    if _entry:
        site.addsitedir(_entry)
sys.path[:] = [_p for _p in sys.path if _p not in _before] + _before

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """SIZES = [images, image bytes, text bytes]; a text "sleep:S" sleeps S seconds first; PAD = N zero bytes
    for a text "pad:N" (a large response), else none; a text "unavailable:..." is answered with an UNAVAILABLE
    error. byo_inflight_requests counts the requests inside execute (Triton's pending gauge counts only queued
    ones)."""

    def initialize(self, args):
        self.family = pb_utils.MetricFamily(name="byo_inflight_requests", description="requests inside execute",
                                            kind=pb_utils.MetricFamily.GAUGE)
        self.inflight = self.family.Metric(labels={"model": "byo"})

    def execute(self, requests):
        self.inflight.increment(len(requests))
        try:
            return self._execute(requests)
        finally:
            self.inflight.increment(-len(requests))

    def _execute(self, requests):
        out = []
        for r in requests:
            images = pb_utils.get_input_tensor_by_name(r, "IMAGES")
            text = pb_utils.get_input_tensor_by_name(r, "TEXT")
            imgs = [] if images is None else list(images.as_numpy().ravel())
            txt = b"" if text is None else bytes(text.as_numpy().ravel()[0])
            if txt.startswith(b"sleep:"):
                time.sleep(float(txt[6:].split()[0]))
            if txt.startswith(b"unavailable:"):  # the replica's own answer, as a front whose image encoders are down
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    txt.decode(), pb_utils.TritonError.UNAVAILABLE)))
                continue
            sizes = np.array([len(imgs), sum(len(i) for i in imgs), len(txt)], dtype=np.int64)
            pad = np.zeros(int(txt[4:]) if txt.startswith(b"pad:") else 0, dtype=np.uint8)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SIZES", sizes), pb_utils.Tensor("PAD", pad)]))
        return out
'''


def start_replica(tmp: Path) -> TritonProcess:
    """One tritonserver on free loopback ports serving :data:`MODEL`."""
    repo = write_repository({f"{MODEL}/config.pbtxt": CONFIG, f"{MODEL}/1/model.py": MODEL_PY}, tmp / "repo")
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + old_path  # as the runtime tests do
    try:
        server = TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                               log_path=tmp / "tritonserver.log", exit_timeout_s=5, stop_timeout_s=10)
        return server.start(ready_timeout_s=120)
    finally:
        os.environ["PATH"] = old_path


def endpoint(server: TritonProcess) -> Endpoint:
    return Endpoint(server.host, server.http_port, server.grpc_port)


def _series(text: str, name: str) -> int:
    """The value of ``name`` for :data:`MODEL` in a replica's ``/metrics`` text (0 when absent)."""
    m = re.search(rf'^{name}\{{[^}}]*model="{MODEL}"[^}}]*\}} (\S+)$', text, re.M)
    return int(float(m.group(1))) if m else 0


def request_count(server: TritonProcess, outcome: str = "success") -> int:
    """``nv_inference_request_<outcome>`` of :data:`MODEL` on the replica's own metrics endpoint."""
    return _series(httpx.get(server.metrics_url, timeout=5).text, f"nv_inference_request_{outcome}")


SETTLE_TIMEOUT_S = 30.0
"""Longest wait for a replica to have nothing in flight: above the longest request any gateway test sends (``sleep:6``
in the autoscaling test), with room for a loaded machine."""


def settled_request_count(server: TritonProcess, outcome: str = "success", quiet_s: float = 0.2,
                          timeout_s: float = SETTLE_TIMEOUT_S) -> int:
    """:func:`request_count` once nothing is in flight on the replica: the replicas are shared by the session, and a
    request an earlier test left in flight (a client's timeout, a gateway stopped mid-request) may still complete on
    them; a count read as a baseline must not include it. Nothing is in flight when the model's own
    ``byo_inflight_requests`` (inside ``execute``) and Triton's ``nv_inference_pending_request_count`` (queued) are 0
    at two reads ``quiet_s`` apart, the count unchanged between them. The count alone staying put for 0.5 s, as this
    waited before, does not say so: a request running longer shows no movement until it ends (a machine at load 7-8
    stretches one). Raises ``AssertionError`` when it never settles."""
    def read() -> tuple[int, int]:
        text = httpx.get(server.metrics_url, timeout=5).text
        return (_series(text, f"nv_inference_request_{outcome}"),
                _series(text, "byo_inflight_requests") + _series(text, "nv_inference_pending_request_count"))

    deadline = time.monotonic() + timeout_s
    last = read()
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = read()
        if now == last and now[1] == 0:
            return now[0]
        last = now
    raise AssertionError(f"{server.metrics_url}: requests in flight or nv_inference_request_{outcome} still moving "
                         f"after {timeout_s} s (count, in flight: {last})")


@pytest.fixture(scope="session")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonProcess, TritonProcess]]:
    """Two replicas for the whole session."""
    a = start_replica(tmp_path_factory.mktemp("replica-a"))
    try:
        b = start_replica(tmp_path_factory.mktemp("replica-b"))
        try:
            yield a, b
        finally:
            b.stop(drain=False)
    finally:
        a.stop(drain=False)


class RunningGateway:
    """A :class:`Gateway` on its own event loop in a daemon thread; tests talk to it over loopback."""

    def __init__(self, settings: GatewaySettings, endpoints: Sequence[Endpoint], with_activation: bool,
                 annotations: dict[str, str] | None = None, budget: AnnotationSource | None = None) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.source = StaticSource(endpoints)
        self.budget = StaticAnnotations(annotations) if annotations is not None else None
        self.activations: list[float] = []
        activate = self._activate if with_activation else None
        self.gateway = Gateway(settings, self.source, activate, host="127.0.0.1", budget=self.budget or budget)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.call(self.gateway.start())

    async def _activate(self) -> None:
        self.activations.append(self.loop.time())

    def call(self, coro: Any, timeout_s: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def set_endpoints(self, endpoints: Sequence[Endpoint]) -> None:
        self.loop.call_soon_threadsafe(self.source.set, list(endpoints))

    def set_annotations(self, annotations: dict[str, str]) -> None:
        """What the InferenceService watch would report (the gateway was made with ``annotations=``)."""
        assert self.budget is not None
        self.call(self._set_annotations(annotations))

    async def _set_annotations(self, annotations: dict[str, str]) -> None:
        assert self.budget is not None
        self.budget.set(annotations)
        await asyncio.sleep(0.05)  # the source's task hands them to the gateway on this loop

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.settings.http_port}"

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.settings.grpc_port}"

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the gateway's own series ``name`` whose labels include ``labels``."""
        value = 0.0
        for family in self.gateway.metrics.registry.collect():
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    value += sample.value
        return value

    def stop(self) -> None:
        self.call(self.gateway.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def make_gateway() -> Iterator[Callable[..., RunningGateway]]:
    """``make_gateway(endpoints, with_activation=False, annotations=None, **settings)``: a started gateway, stopped
    after the test; ``annotations``: the InferenceService's (tenant rejections), changed with ``set_annotations``."""
    started: list[RunningGateway] = []

    def make(endpoints: Sequence[Endpoint], with_activation: bool = False,
             annotations: dict[str, str] | None = None, **overrides: Any) -> RunningGateway:
        base = GatewaySettings(http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                               queue_timeout_s=10.0, drain_timeout_s=5.0)
        gw = RunningGateway(replace(base, **overrides), endpoints, with_activation, annotations)
        started.append(gw)
        return gw

    yield make
    for gw in started:
        gw.stop()


def text_request(text: str = "hello world") -> dict[str, Any]:
    """A KServe v2 JSON infer request with one text."""
    return {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [text]}]}
