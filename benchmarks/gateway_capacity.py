"""Added latency and CPU of the gateway at one replica's capacity rate, side by side with the direct path (issue 19).

Issue 19's figure: "Gateway overhead at one replica's capacity rate: added latency p50 <= 2 ms, p99 <= 10 ms; gateway
CPU <= 5 % of the replicas' CPU per request on the mixed capacity workload (images up to 1600x1200)".
``benchmarks/gateway_overhead.py`` measures the path's own cost at the low-load end (one request at a time, a
near-zero-work model); this script measures it where the issue asks, with nothing simulated:

* **The replica**: one real ``tritonserver`` serving the runtime's ``default`` preset (what an InferenceService gets
  with no runtime fields: the modality router in front of batched image / text / image+text models), sized for one
  core and pinned to the last CPU (``sched_setaffinity``, inherited by Triton and its Python stubs), as a replica
  on its own node.
* **The gateway**: ``modalscale gateway`` in its own process with the replica as its static endpoint, pinned with
  this client to the other CPUs, as the gateway pods and the clients run elsewhere than a replica.
* **The workload**: ``benchmarks/runtime_capacity.py``'s mixed capacity workload (text, image-only JPEG and PNG from
  224x224 to 1600x1200, several images, image + text; every request's image bytes distinct, so no cache hits).
* **Capacity**: the replica's closed-loop throughput through the direct path over gRPC whatever ``--protocol``
  (``runtime_capacity.measure``, concurrency 4) after a warm-up; the offered rates are ``--fractions`` of it (1.0 =
  the capacity rate).
* **Arrivals**: the inter-arrival gaps of a real trace (``--trace``: the Azure LLM 2023 conversation hour, or the
  Mooncake FAST'25 conversation hour; a window of ``--requests`` consecutive requests, its gaps scaled so that the
  window's mean rate is the offered rate; each round takes another window), or Poisson arrivals without one.
  Latency counts from each request's scheduled arrival, so a late client or a queue counts too.
* **Rows**: per offered rate and round, three rows in a shuffled order: ``direct A`` and ``direct A'`` (the same
  direct path twice: their difference is the A/A row, the noise floor) and ``gateway``; every row gets the same
  requests (their bytes re-salted) at the same arrival times. ``added`` = gateway minus direct A per percentile,
  per round, printed as median [min-max] over rounds beside A/A.
* **CPU**: the gateway process's CPU per request over the gateway rows, against the replica's (Triton and every
  stub process) over the same rows.
* **Time outside the replica** (``--server-trace``, on by default): at 0.8-1.0 of capacity a request's latency is
  mostly queueing inside the replica, and a few milliseconds of jitter there move every later request, so the A/A
  rows of the end-to-end table differ by tens of milliseconds and a 2 ms difference cannot be read from them. So
  Triton traces every request (``--trace-config`` mode ``triton``, level ``TIMESTAMPS``, rate 1), each request
  carries a KServe v2 ``id`` that Triton records as the trace's ``request_id``, and per request the time the
  replica held it (its frontend's ``HTTP_RECV_END`` / ``GRPC_WAITREAD_END`` to ``HTTP_SEND_END`` /
  ``GRPC_SEND_END``: queue, batching and compute) is taken from the client's own time for the call. What is left
  is the path outside the replica: the client, the connections and, in the gateway row, the gateway (its parsing,
  admission queue, balancing and second hop). ``added`` there is the gateway row's percentile minus direct A's,
  beside the same A/A. Requests waiting for a free connection or slot before Triton's frontend reads them count
  outside, on either path. Tracing costs the replica a little CPU on every row alike.

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/gateway_capacity.py \\
        --trace ../shared/data/azure_llm_2023_conv_1h.csv [--fractions 0.5,0.8,1.0] [--rounds 5] \\
        [--requests 200] [--protocol grpc] [--no-server-trace]

Needs at least 2 CPUs. Prints the machine's load average and steal before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from modalscale.runtime import proctree
from modalscale.runtime.client import AsyncMultimodalClient, InferenceError
from modalscale.runtime.repo_config import PRESETS
from modalscale.runtime.server import TritonProcess, free_port, write_repository
from modalscale.runtime.sweep import poisson_arrivals_s

ROWS = ("direct A", "direct A'", "gateway")
PERCENTILES = (50.0, 90.0, 99.0)
TRACE_LOG_FREQUENCY = 50
"""Traces per trace file: Triton writes its traces out every this many (not at exit), so the run ends with as many
untraced-id requests to push the last ones out."""
RECEIVED = ("HTTP_RECV_END", "GRPC_WAITREAD_END")
"""Triton's timestamps for "the frontend has read the request" (``GRPC_WAITREAD_START`` is when the handler began
waiting for a request, before this one arrived, so the start of the wait is not used)."""
SENT = ("HTTP_SEND_END", "GRPC_SEND_END")


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


capacity = _load("runtime_capacity")
open_loop_bench = _load("runtime_open_loop")
overhead = _load("gateway_overhead")


def trace_gaps_s(path: Path | None) -> NDArray[np.float64] | None:
    """Inter-arrival gaps (s) of a real trace: Azure's (``TIMESTAMP`` column) or Mooncake's (``timestamp_ms``)."""
    if path is None:
        return None
    from modalscale.autoscaler.traces import read_azure_llm_trace, read_mooncake_trace

    with path.open() as fh:
        head = fh.readline()
    trace = read_azure_llm_trace(path) if "TIMESTAMP" in head else read_mooncake_trace(path)
    return np.diff(trace.arrival_s)


def arrivals_s(gaps: NDArray[np.float64] | None, rate_rps: float, count: int, window: int, seed: int) -> list[float]:
    """``count`` arrival times (s from 0) at a mean ``rate_rps``: the ``window``-th block of ``count - 1`` consecutive
    trace gaps scaled to that mean (blocks wrap around the trace), or Poisson arrivals without a trace."""
    if gaps is None:
        return [float(a) for a in poisson_arrivals_s(rate_rps, count, seed=seed)]
    start = (window * (count - 1)) % max(1, gaps.size - count)
    block = gaps[start:start + count - 1]
    scaled = block * ((count - 1) / rate_rps / block.sum()) if block.sum() > 0 else np.full(count - 1, 1 / rate_rps)
    return [0.0] + [float(a) for a in np.cumsum(scaled)]


def trace_arguments(trace_file: Path) -> list[str]:
    """``tritonserver`` arguments that trace every request's timestamps into ``trace_file.<n>`` files."""
    return ["--trace-config", f"triton,file={trace_file}",
            "--trace-config", f"triton,log-frequency={TRACE_LOG_FREQUENCY}",
            "--trace-config", "rate=1", "--trace-config", "level=TIMESTAMPS"]


def replica_held_ms(records: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Per request id, the milliseconds Triton held the request: from its frontend having read it (:data:`RECEIVED`)
    to its having sent the response (:data:`SENT`), from Triton's trace records (mode ``triton``; a trace's records
    share its ``id``: one holds ``request_id``, the others one timestamp each, ``ns`` of a steady clock).

    Traces without a request id (the warm-up's), or without both timestamps (a composing model's child requests,
    which no frontend received), are left out.

    Raises:
        ValueError: two traces with both timestamps carry the same request id.
    """
    ids: dict[int, str] = {}
    received: dict[int, int] = {}
    sent: dict[int, int] = {}
    for record in records:
        trace = int(record["id"])
        if record.get("request_id"):
            ids[trace] = str(record["request_id"])
        for stamp in record.get("timestamps", ()):
            name, ns = stamp["name"], int(stamp["ns"])
            if name in RECEIVED:
                received[trace] = min(ns, received.get(trace, ns))
            elif name in SENT:
                sent[trace] = max(ns, sent.get(trace, ns))
    held: dict[str, float] = {}
    for trace, request_id in ids.items():
        if trace in received and trace in sent:
            if request_id in held:
                raise ValueError(f"request id {request_id!r} is in two traces that a frontend received")
            held[request_id] = (sent[trace] - received[trace]) / 1e6
    return held


def read_traces(trace_file: Path) -> list[dict[str, Any]]:
    """Every record of the ``trace_file.<n>`` files Triton wrote (each a JSON array)."""
    records: list[dict[str, Any]] = []
    for path in sorted(trace_file.parent.glob(trace_file.name + ".*")):
        records.extend(json.loads(path.read_text()))
    return records


async def open_loop(url: str, model: str, contents: list[tuple[list[bytes] | None, str | None]],
                    arrivals_s: list[float], protocol: str, ids: list[str]
                    ) -> tuple[list[tuple[str, float, float]], int]:
    """Send request i at ``arrivals_s[i]`` with KServe v2 id ``ids[i]``, whatever is in flight (as
    ``runtime_open_loop.open_loop``); returns ``([(id, latency_ms, call_ms)], errors)``: latency from the scheduled
    arrival, call time from the call's start (a late client not counted) to its answer."""
    client = AsyncMultimodalClient(url, protocol, model, timeout_s=600)  # type: ignore[arg-type]
    done: list[tuple[str, float, float]] = []
    errors = 0

    async def one(i: int, due: float) -> None:
        nonlocal errors
        images, text = contents[i]
        t0 = time.perf_counter()
        try:
            await client.infer(images=images, text=text, request_id=ids[i])
        except InferenceError:
            errors += 1
            return
        t1 = time.perf_counter()
        done.append((ids[i], 1000 * (t1 - due), 1000 * (t1 - t0)))

    start = time.perf_counter()
    tasks: list[asyncio.Task[None]] = []
    try:
        for i, at in enumerate(arrivals_s):
            delay = start + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, start + at)))
        await asyncio.gather(*tasks)
    finally:
        await client.close()
    return done, errors


def flush_traces(ctx: dict[str, Any]) -> None:
    """Send :data:`TRACE_LOG_FREQUENCY` small requests without an id, so Triton writes out the last traced ones."""
    texts: list[tuple[list[bytes] | None, str | None]] = [(None, f"flush {i}")
                                                          for i in range(TRACE_LOG_FREQUENCY)]
    asyncio.run(open_loop(ctx["direct_url"], ctx["model"], texts, [0.0] * len(texts), ctx["protocol"],
                          [""] * len(texts)))


def start_replica(work: Path, cpu: int, trace_file: Path | None = None) -> tuple[TritonProcess, str]:
    """The ``default`` preset for one core, pinned to ``cpu`` (this process is pinned there while Triton starts, so
    Triton and its stubs inherit it; the caller re-pins this process); tracing into ``trace_file`` when given."""
    variant = capacity.Variant("default", PRESETS["default"].replace(cpu_cores=1))

    repo = write_repository(capacity.repository_files(variant), work / "repo")
    os.sched_setaffinity(0, {cpu})
    server = TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                           exit_timeout_s=5, log_path=work / "tritonserver.log",
                           extra_args=trace_arguments(trace_file) if trace_file is not None else ())
    server.start(ready_timeout_s=900)
    return server, variant.name


def run_rate(ctx: dict[str, Any], fraction: float, k: int, rounds: int, requests: int, seed: int
             ) -> dict[str, Any]:
    """Every round of one offered rate: per row and round its percentiles (ms), its ``(id, call_ms)`` pairs and
    errors; CPU over gateway rows."""
    rate = fraction * ctx["capacity_rps"]
    rng = random.Random(seed + k)
    per_round: list[dict[str, NDArray[np.float64]]] = []
    calls: list[dict[str, list[tuple[str, float]]]] = []
    errors = dict.fromkeys(ROWS, 0)
    cpu = {"gateway": 0.0, "replica": 0.0, "answered": 0}
    for r in range(rounds):
        specs = capacity.workload(requests, seed=seed + 1000 * k + r)
        times = arrivals_s(ctx["gaps"], rate, requests, window=k * rounds + r, seed=seed + 1000 * k + r)
        order = list(ROWS)
        rng.shuffle(order)
        out: dict[str, NDArray[np.float64]] = {}
        round_calls: dict[str, list[tuple[str, float]]] = {}
        for row in order:
            contents = [capacity.encode(s, f"cap:{k}:{r}:{row}:{i}") for i, s in enumerate(specs)]
            url = ctx["gateway_url"] if row == "gateway" else ctx["direct_url"]
            before = {side: capacity._tree_cpu(ctx[f"{side}_pid"]) for side in ("gateway", "replica")}
            ids = [f"{k}:{r}:{row}:{i}" for i in range(len(times))]
            done, err = asyncio.run(open_loop(url, ctx["model"], contents, times, ctx["protocol"], ids))
            lat = [latency for _, latency, _ in done]
            round_calls[row] = [(rid, call_ms) for rid, _, call_ms in done]
            if row == "gateway":
                for side in ("gateway", "replica"):
                    cpu[side] += capacity._delta_cpu(before[side], capacity._tree_cpu(ctx[f"{side}_pid"]))
                cpu["answered"] += len(lat)
            errors[row] += err
            out[row] = np.percentile(lat, PERCENTILES) if lat else np.full(len(PERCENTILES), np.nan)
        per_round.append(out)
        calls.append(round_calls)
    return {"fraction": fraction, "rate_rps": rate, "rounds": per_round, "calls": calls, "errors": errors,
            "cpu": cpu}


def outside_percentiles(result: dict[str, Any], held_ms: dict[str, float]) -> tuple[list[dict[str, Any]], int]:
    """Per round and row, the percentiles (ms) of each answered request's call time less the time the replica held
    it (:func:`replica_held_ms`); and how many answered requests had no trace (left out)."""
    per_round: list[dict[str, Any]] = []
    untraced = 0
    for round_calls in result["calls"]:
        out: dict[str, Any] = {}
        for row, pairs in round_calls.items():
            outside = [call_ms - held_ms[rid] for rid, call_ms in pairs if rid in held_ms]
            untraced += len(pairs) - len(outside)
            out[row] = np.percentile(outside, PERCENTILES) if outside else np.full(len(PERCENTILES), np.nan)
        per_round.append(out)
    return per_round, untraced


def spread(values: list[float]) -> str:
    return f"{np.median(values):+8.2f} [{min(values):+.2f} to {max(values):+.2f}]"


def percentile_table(rounds: list[dict[str, Any]]) -> None:
    """Per row the median over rounds of each percentile, then A/A and added as median [min to max] over rounds."""
    print(f"{'row (ms, median of rounds)':<28}" + "".join(f"{f'p{int(p)}':>12}" for p in PERCENTILES))
    for row in ROWS:
        print(f"{row:<28}" + "".join(f"{np.median([r[row][i] for r in rounds]):>12.1f}"
                                     for i in range(len(PERCENTILES))))
    for label, a in (("A/A (A' - A)", "direct A'"), ("added (gateway - A)", "gateway")):
        cells = [spread([float(r[a][i] - r["direct A"][i]) for r in rounds]) for i in range(len(PERCENTILES))]
        print(f"{label:<28}" + "   ".join(cells))


def report(result: dict[str, Any], requests: int) -> None:
    rounds = result["rounds"]
    print(f"\noffered {result['fraction']:.2f} x capacity = {result['rate_rps']:.2f} req/s; {len(rounds)} rounds x "
          f"{requests} requests per row; errors {result['errors']}")
    print("end to end (from each request's scheduled arrival to its answer):")
    percentile_table(rounds)
    cpu = result["cpu"]
    if cpu["answered"]:
        g, rep = 1000 * cpu["gateway"] / cpu["answered"], 1000 * cpu["replica"] / cpu["answered"]
        print(f"CPU per answered request over the gateway rows: gateway {g:.2f} ms, replica {rep:.1f} ms "
              f"({100 * g / rep:.2f} % of the replica's)")


def machine_line(when: str) -> str:
    load = proctree.loadavg()
    return f"{when}: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


def measure_capacity(ctx: dict[str, Any], requests: int, seed: int) -> float:
    """Warm the replica up (the workload twice), then its closed-loop throughput (req/s) through the direct path,
    over gRPC whatever the run's protocol (``runtime_capacity.measure``)."""
    specs = capacity.workload(requests, seed=seed)
    open_loop_bench.warm_up(ctx["server"], [ctx["model"]], specs)
    window = capacity.measure(ctx["server"], ctx["model"], ctx["model"], -2, specs, concurrency=4)
    rps: float = (window.requests - window.errors) / window.wall_s
    print(f"capacity: closed loop over gRPC, concurrency 4, {window.requests} requests: {rps:.2f} req/s "
          f"({window.server_ms:.1f} replica CPU-ms per request, {window.errors} errors)")
    return rps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=None, help="Azure or Mooncake CSV whose gaps the arrivals take")
    parser.add_argument("--fractions", default="0.5,0.8,1.0", help="offered rates as fractions of the capacity")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200, help="requests per row and round")
    parser.add_argument("--capacity-requests", type=int, default=96)
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--no-server-trace", dest="server_trace", action="store_false",
                        help="no Triton trace, so no table of the time outside the replica")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        parser.error("needs at least 2 CPUs: one for the replica, the rest for the gateway and the client")
    fractions = [float(f) for f in args.fractions.split(",")]
    print("\n".join(capacity.header([], {})))
    print(f"replica pinned to CPU {cpus[-1]}; gateway and client to CPUs {cpus[:-1]}; protocol {args.protocol}; "
          f"arrivals {'gaps of ' + str(args.trace) if args.trace else 'Poisson'}")
    jiffies0 = proctree.cpu_jiffies()
    print(machine_line("before"))
    work = Path(__import__("tempfile").mkdtemp(prefix="bench-gateway-capacity-"))
    trace_file = work / "trace.json" if args.server_trace else None
    server, model = start_replica(work, cpus[-1], trace_file)
    os.sched_setaffinity(0, set(cpus[:-1]))
    gateway, ports = overhead.start_gateway(server, ready_timeout_s=60)
    assert server.pid is not None
    ctx: dict[str, Any] = {
        "server": server, "model": model, "protocol": args.protocol, "gaps": trace_gaps_s(args.trace),
        "replica_pid": server.pid, "gateway_pid": gateway.pid,
        "direct_url": server.grpc_url if args.protocol == "grpc" else server.http_url,
        "gateway_url": f"127.0.0.1:{ports['GRPC' if args.protocol == 'grpc' else 'HTTP']}"}
    results = []
    try:
        ctx["capacity_rps"] = measure_capacity(ctx, args.capacity_requests, args.seed)
        for k, fraction in enumerate(fractions):
            results.append(run_rate(ctx, fraction, k, args.rounds, args.requests, args.seed))
            report(results[-1], args.requests)
        if trace_file is not None:
            flush_traces(ctx)
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(30)
        server.stop(drain=False)
    if trace_file is not None:
        held_ms = replica_held_ms(read_traces(trace_file))
        print("\ntime outside the replica: each request's call time less the time Triton held it (its trace's "
              f"{'/'.join(RECEIVED)} to {'/'.join(SENT)}), ms:")
        for result in results:
            rounds, untraced = outside_percentiles(result, held_ms)
            print(f"\noffered {result['fraction']:.2f} x capacity; answered requests without a trace: {untraced}")
            percentile_table(rounds)
    print(f"{machine_line('after')}; steal "
          f"{100 * proctree.steal_fraction(jiffies0, proctree.cpu_jiffies()):.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
