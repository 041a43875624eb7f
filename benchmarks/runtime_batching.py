"""Side-by-side throughput and latency of the runtime's optimizations on the real tritonserver (not a test).

One tritonserver serves five variants of the built-in model (idle models cost no CPU); a mixed closed-loop
workload (text, image at several resolutions, image+text, several images) is sent to each in turn, the
whole round repeated ``--rounds`` times and the median round (by throughput) kept per variant: other work
shares the CPU, so only variants measured in the same round-robin are comparable.

Variants (cumulative):
  naive     max_batch_size 0: every request alone (--instances x --threads)
  dynamic   one queue, dynamic batching (max 8, 2 ms); texts padded to the longest, images one pass per bucket
  aware     router + one queue per modality (--aware-instances each), one pass per resolution/length bucket
  int8      + INT8 dynamic quantization of Linear layers (LayerNorm in float)
  cache     + embedding cache, with the workload re-sending byte-identical photos (cache-friendly)

Usage: ``python benchmarks/runtime_batching.py [--concurrency 8] [--requests 48] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import numpy as np

from modalscale.runtime.client import MultimodalClient, scrape_metrics
from modalscale.runtime.loadgen import LoadReport, closed_loop, replay
from modalscale.runtime.repo_config import Precision, RuntimeConfig, build_repository
from modalscale.runtime.server import TritonProcess, free_port, write_repository
from modalscale.runtime.workload import TraceRow, photo_bytes, synthetic_trace

ROWS = [  # arrival_s unused in closed loop
    TraceRow(0, 0, 0, 0, 16), TraceRow(0, 1, 224, 224, 0), TraceRow(0, 1, 640, 480, 32),
    TraceRow(0, 0, 0, 0, 64), TraceRow(0, 2, 320, 240, 0), TraceRow(0, 1, 1024, 768, 16),
    TraceRow(0, 0, 0, 0, 32), TraceRow(0, 1, 160, 120, 8),
]


def variants(instances: int, threads: int, aware_instances: int) -> dict[str, RuntimeConfig]:
    """The five cumulative variants. naive/dynamic run ``instances`` x ``threads``; the modality-aware ones run
    ``aware_instances`` x ``threads`` per modality model (three models behind the router)."""
    base = RuntimeConfig(instance_count=instances, intra_op_threads=threads, embedding_cache=False,
                         modality_aware_batching=False)
    aware = base.replace(instance_count=aware_instances, modality_aware_batching=True)
    return {
        "naive": base.replace(model_name="naive", max_batch_size=0),
        "dynamic": base.replace(model_name="dynamic"),
        "aware": aware.replace(model_name="aware"),
        "int8": aware.replace(model_name="int8", precision=Precision.INT8),
        "cache": aware.replace(model_name="cache", precision=Precision.INT8, embedding_cache=True),
    }


def fidelity(server: TritonProcess) -> float:
    """Cosine between the FP32 and INT8 embeddings of one image+text request."""
    results = []
    for name in ("aware", "int8"):
        with MultimodalClient(server.http_url, model_name=name) as client:
            results.append(client.infer(images=[photo_bytes("coffee")], text="a cup of coffee on the table"))
    return float(np.dot(results[0].embedding, results[1].embedding))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--open-loop-rps", type=float, default=0.0,
                        help="Also replay a Poisson trace at this rate against naive, dynamic and aware (0: skip)")
    parser.add_argument("--open-loop-s", type=float, default=20.0)
    parser.add_argument("--aware-instances", type=int, default=1,
                        help="Instances of each per-modality model (3 models share the cores)")
    args = parser.parse_args()

    configs = variants(args.instances, args.threads, args.aware_instances)
    repo = Path(tempfile.mkdtemp(prefix="bench-repo-"))
    for cfg in configs.values():
        write_repository(build_repository(cfg), repo)
    server = TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                           exit_timeout_s=5)
    server.start(ready_timeout_s=600)
    runs: dict[str, list[LoadReport]] = {name: [] for name in configs}
    try:
        for name in configs:  # warm-up: first passes allocate and tune kernels
            asyncio.run(closed_loop(len(ROWS), 2, server.grpc_url, ROWS, model_name=name))
        for _ in range(args.rounds):
            for name in configs:
                runs[name].append(asyncio.run(closed_loop(args.requests, args.concurrency, server.grpc_url, ROWS,
                                                          model_name=name, repeat_images=(name == "cache"))))
        open_loop: dict[str, list[LoadReport]] = {"naive": [], "dynamic": [], "aware": []}
        if args.open_loop_rps > 0:
            for seed in range(args.rounds):
                trace = synthetic_trace(args.open_loop_rps, args.open_loop_s, seed=seed)
                for name in open_loop:
                    open_loop[name].append(asyncio.run(replay(trace, server.grpc_url, model_name=name)))
        cosine = fidelity(server)
        metrics = scrape_metrics(server.metrics_url)
    finally:
        server.stop()

    best = {name: sorted(reports, key=lambda r: _all(r).throughput_rps)[len(reports) // 2]
            for name, reports in runs.items()}
    base = _all(best["naive"])
    print(f"\nconcurrency={args.concurrency} requests={args.requests} rounds={args.rounds} "
          f"instances={args.instances} threads={args.threads} aware_instances={args.aware_instances} "
          f"(median round per variant)\n")
    print(f"{'variant':<9} {'req/s':>7} {'x naive':>8} {'p50 ms':>7} {'p99 ms':>7} {'p99 x naive':>11} "
          f"{'text p99':>9} {'image p99':>10} {'img+txt p99':>12} {'errors':>7}")
    for name, report in best.items():
        s, by = _all(report), report.by_modality()
        p99 = {m: by[m].p99_ms if m in by else float("nan") for m in ("text", "image", "image_text")}
        print(f"{name:<9} {s.throughput_rps:7.2f} {s.throughput_rps / base.throughput_rps:8.2f} {s.p50_ms:7.0f} "
              f"{s.p99_ms:7.0f} {s.p99_ms / base.p99_ms:11.2f} {p99['text']:9.0f} {p99['image']:10.0f} "
              f"{p99['image_text']:12.0f} {s.errors:7d}")
    print("round throughputs (req/s): " + "; ".join(
        f"{name} " + ",".join(f"{_all(r).throughput_rps:.1f}" for r in reports) for name, reports in runs.items()))
    if args.open_loop_rps > 0:
        print(f"\nopen loop: Poisson {args.open_loop_rps} req/s for {args.open_loop_s} s, {args.rounds} traces "
              f"(same traces for every variant); worst per-trace p99 and median p50, in ms")
        print(f"{'variant':<9} {'text p99':>9} {'image p99':>10} {'img+txt p99':>12} {'all p99':>8} {'all p50':>8}")
        for name, reports in open_loop.items():
            pooled = {m: [] for m in ("text", "image", "image_text", "all")}
            for report in reports:
                for m, st in report.by_modality().items():
                    pooled[m].append(st.p99_ms)
            p50 = float(np.median([_all(r).p50_ms for r in reports]))
            print(f"{name:<9} {max(pooled['text']):9.0f} {max(pooled['image']):10.0f} "
                  f"{max(pooled['image_text']):12.0f} {max(pooled['all']):8.0f} {p50:8.0f}")
    hits = metrics.get('modalscale_embedding_cache_lookups_total{result="hit"}', 0.0)
    misses = metrics.get('modalscale_embedding_cache_lookups_total{result="miss"}', 0.0)
    print(f"\nINT8 vs FP32 embedding cosine (coffee + text): {cosine:.4f}")
    print(f"embedding cache (variant 'cache'): {hits:.0f} hits, {misses:.0f} misses")
    for name, cfg in configs.items():
        models = [cfg.modality_model_name(m) for m in ("image", "text", "image_text")] if cfg.uses_router else [name]
        execs = sum(metrics.get(f'nv_inference_exec_count{{model="{m}",version="1"}}', 0.0) for m in models)
        reqs = sum(metrics.get(f'nv_inference_request_success{{model="{m}",version="1"}}', 0.0) for m in models)
        if execs:
            print(f"{name:<9} mean batch {reqs / execs:.2f} requests per execution of the encoder models")
    return 0


def _all(report: LoadReport):
    return report.by_modality()["all"]


if __name__ == "__main__":
    raise SystemExit(main())
