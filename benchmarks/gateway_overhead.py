"""Added latency of the gateway at low load: one client, one request at a time, direct vs through the gateway.

One real tritonserver on loopback serves a near-zero-work Python-backend model (it returns the sizes of its inputs),
so what differs between the rows is the path, not the model. The gateway runs as ``modalscale gateway`` in its own
process (as in a pod), with the replica as a static endpoint. Rows, measured in interleaved rounds (the order is
shuffled per round, so drift on a shared machine spreads over every row):

* ``direct A`` and ``direct A'``: the same direct path twice; their difference is the A/A row, the noise floor;
* ``gateway``: the same request through the gateway; ``added`` = gateway minus direct A, per percentile.

The same for gRPC (``tritonclient.grpc``) when ``--grpc`` is given. The issue's target (issue 19) is added latency
p50 <= 2 ms and p99 <= 10 ms at one replica's capacity rate; this script measures the low-load end (no queueing), so
it shows the path's own cost::

    .venv/bin/python benchmarks/gateway_overhead.py [--requests 300] [--rounds 5] [--image] [--grpc]

Prints the machine's load average before and after (a shared 2-core machine moves the tails).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from modalscale.runtime.server import TritonProcess, free_port, write_repository

MODEL = "echo"
CONFIG = f'''name: "{MODEL}"
backend: "python"
max_batch_size: 0
input [
  {{ name: "IMAGES" data_type: TYPE_STRING dims: [ 1, -1 ] optional: true }},
  {{ name: "TEXT" data_type: TYPE_STRING dims: [ 1, 1 ] optional: true }}
]
output [ {{ name: "SIZES" data_type: TYPE_INT64 dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
'''
MODEL_PY = '''
import os
import site
import sys

_before = list(sys.path)  # the stub ignores PYTHONPATH: add it as the runtime's generated model.py does
for _entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    if _entry:
        site.addsitedir(_entry)
sys.path[:] = [_p for _p in sys.path if _p not in _before] + _before

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            images = pb_utils.get_input_tensor_by_name(r, "IMAGES")
            text = pb_utils.get_input_tensor_by_name(r, "TEXT")
            sizes = [0 if images is None else images.as_numpy().size, 0 if text is None else text.as_numpy().size]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SIZES", np.array(sizes, dtype=np.int64))]))
        return out
'''


def png(width: int, height: int) -> bytes:
    """A valid 8-bit grey PNG (zeros)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + bytes(width) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def http_request(image: bool) -> tuple[bytes, dict[str, str]]:
    """A text request (JSON), or a text + one 640x480 PNG request (binary tensor extension)."""
    text = {"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["a photo of a cat on a sofa"]}
    if not image:
        return json.dumps({"inputs": [text]}).encode(), {"Content-Type": "application/json"}
    img = png(640, 480)
    blob = struct.pack("<I", len(img)) + img
    head = json.dumps({"inputs": [{"name": "IMAGES", "datatype": "BYTES", "shape": [1, 1],
                                   "parameters": {"binary_data_size": len(blob)}}, text]}).encode()
    return head + blob, {"Inference-Header-Content-Length": str(len(head)),
                         "Content-Type": "application/octet-stream"}


def start_gateway(replica: TritonProcess, extra_env: dict[str, str] | None = None, ready_timeout_s: float = 30
                  ) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    """``modalscale gateway`` in its own process (as in a pod), the replica as its static endpoint, ``extra_env``
    (``MODALSCALE_GATEWAY_*``) on top; returns it when its ``/readyz`` answers, and its ports by name.

    Raises:
        RuntimeError: It exited or was not ready within ``ready_timeout_s``.
    """
    ports = {"HTTP": free_port(), "GRPC": free_port(), "METRICS": free_port()}
    env = {**os.environ, **{f"MODALSCALE_GATEWAY_{k}_PORT": str(v) for k, v in ports.items()},
           "MODALSCALE_GATEWAY_LOG_LEVEL": "WARNING", "MODALSCALE_GATEWAY_SHUTDOWN_DELAY_S": "0", **(extra_env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "modalscale.cli", "gateway", "--endpoints",
                             f"{replica.host}:{replica.http_port}:{replica.grpc_port}"], env=env)
    deadline = time.monotonic() + ready_timeout_s
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{ports['METRICS']}/readyz", timeout=1).status_code == 200:
                return proc, ports
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("modalscale gateway did not start")
        time.sleep(0.2)


def http_runner(url: str, body: bytes, headers: dict[str, str]) -> tuple[Callable[[int], list[float]], Any]:
    client = httpx.Client(timeout=30)  # one keep-alive connection per row

    def run(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            r = client.post(url, content=body, headers=headers)
            out.append((time.perf_counter() - t0) * 1000.0)
            if r.status_code != 200:
                raise RuntimeError(f"{url}: {r.status_code} {r.text[:200]}")
        return out
    return run, client


def grpc_runner(target: str, image: bool) -> tuple[Callable[[int], list[float]], Any]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(target)
    inputs = [grpcclient.InferInput("TEXT", [1, 1], "BYTES")]
    inputs[0].set_data_from_numpy(np.array([[b"a photo of a cat on a sofa"]], dtype=object))
    if image:
        inputs.append(grpcclient.InferInput("IMAGES", [1, 1], "BYTES"))
        inputs[1].set_data_from_numpy(np.array([[png(640, 480)]], dtype=object))

    def run(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            client.infer(MODEL, inputs)
            out.append((time.perf_counter() - t0) * 1000.0)
        return out
    return run, client


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc/<pid>/stat``, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(rows: dict[str, Callable[[int], list[float]]], requests: int, rounds: int, seed: int,
            cpu_pids: dict[str, int]) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Interleaved rounds: each round runs every row ``requests // rounds`` times, in a shuffled order.

    Returns:
        Latencies per row (ms), and CPU microseconds per request of each process in ``cpu_pids`` over the
        gateway row's requests (the gateway's own, and the replica's for comparison).
    """
    rng = random.Random(seed)
    for run in rows.values():
        run(30)  # warm-up: connections, the model's first call
    samples: dict[str, list[float]] = {name: [] for name in rows}
    cpu = {name: 0.0 for name in cpu_pids}
    gateway_row = [name for name in rows if "gateway" in name][0]
    for _ in range(rounds):
        order = list(rows)
        rng.shuffle(order)
        for name in order:
            before = {k: cpu_s(pid) for k, pid in cpu_pids.items()} if name == gateway_row else {}
            samples[name] += rows[name](max(1, requests // rounds))
            for k, pid in cpu_pids.items() if name == gateway_row else ():
                cpu[k] += cpu_s(pid) - before[k]
    n = len(samples[gateway_row])
    return {name: np.array(v) for name, v in samples.items()}, {k: v / n * 1e6 for k, v in cpu.items()}


def report(title: str, measured: tuple[dict[str, np.ndarray], dict[str, float]], base: str, twin: str,
           gateway: str) -> None:
    samples, cpu_us = measured
    pct = {name: (np.percentile(v, 50), np.percentile(v, 90), np.percentile(v, 99)) for name, v in samples.items()}
    print(f"\n{title}   (ms; n = {len(samples[base])} per row)")
    print(f"{'row':<24}{'p50':>9}{'p90':>9}{'p99':>9}")
    for name, (p50, p90, p99) in pct.items():
        print(f"{name:<24}{p50:>9.3f}{p90:>9.3f}{p99:>9.3f}")
    for label, a, b in (("A/A (A' - A)", twin, base), ("added (gateway - A)", gateway, base)):
        d = [pct[a][i] - pct[b][i] for i in range(3)]
        print(f"{label:<24}{d[0]:>+9.3f}{d[1]:>+9.3f}{d[2]:>+9.3f}")
    print("CPU per request through the gateway (us; clock-tick resolution, 10 ms per process and row): "
          + ", ".join(f"{k} {v:.0f}" for k, v in cpu_us.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per row (split over the rounds)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--image", action="store_true", help="send text + one 640x480 PNG instead of text only")
    parser.add_argument("--grpc", action="store_true", help="also measure gRPC (tritonclient.grpc)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    tmp = Path(tempfile.mkdtemp(prefix="gateway-overhead-"))
    repo = write_repository({f"{MODEL}/config.pbtxt": CONFIG, f"{MODEL}/1/model.py": MODEL_PY}, tmp / "repo")
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + old_path
    replica = TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                            exit_timeout_s=5, stop_timeout_s=10).start()
    os.environ["PATH"] = old_path
    gateway, ports = start_gateway(replica)
    clients: list[Any] = []
    assert replica.pid is not None
    pids = {"gateway": gateway.pid, "tritonserver": replica.pid}
    try:
        body, headers = http_request(args.image)
        path = f"/v2/models/{MODEL}/infer"
        rows = {}
        for name, url in (("HTTP direct A", f"http://{replica.http_url}{path}"),
                          ("HTTP direct A'", f"http://{replica.http_url}{path}"),
                          ("HTTP gateway", f"http://127.0.0.1:{ports['HTTP']}{path}")):
            rows[name], client = http_runner(url, body, headers)
            clients.append(client)
        report("HTTP/REST, " + ("text + 640x480 PNG" if args.image else "text"),
               measure(rows, args.requests, args.rounds, args.seed, pids), "HTTP direct A", "HTTP direct A'",
               "HTTP gateway")
        if args.grpc:
            grows = {}
            for name, target in (("gRPC direct A", replica.grpc_url), ("gRPC direct A'", replica.grpc_url),
                                 ("gRPC gateway", f"127.0.0.1:{ports['GRPC']}")):
                grows[name], client = grpc_runner(target, args.image)
                clients.append(client)
            report("gRPC, " + ("text + 640x480 PNG" if args.image else "text"),
                   measure(grows, args.requests, args.rounds, args.seed, pids), "gRPC direct A", "gRPC direct A'",
                   "gRPC gateway")
    finally:
        for client in clients:
            client.close()
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(30)
        replica.stop(drain=False)
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
