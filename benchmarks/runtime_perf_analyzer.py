"""Second opinion from a client nobody here wrote: Triton's ``perf_analyzer`` against naive and INT8 (not a test).

One tritonserver serves ``naive``, ``int8_smoothquant`` (the earlier ``fastest`` preset without its embedding
cache) and ``fastest_no_cache`` (the ``fastest`` preset, engine openvino, without its embedding cache: perf_analyzer
sends the same bytes every time, which the cache would answer); for ``--rounds`` rounds, in a
shuffled order, ``perf_analyzer`` drives each model at a fixed concurrency over gRPC with one image+text request
(a 640x480 JPEG photograph and a 40-word text). Server CPU per request comes from ``/proc`` (tritonserver and
every stub) divided by Triton's own success counter, so the figure does not depend on this script's client;
perf_analyzer's throughput and latency are printed as it reports them (wall clock: on a shared machine only the
CPU ratio is comparable across runs). Its stability check is relaxed (``-s 999``, 3 windows): on the shared machine
it failed to see 3 windows within 50 % of each other, and the CPU figure does not depend on it.

The ``perf_analyzer`` binary of the tritonclient 2.51 wheel needs ``libb64.so.0d`` (Debian ``libb64-0d``) and CUDA 12's
``libcudart.so.12`` (torch brings CUDA 13). The script sets both up itself (:func:`ensure_dependencies`): as root it
installs ``libb64-0d`` with apt-get when the loader does not know it (else it says which command to run), and it
installs the ``nvidia-cuda-runtime-cu12`` pin of pyproject's ``perf-analyzer`` extra with ``pip --target`` into
``~/.cache/modalscale/perf-analyzer/<pin>`` (not into the venv) unless a ``libcudart.so.12`` is already found in the
venv or in ``--cudart-dir``. So it runs from a fresh clone after ``scripts/test.sh``'s set-up (network needed once).

Usage: ``python benchmarks/runtime_perf_analyzer.py [--rounds 3] [--concurrency 2] [--requests 40] [--cudart-dir DIR]``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from pathlib import Path

import numpy as np

from modalscale.runtime import proctree
from modalscale.runtime.client import scrape_metrics
from modalscale.runtime.repo_config import PRESETS, Precision, build_repository
from modalscale.runtime.server import TritonProcess, free_port, write_repository
from modalscale.runtime.workload import fidelity_texts, photo_at

MODELS = {"naive": PRESETS["naive"], "int8_smoothquant": PRESETS["naive"].replace(precision=Precision.INT8),
          "fastest_no_cache": PRESETS["fastest"].replace(embedding_cache=False)}


def serialized_bytes(*items: bytes) -> bytes:
    """Triton's wire form of a BYTES tensor: each element as a 4-byte little-endian length, then its bytes."""
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def input_json(path: Path) -> Path:
    """perf_analyzer's ``--input-data`` file with one image+text request."""
    image = photo_at("chelsea", 640, 480)
    text = fidelity_texts(1, seed=5)[0]
    text = " ".join((text.split() * 40)[:40])
    data = {"data": [{
        "IMAGES": {"content": {"b64": base64.b64encode(serialized_bytes(image)).decode()}, "shape": [1, 1]},
        "TEXT": {"content": {"b64": base64.b64encode(serialized_bytes(text.encode())).decode()}, "shape": [1, 1]},
    }]}
    path.write_text(json.dumps(data))
    return path


ROOT = Path(__file__).resolve().parent.parent
CACHE = Path.home() / ".cache" / "modalscale" / "perf-analyzer"


def cudart_requirement(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The pinned ``nvidia-cuda-runtime-cu12==...`` of pyproject's ``perf-analyzer`` extra (the one source of it)."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["perf-analyzer"]
    return next(r for r in extras if r.startswith("nvidia-cuda-runtime-cu12=="))


def find_cudart(*roots: Path) -> Path | None:
    """The directory holding ``libcudart.so.12`` below any of ``roots`` (a wheel puts it in
    ``nvidia/cuda_runtime/lib``), or None."""
    for root in roots:
        if root.is_dir():
            for hit in sorted(root.rglob("libcudart.so.12")):
                return hit.parent
    return None


def ensure_dependencies(cudart_dir: Path | None) -> Path:
    """Make ``perf_analyzer``'s two shared libraries loadable; returns the directory to put on LD_LIBRARY_PATH.

    Raises:
        SystemExit: libb64 is missing and this is not root (the message names the apt-get command), or pip failed.
    """
    known = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    if "libb64.so.0d" not in known:
        if os.geteuid() != 0:
            raise SystemExit("perf_analyzer needs libb64.so.0d: sudo apt-get install libb64-0d")
        print("installing Debian's libb64-0d (perf_analyzer links libb64.so.0d)", flush=True)
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "libb64-0d"], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    requirement = cudart_requirement()
    target = CACHE / requirement.replace("==", "-")
    found = find_cudart(*(p for p in (cudart_dir,) if p is not None), Path(sysconfig.get_paths()["purelib"]) / "nvidia",
                        target)
    if found is not None:
        return found
    print(f"installing {requirement} into {target} (perf_analyzer links libcudart.so.12)", flush=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                          requirement], check=False)
    found = find_cudart(target)
    if pip.returncode != 0 or found is None:
        raise SystemExit(f"could not install {requirement} into {target} (pip exit {pip.returncode})")
    return found


def tree_cpu_s(pid: int) -> dict[int, float]:
    return {p.pid: p.cpu_s for p in proctree.tree_cpu_s(pid).values()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--requests", type=int, default=40, help="requests per measurement window")
    parser.add_argument("--cudart-dir", type=Path, default=None,
                        help="a directory holding libcudart.so.12 (default: found or installed, see above)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    binary = shutil.which("perf_analyzer")
    if binary is None:
        parser.error("perf_analyzer not found on PATH (it ships in the tritonclient wheel)")
    env = dict(os.environ)
    cudart = ensure_dependencies(args.cudart_dir)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(cudart), env.get("LD_LIBRARY_PATH")]))
    check = subprocess.run([binary, "--help"], capture_output=True, text=True, env=env, check=False)
    if "error while loading shared libraries" in check.stderr:
        raise SystemExit(f"perf_analyzer cannot start: {check.stderr.strip()}")
    print(f"perf_analyzer: {binary}; libcudart.so.12 from {cudart}", flush=True)
    load0, jiffies0 = proctree.loadavg(), proctree.cpu_jiffies()
    print(f"before: load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} (shared machine)")
    work = Path(tempfile.mkdtemp(prefix="bench-pa-"))
    repo = work / "repo"
    for name, cfg in MODELS.items():
        write_repository(build_repository(cfg.replace(model_name=name)), repo)
    data = input_json(work / "input.json")
    server = TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                           exit_timeout_s=5, temp_paths=[work])
    server.start(ready_timeout_s=900)
    rows: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in MODELS}
    try:
        assert server.pid is not None
        rng = random.Random(args.seed)
        for rnd in range(args.rounds):
            order = list(MODELS)
            rng.shuffle(order)
            for name in order:
                key = f'nv_inference_request_success{{model="{name}",version="1"}}'
                before_ok, before_cpu = scrape_metrics(server.metrics_url).get(key, 0.0), tree_cpu_s(server.pid)
                out = subprocess.run(
                    [binary, "-m", name, "-u", server.grpc_url, "-i", "grpc", "--input-data", str(data),
                     "--concurrency-range", str(args.concurrency), "--measurement-mode", "count_windows",
                     "--measurement-request-count", str(args.requests), "-s", "999", "-r", "3"],
                    capture_output=True, text=True, env=env, check=False, timeout=900)
                after_cpu, after_ok = tree_cpu_s(server.pid), scrape_metrics(server.metrics_url).get(key, 0.0)
                if out.returncode != 0:
                    print(out.stdout[-2000:], out.stderr[-2000:])
                    raise SystemExit(f"perf_analyzer failed on {name} (exit {out.returncode})")
                done = after_ok - before_ok
                cpu_ms = 1000 * sum(c - before_cpu.get(p, 0.0) for p, c in after_cpu.items()) / max(1.0, done)
                thr = re.search(r"Throughput: ([\d.]+) infer/sec", out.stdout)
                p99 = re.search(r"p99 latency: (\d+) usec", out.stdout)
                avg = re.search(r"Avg latency: (\d+) usec", out.stdout)
                rows[name].append((cpu_ms, float(thr.group(1)) if thr else float("nan"),
                                   int(p99.group(1)) / 1000 if p99 else float("nan"),
                                   int(avg.group(1)) / 1000 if avg else float("nan")))
                print(f"round {rnd + 1} {name}: {done:.0f} requests, server {cpu_ms:.1f} CPU-ms/req, perf_analyzer "
                      f"{rows[name][-1][1]:.2f} infer/s, avg {rows[name][-1][3]:.0f} ms, "
                      f"p99 {rows[name][-1][2]:.0f} ms",
                      flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    load1, jiffies1 = proctree.loadavg(), proctree.cpu_jiffies()
    print(f"after: load average {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; steal "
          f"{100 * proctree.steal_fraction(jiffies0, jiffies1):.2f} %")
    ratios = {name: [a[0] / b[0] for a, b in zip(rows["naive"], rows[name], strict=True)] for name in MODELS
              if name != "naive"}
    for name, values in rows.items():
        cpu = [v[0] for v in values]
        print(f"{name:<17} server CPU-ms/req {np.median(cpu):.1f} [{min(cpu):.1f}-{max(cpu):.1f}], perf_analyzer "
              f"throughput {np.median([v[1] for v in values]):.2f} infer/s, "
              f"p99 {np.median([v[2] for v in values]):.0f} ms")
    for name, r in ratios.items():
        print(f"capacity {name} vs naive, paired per round: {np.median(r):.2f} [{min(r):.2f}-{max(r):.2f}] (one "
              f"image+text request shape, {args.concurrency} in flight)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
