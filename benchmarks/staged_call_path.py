"""Cost of the staged call path (issue 24): one-piece server against front + image encoder pool, at low load.

Three rows, each a real tritonserver layout on loopback, all at the default config (router, modality queues,
dynamic batching), FP32, 2 cores for the router sizing, and the embedding cache off (every image is encoded):

* ``one-piece A`` and ``one-piece A'``: two identical one-piece servers; A' / A is the A/A row (the noise floor);
* ``staged``: a ``front`` stage server whose models send each request's images over KServe v2 gRPC to an
  ``image-encoder`` stage server (the pool), while they encode the text.

The same requests (one client, one request at a time, HTTP) go to every row in interleaved order (shuffled per
request), in rounds; a row's latency is client wall time per request. Per modality it prints the median and p95 in
ms, and the ratio to A per round (median [min-max] over the rounds)::

    .venv/bin/python benchmarks/staged_call_path.py [--requests 100] [--rounds 5] [--seed 0]

``--requests`` is per modality and row. Prints the machine's load average before and after (a shared 2-core
machine moves the tails) and the git commit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from modalscale.devenv.provenance import code_version
from modalscale.runtime.client import MultimodalClient
from modalscale.runtime.repo_config import RuntimeConfig, Stage, build_repository
from modalscale.runtime.server import TritonProcess, free_port, write_repository
from modalscale.runtime.workload import fidelity_texts, photo_at, photo_names

ONE_PIECE = RuntimeConfig(embedding_cache=False, cpu_cores=2.0)
ROWS = ("one-piece A", "one-piece A'", "staged")
MODALITIES = ("image", "text", "image_text")
SIZES = ((640, 480), (320, 240), (1024, 768), (480, 640), (200, 150), (800, 600))


@contextlib.contextmanager
def started(cfg: RuntimeConfig, workdir: Path, name: str) -> Iterator[TritonProcess]:
    """A tritonserver serving ``cfg``'s repository (its log in ``workdir``)."""
    repo = write_repository(build_repository(cfg), workdir / f"{name}-repo")
    with TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                       log_path=workdir / f"{name}.log", exit_timeout_s=5).start(ready_timeout_s=900) as proc:
        yield proc


def requests_for(modality: str, count: int, seed: int) -> list[tuple[list[bytes] | None, str | None]]:
    """``count`` requests of ``modality``: one photo each (names and sizes cycled, every one distinct bytes) and/or a
    real text of 3 to ~300 words."""
    rng = random.Random(seed)
    texts = fidelity_texts(count, seed=seed)
    names = photo_names()
    out: list[tuple[list[bytes] | None, str | None]] = []
    for i in range(count):
        image = None
        if modality != "text":
            width, height = SIZES[rng.randrange(len(SIZES))]
            image = [photo_at(names[i % len(names)], width, height, "JPEG") + b"\xff\xfe" + i.to_bytes(4, "big")]
        out.append((image, texts[i] if modality != "image" else None))
    return out


def measure(clients: dict[str, MultimodalClient], requests: int, rounds: int, seed: int
            ) -> dict[tuple[str, str, int], list[float]]:
    """Latency in ms per (row, modality, round)."""
    rng = random.Random(seed)
    work = {m: requests_for(m, requests, seed + k) for k, m in enumerate(MODALITIES)}
    out: dict[tuple[str, str, int], list[float]] = {}
    per_round = max(1, requests // rounds)
    for row in ROWS:  # warm-up: every model instance once
        for m in MODALITIES:
            for images, text in work[m][:2]:
                clients[row].infer(images=images, text=text)
    for r in range(rounds):
        order = [(m, i) for m in MODALITIES for i in range(r * per_round, min(requests, (r + 1) * per_round))]
        rng.shuffle(order)
        for m, i in order:
            images, text = work[m][i]
            rows = list(ROWS)
            rng.shuffle(rows)
            for row in rows:
                start = time.perf_counter()
                clients[row].infer(images=images, text=text)
                out.setdefault((row, m, r), []).append((time.perf_counter() - start) * 1000)
    return out


def report(samples: dict[tuple[str, str, int], list[float]], rounds: int) -> None:
    """Median and p95 per row and modality; ratios to A per round, median [min-max]."""
    print(f"{'modality':<11} {'row':<13} {'n':>4} {'p50 ms':>8} {'p95 ms':>8}   "
          f"{'p50 / A':<22} {'p95 / A':<22}")
    for m in MODALITIES:
        for row in ROWS:
            allv = np.concatenate([samples[(row, m, r)] for r in range(rounds)])
            line = f"{m:<11} {row:<13} {len(allv):>4} {np.percentile(allv, 50):>8.1f} {np.percentile(allv, 95):>8.1f}"
            if row != ROWS[0]:
                for q in (50, 95):
                    ratios = [np.percentile(samples[(row, m, r)], q) / np.percentile(samples[(ROWS[0], m, r)], q)
                              for r in range(rounds)]
                    line += f"   {np.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]".ljust(25)
            print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100, help="requests per modality and row")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    print(f"git {code_version()}, {os.cpu_count()} CPUs, "
          f"load average before {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="staged-call-path-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        t0 = time.perf_counter()
        whole_a = stack.enter_context(started(ONE_PIECE, work, "a"))
        whole_b = stack.enter_context(started(ONE_PIECE, work, "b"))
        pool = stack.enter_context(started(ONE_PIECE.replace(stage=Stage.IMAGE_ENCODER), work, "encoder"))
        front = stack.enter_context(started(ONE_PIECE.replace(stage=Stage.FRONT, image_encoder_url=pool.grpc_url),
                                            work, "front"))
        print(f"4 servers ready in {time.perf_counter() - t0:.0f} s")
        clients = {row: stack.enter_context(MultimodalClient(proc.http_url, "http", timeout_s=300))
                   for row, proc in zip(ROWS, (whole_a, whole_b, front), strict=True)}
        t0 = time.perf_counter()
        samples = measure(clients, args.requests, args.rounds, args.seed)
        print(f"measured {sum(len(v) for v in samples.values())} requests in {time.perf_counter() - t0:.0f} s, "
              f"load average after {os.getloadavg()[0]:.2f}")
        report(samples, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
