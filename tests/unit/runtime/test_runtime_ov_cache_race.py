"""Engine openvino's cache under concurrent first loads (issue 24, item 0): Triton starts each Python-backend instance
as its own process, and a pod's instances (``instanceCount >= 2``, the ``fastest`` preset) initialise at the same
time on one empty cache (the pod's emptyDir). Before the fix two of them could write OpenVINO's compiled blob
(``CACHE_DIR``) in place at once while another read it half-written and removed it, so a model failed to load at
random (``filesystem error: cannot set permissions: No such file or directory [.../blobs/<n>.blob]``, or the process
killed by SIGBUS); counts before and after the fix: ``ov_engine.cache_lock``.

Here N real processes (spawn) repeat the image encoder's first load as the ``fastest`` preset does it (IR conversion,
FP32 compile, NNCF calibration of the INT8 image encoder, INT8 compile) on one fresh cache per round, in lock step,
with real OpenVINO and NNCF and a small convolutional trunk standing in for EfficientNet-Lite0 (the cache code does
not depend on the model), until a round fails or the bound; every process must load and give the same features."""

from __future__ import annotations

import multiprocessing
import os
import queue
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("openvino")
pytest.importorskip("nncf")

PROCESSES = 4
"""Instances starting at once (``fastest`` has 2 per pod; more processes make the race more frequent here)."""
ROUNDS = 6
"""At most this many rounds, each on a fresh empty cache."""
DEADLINE_S = 25.0
"""No new round starts after this many seconds (the first round always runs)."""


def _trunk() -> Any:
    """A small EfficientNet-like trunk (stem convolution, depthwise convolutions, 1x1 head): 7.2 M float parameters
    (a 29 MB IR and compiled blob, so that writing them takes a while) at 1.3 GFLOP for conversion's 224x224 example
    (conversion ~1.3 s); fixed weights, so every process builds the same model."""
    import torch
    from torch import nn

    class Trunk(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layers = nn.Sequential(
                nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
                nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32), nn.ReLU(),
                nn.Conv2d(32, 256, 1), nn.ReLU(),
                nn.Conv2d(256, 256, 3, stride=2, padding=1, groups=256), nn.ReLU(),
                nn.Conv2d(256, 1280, 1), nn.ReLU(),
                nn.Conv2d(1280, 1280, 3, stride=4, padding=1, groups=1280), nn.ReLU(),
                nn.Conv2d(1280, 2048, 1), nn.ReLU(),
                nn.Conv2d(2048, 2048, 1))

        def extract_features(self, x: torch.Tensor) -> torch.Tensor:
            return self.layers(x)  # type: ignore[no-any-return]

    return Trunk().eval()


def _input() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32)


def _first_load(tasks: Any, results: Any, barrier: Any) -> None:
    """Worker: for each cache directory from ``tasks``, wait for the others, then load as an instance of ``fastest``
    does (``MultimodalEncoder.image_model`` with engine openvino, INT8, an INT8 image threshold) and report
    ``("ok", fp32 features, int8 features)`` or ``("error", message)``; None ends it."""
    import logging

    import torch

    from modalscale.runtime.model import ov_engine
    from modalscale.runtime.repo_config import Precision

    logging.getLogger("nncf").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    model, x = _trunk(), _input()
    rng = np.random.default_rng(2)
    calibration = [rng.standard_normal((1, 3, 64, 64)).astype(np.float32) for _ in range(2)]
    while (cache := tasks.get()) is not None:
        os.environ[ov_engine.CACHE_ENV] = cache
        try:
            barrier.wait(timeout=120)
        except threading.BrokenBarrierError:  # the parent aborted: another worker died
            return
        try:
            fp32 = ov_engine.image_encoder(model, Precision.INT8, 1)
            int8 = ov_engine.image_encoder_int8(model, 1, lambda: calibration)
            results.put(("ok", fp32(x), int8(x)))
        except Exception as exc:  # the failure is the finding: report it to the parent
            results.put(("error", f"{type(exc).__name__}: {exc}"))


def run_rounds(processes: int, rounds: int, deadline_s: float,
               stop_on_failure: bool = True, log: Any = None) -> list[list[tuple[Any, ...]]]:
    """Each round's results (one per process, ``("ok", ...)`` or ``("error", message)``; a process that died is
    ``("error", "exit code ...")`` and ends the run), stopping after ``rounds``, ``deadline_s`` or
    (``stop_on_failure``) the first failing round; ``log(text)`` (optional) gets a line per round."""
    ctx = multiprocessing.get_context("spawn")
    tasks, results, barrier = ctx.Queue(), ctx.Queue(), ctx.Barrier(processes)
    workers = [ctx.Process(target=_first_load, args=(tasks, results, barrier), daemon=True) for _ in range(processes)]
    for w in workers:
        w.start()
    out: list[list[tuple[Any, ...]]] = []
    start = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="ov-race-") as tmp:
            while len(out) < rounds and (not out or time.monotonic() - start < deadline_s):
                cache = Path(tmp) / f"round-{len(out)}"
                for _ in workers:
                    tasks.put(str(cache))
                got: list[tuple[Any, ...]] = []
                dead: list[int] = []
                while len(got) < processes and not dead:
                    try:
                        got.append(results.get(timeout=5))
                    except queue.Empty:
                        dead = [w.exitcode for w in workers if w.exitcode is not None]
                got += [("error", f"exit code {code}") for code in dead]
                out.append(got)
                if log is not None:
                    errors = [r[1] for r in got if r[0] != "ok"]
                    log(f"round {len(out)} ({time.monotonic() - start:.0f} s): {len(errors)} of {processes} failed "
                        f"{[e.splitlines()[-1][:160] for e in errors[:2]]}")
                if dead or (stop_on_failure and any(r[0] != "ok" for r in got)):
                    break
    finally:
        barrier.abort()  # releases workers still waiting for a dead one
        for w in workers:
            if w.is_alive():
                tasks.put(None)
        for w in workers:
            w.join(timeout=10)
            if w.is_alive():
                w.kill()
                w.join()
    return out


def test_concurrent_first_loads_on_one_empty_cache_all_succeed() -> None:
    rounds = run_rounds(PROCESSES, ROUNDS, DEADLINE_S)
    failures = [(i, r[1]) for i, got in enumerate(rounds) for r in got if r[0] != "ok"]
    assert not failures, f"{len(failures)} failed loads in {len(rounds)} rounds: {failures[:3]}"
    for got in rounds:
        assert len(got) == PROCESSES
        fp32 = [r[1] for r in got]
        int8 = [r[2] for r in got]
        for a in fp32[1:]:
            np.testing.assert_array_equal(a, fp32[0])  # one model, whoever compiled or imported it
        for a in int8[1:]:
            np.testing.assert_array_equal(a, int8[0])
        assert not np.array_equal(int8[0], fp32[0])  # the quantized encoder, not the float one again
    import torch

    with torch.no_grad():
        ref = _trunk().extract_features(torch.from_numpy(_input())).numpy()
    np.testing.assert_allclose(rounds[0][0][1], ref, rtol=1e-4, atol=1e-4)


if __name__ == "__main__":  # measurement: python -m tests.unit.runtime.test_runtime_ov_cache_race [rounds]
    import sys

    t0 = time.monotonic()
    wanted = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    measured: list[list[tuple[Any, ...]]] = []
    while len(measured) < wanted:  # fresh workers after one died (SIGBUS)
        measured += run_rounds(PROCESSES, wanted - len(measured), 1e9, stop_on_failure=False,
                               log=lambda line: print(line, flush=True))
    failed = [sum(r[0] != "ok" for r in got) for got in measured]
    print(f"{sum(map(bool, failed))} of {len(measured)} rounds failed, {sum(failed)} of {len(measured) * PROCESSES} "
          f"loads, {time.monotonic() - t0:.0f} s")
