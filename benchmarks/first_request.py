"""The first request on a new replica, with and without the model's warm-up (issue 19: a start from zero's held
request waits for the pod's start and then for its own first request).

Each round starts a real tritonserver (the nvidia-pytriton wheel's, as the runtime tests do) on the demo replica's
runtime configuration (torch FP32, one instance, one intra-op thread, batching up to 8, no modality-aware queues, no
embedding cache; the demo gives it 450m, ``real_node.py``'s starts from zero 250m, this script's default)
inside a cgroup with a CFS quota of ``--cpu`` cores (cgroup v1 ``cpu`` controller or v2 ``cpu.max``; root needed),
the same quota the kubelet gives a pod of that CPU limit. Once the server is ready it sends the request a start from
zero sends in ``benchmarks/real_node.py`` (a 320 x 240 photograph and a short text, a new connection), then
``--steady`` more the same way, one at a time. Arms, in a rotated order per round: the model's warm-up on (the
default), off (model parameter ``warm_up: false``), and on again (the A/A row).

Per arm (median [min-max] over rounds): time to ready (process start -> ready), the first request, ready + first
(what a held client waits for of the server itself) and the median of the steady requests; ratios of the medians
against ``off``.

Usage: .venv/bin/python benchmarks/first_request.py [--rounds 6] [--cpu 0.25] [--steady 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from modalscale.runtime.client import MultimodalClient
from modalscale.runtime.repo_config import RuntimeConfig, build_repository, server_arguments
from modalscale.runtime.server import TritonProcess, free_port, write_repository
from modalscale.runtime.workload import photo_at

ARMS = ("on", "off", "on (A/A)")
CONFIG = RuntimeConfig(instance_count=1, intra_op_threads=1, modality_aware_batching=False, max_batch_size=8,
                       preferred_batch_sizes=(4, 8), embedding_cache=False)
"""The demo replica's runtime (``modalscale.demo.run.Demo._isvc_body``, real node)."""


@contextlib.contextmanager
def cpu_quota(cores: float) -> Iterator[None]:
    """Run the body's child processes in a new cgroup limited to ``cores`` (CFS quota over a 100 ms period): this
    process joins it for the body (its children inherit it) and goes back to its own cgroup after (:func:`main`
    removes the cgroup at exit). Raises OSError without root or a cpu controller."""
    period_us = 100_000
    quota_us = max(1000, int(cores * period_us))
    name = f"modalscale-first-request-{os.getpid()}"
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    root = Path("/sys/fs/cgroup") if v2 else Path("/sys/fs/cgroup/cpu")
    own = next((line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                if (line.startswith("0::") if v2 else "cpu" in line.split(":", 2)[1].split(","))), None)
    if own is None:
        raise OSError(f"no {'cgroup v2' if v2 else 'cpu controller'} line in /proc/self/cgroup: cannot set a CPU quota")
    group = root / name
    group.mkdir(exist_ok=True)
    if v2:
        (group / "cpu.max").write_text(f"{quota_us} {period_us}")
    else:
        (group / "cpu.cfs_period_us").write_text(str(period_us))
        (group / "cpu.cfs_quota_us").write_text(str(quota_us))
    (group / "cgroup.procs").write_text(str(os.getpid()))
    try:
        yield
    finally:
        (root / own.lstrip("/") / "cgroup.procs").write_text(str(os.getpid()))


def one(arm: str, cores: float, steady: int, image: bytes, work: Path) -> tuple[float, float, list[float]]:
    """Start a server for ``arm`` under the quota, time it to ready, then its first and ``steady`` later requests
    (seconds each)."""
    repo = work / "repo"
    files = build_repository(CONFIG)
    if arm == "off":
        files = {path: text + ('parameters {\n  key: "warm_up"\n  value: { string_value: "false" }\n}\n'
                               if path.endswith("config.pbtxt") else "") for path, text in files.items()}
    write_repository(files, repo)
    port = free_port()
    server = TritonProcess(model_repository=repo, extra_args=list(server_arguments(CONFIG)), http_port=port,
                           grpc_port=free_port(), metrics_port=free_port(), log_path=work / "tritonserver.log",
                           exit_timeout_s=5)
    try:
        with cpu_quota(cores):
            started = time.monotonic()
            server.start()
        ready_s = time.monotonic() - started
        latencies = []
        for k in range(1 + steady):
            with MultimodalClient(f"127.0.0.1:{port}", model_name=CONFIG.model_name, timeout_s=120) as client:
                sent = time.monotonic()
                client.infer(images=[image], text=f"a start from zero, number {k}")
                latencies.append(time.monotonic() - sent)
    finally:
        server.stop()
    return ready_s, latencies[0], latencies[1:]


def spread(values: list[float], unit: float = 1.0, digits: int = 2) -> str:
    v = sorted(x * unit for x in values)
    return f"{statistics.median(v):.{digits}f} [{v[0]:.{digits}f}-{v[-1]:.{digits}f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--cpu", type=float, default=0.25, help="the servers' CPU quota in cores")
    parser.add_argument("--steady", type=int, default=5, help="requests after the first, one at a time")
    args = parser.parse_args()
    # The Python backend's stub runs this interpreter's packages (as scripts/test.sh and the demo run it).
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    image = photo_at("coffee", 320, 240)
    rows: dict[str, list[tuple[float, float, list[float]]]] = {arm: [] for arm in ARMS}
    print(f"first request after ready: {args.rounds} rounds, servers under a CPU quota of {args.cpu} cores, "
          f"load {os.getloadavg()[0]:.1f}")
    try:
        for r in range(args.rounds):
            for arm in ARMS[r % len(ARMS):] + ARMS[:r % len(ARMS)]:
                with tempfile.TemporaryDirectory() as work:
                    ready_s, first_s, steady_s = one(arm, args.cpu, args.steady, image, Path(work))
                rows[arm].append((ready_s, first_s, steady_s))
                print(f"  round {r + 1} {arm:9s}: ready {ready_s:.2f} s, first {first_s * 1000:.0f} ms, steady "
                      f"{', '.join(f'{x * 1000:.0f}' for x in steady_s)} ms; load {os.getloadavg()[0]:.1f}",
                      flush=True)
    finally:
        for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpu")):
            with contextlib.suppress(OSError):
                (root / f"modalscale-first-request-{os.getpid()}").rmdir()
    base = {k: statistics.median(v) for k, v in (
        ("ready", [x[0] for x in rows["off"]]), ("first", [x[1] for x in rows["off"]]),
        ("sum", [x[0] + x[1] for x in rows["off"]]))}
    print("\narm        time to ready s          first request ms        ready + first s          steady ms")
    for arm in ARMS:
        ready = [x[0] for x in rows[arm]]
        first = [x[1] for x in rows[arm]]
        both = [x[0] + x[1] for x in rows[arm]]
        steady = [statistics.median(x[2]) for x in rows[arm] if x[2]]
        print(f"{arm:9s}  {spread(ready)} ({statistics.median(ready) / base['ready']:.2f}x)  "
              f"{spread(first, 1000, 0)} ({statistics.median(first) / base['first']:.2f}x)  "
              f"{spread(both)} ({statistics.median(both) / base['sum']:.2f}x)  "
              f"{spread(steady, 1000, 0) if steady else '-'}")


if __name__ == "__main__":
    main()
