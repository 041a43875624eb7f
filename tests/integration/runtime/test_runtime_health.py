"""A Python-backend stub killed (SIGKILL, as the OOM killer does) under a real tritonserver: the pod's probe check
(modalscale.runtime.health) goes unready and not-live, so the Service stops sending to the replica and the kubelet
restarts it.

Seen before the fix (Triton from nvidia-pytriton 0.7.0): after SIGKILL of a stub, ``/v2/models/<name>/ready`` and
``/v2/health/ready`` kept answering 200 (the pod's old httpGet probes), every request to that model failed with
``Stub process '<model>_0_0' is not healthy.``, and the stub stayed an unreaped zombie, never restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from modalscale.runtime.client import InferenceError, MultimodalClient
from modalscale.runtime.health import check, dead_stubs, processes
from modalscale.runtime.proctree import descendants
from modalscale.runtime.repo_config import RuntimeConfig
from modalscale.runtime.server import free_port, serve_config


def _probe(port: int, server_pid: int, *extra: str) -> subprocess.CompletedProcess[str]:
    """The probe's command for this test's server only (``--server-pid``): a pod sees one ``tritonserver``, this
    machine may run others beside the test (the suite's other lanes, a test that kills a stub on purpose), whose dead
    stubs the default (every visible server) would report (CI, 7 Dec 2026: "died (pid 2383 ...)" before this test
    killed anything)."""
    return subprocess.run([sys.executable, "-m", "modalscale.runtime.health", "--http-port", str(port),
                           "--server-pid", str(server_pid), *extra], capture_output=True, text=True, timeout=60)


def test_a_killed_stub_makes_the_replica_unready_and_not_live(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # As scripts/test.sh runs it: this virtualenv's python3 first on PATH (see runtime/conftest.py).
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    config = RuntimeConfig(max_batch_size=0, modality_aware_batching=False)
    with serve_config(config, tmp_path / "repo", http_port=free_port(), grpc_port=free_port(),
                      metrics_port=free_port(), log_path=tmp_path / "triton.log", exit_timeout_s=5) as server:
        port = int(server.http_url.rsplit(":", 1)[1])
        assert server.pid is not None
        with MultimodalClient(server.http_url) as c:
            assert c.infer(text="a table").modality == "text"
        assert check(port, "multimodal", processes(), server.pid) is None
        ready, live = _probe(port, server.pid, "--model", "multimodal"), _probe(port, server.pid)
        assert (ready.returncode, ready.stdout.strip()) == (0, "ok"), ready
        assert (live.returncode, live.stdout.strip()) == (0, "ok"), live

        # One model, one instance: one stub, which every request goes through.
        stubs = [p for p in descendants(server.pid) if p.comm.startswith("triton_python")]
        assert len(stubs) == 1, stubs
        os.kill(stubs[0].pid, signal.SIGKILL)

        deadline = time.monotonic() + 60
        while not dead_stubs(processes(), server.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p.pid for p in dead_stubs(processes(), server.pid)] == [stubs[0].pid]
        # The fault itself: requests now fail, while Triton's own endpoint says ready (printed, not asserted:
        # a later Triton may see it).
        with MultimodalClient(server.http_url) as c, pytest.raises(InferenceError, match="not healthy"):
            c.infer(text="a table")
        triton_says = httpx.get(f"http://{server.http_url}/v2/models/multimodal/ready").status_code
        print(f"\nTriton's /v2/models/multimodal/ready after the stub was killed: {triton_says}")

        reason = check(port, "multimodal", processes(), server.pid)
        assert reason is not None and str(stubs[0].pid) in reason, reason
        ready, live = _probe(port, server.pid, "--model", "multimodal"), _probe(port, server.pid)
        assert ready.returncode == 1 and "stub" in ready.stdout, ready
        assert live.returncode == 1 and "stub" in live.stdout, live
    # Stopped: the check reports the server gone, not healthy.
    assert check(port, "multimodal", processes(), None) is not None
