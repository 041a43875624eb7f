"""Open-loop replay of an arrival trace against the runtime, with per-modality latency statistics.

Each trace row is sent at its ``arrival_s`` (relative to the start) whether or not earlier requests have
finished (open loop, like real traffic), over the asyncio tritonclient. Images are real photographs resized
to the row's resolution; texts have exactly the row's token count.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from modalscale.runtime.client import AsyncMultimodalClient, InferenceError, Protocol
from modalscale.runtime.workload import TraceRow, photo_at, photo_names, text_of_tokens


@dataclass(frozen=True)
class RequestRecord:
    """Outcome of one replayed request."""

    index: int
    modality: str
    latency_s: float
    ok: bool
    error: str = ""


@dataclass(frozen=True)
class ModalityStats:
    """Latency statistics of one modality (or ``all``)."""

    modality: str
    requests: int
    errors: int
    throughput_rps: float
    """Successful requests per second of wall time."""
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float


@dataclass(frozen=True)
class LoadReport:
    """Summary of one replay."""

    wall_s: float
    stats: tuple[ModalityStats, ...]
    errors: dict[str, int] = field(default_factory=dict)
    """First line of each distinct error message -> count."""

    def by_modality(self) -> dict[str, ModalityStats]:
        """Stats keyed by modality (``all`` included)."""
        return {s.modality: s for s in self.stats}


def summarize(records: Sequence[RequestRecord], wall_s: float) -> LoadReport:
    """Compute throughput and latency percentiles (pure).

    Args:
        records: One record per request.
        wall_s: Wall time of the replay in seconds (> 0).
    Returns:
        Stats per modality present, then ``all``; percentiles over successful requests (numpy ``linear``
        interpolation), NaN when a modality has no successful request.
    """
    groups: dict[str, list[RequestRecord]] = {}
    for record in records:
        groups.setdefault(record.modality, []).append(record)
    stats = [_stats(name, groups[name], wall_s) for name in sorted(groups)]
    stats.append(_stats("all", list(records), wall_s))
    errors: dict[str, int] = {}
    for record in records:
        if not record.ok:
            key = record.error.splitlines()[0][:200] if record.error else "unknown"
            errors[key] = errors.get(key, 0) + 1
    return LoadReport(wall_s=wall_s, stats=tuple(stats), errors=errors)


def _stats(name: str, records: Sequence[RequestRecord], wall_s: float) -> ModalityStats:
    ok = np.array([r.latency_s for r in records if r.ok], dtype=float) * 1000.0
    if ok.size:
        p50, p95, p99 = (float(v) for v in np.percentile(ok, [50, 95, 99]))
        mean = float(ok.mean())
    else:
        p50 = p95 = p99 = mean = float("nan")
    return ModalityStats(modality=name, requests=len(records), errors=sum(1 for r in records if not r.ok),
                         throughput_rps=ok.size / wall_s if wall_s > 0 else float("nan"),
                         p50_ms=p50, p95_ms=p95, p99_ms=p99, mean_ms=mean)


def request_content(row: TraceRow, index: int, repeat_images: bool = False) -> tuple[list[bytes] | None, str | None]:
    """Images and text of trace row ``index``.

    Args:
        row: The trace row.
        index: Row position (selects photographs and words deterministically).
        repeat_images: Send byte-identical images for equal (photo, size) pairs (embedding/response cache
            friendly). By default 32 request-specific bytes are appended after each JPEG's end-of-image
            marker (decoders ignore them), so content hashes differ as they do for real uploads.
    Returns:
        ``(images or None, text or None)``.
    """
    names = photo_names()
    images = None
    if row.image_count:
        images = []
        for k in range(row.image_count):
            data = photo_at(names[(index + k) % len(names)], row.image_width, row.image_height)
            if not repeat_images:
                data = data + hashlib.sha256(f"{index}:{k}".encode()).digest()
            images.append(data)
    text = text_of_tokens(row.text_tokens, seed=index) if row.text_tokens else None
    return images, text


async def replay(trace: Sequence[TraceRow], url: str, protocol: Protocol = "grpc", model_name: str = "multimodal",
                 max_in_flight: int = 256, repeat_images: bool = False, time_scale: float = 1.0,
                 clock: Callable[[], float] = time.perf_counter, timeout_s: float = 60.0) -> LoadReport:
    """Replay ``trace`` open-loop and summarize.

    Args:
        trace: Rows sorted by ``arrival_s``.
        url: ``host:port`` of the gRPC or HTTP endpoint.
        max_in_flight: Cap on concurrent requests (arrivals beyond it wait; 256 is far above what 2 cores
            serve, so it only guards the client).
        time_scale: Multiply arrival times (0.5 replays twice as fast).
        timeout_s: Each request's deadline in seconds (:class:`AsyncMultimodalClient`); a request past it fails.
    Returns:
        The report; wall time runs from the first arrival slot to the last completion.
    """
    contents = [request_content(row, i, repeat_images) for i, row in enumerate(trace)]  # encode before timing
    client = AsyncMultimodalClient(url, protocol, model_name, timeout_s=timeout_s)
    gate = asyncio.Semaphore(max_in_flight)
    records: list[RequestRecord] = []

    async def one(i: int, row: TraceRow, start: float) -> None:
        scheduled = start + row.arrival_s * time_scale
        delay = scheduled - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        async with gate:
            images, text = contents[i]
            sent = min(scheduled, clock())  # latency from the scheduled arrival: no coordinated omission
            try:
                await client.infer(images=images, text=text)
                records.append(RequestRecord(i, row.modality, clock() - sent, True))
            except InferenceError as exc:
                records.append(RequestRecord(i, row.modality, clock() - sent, False, str(exc)))

    try:
        start = clock()
        await asyncio.gather(*(one(i, row, start) for i, row in enumerate(trace)))
        wall = clock() - start
    finally:
        await client.close()
    return summarize(sorted(records, key=lambda r: r.index), wall)


async def closed_loop(count: int, concurrency: int, url: str, rows: Sequence[TraceRow],
                      protocol: Protocol = "grpc", model_name: str = "multimodal", repeat_images: bool = False,
                      clock: Callable[[], float] = time.perf_counter) -> LoadReport:
    """Send ``count`` requests (cycling through ``rows``) with ``concurrency`` always in flight (saturation
    throughput, as perf_analyzer's concurrency mode does)."""
    contents = [request_content(rows[i % len(rows)], i, repeat_images) for i in range(count)]
    client = AsyncMultimodalClient(url, protocol, model_name)
    records: list[RequestRecord] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            images, text = contents[i]
            modality = rows[i % len(rows)].modality
            sent = clock()
            try:
                await client.infer(images=images, text=text)
                records.append(RequestRecord(i, modality, clock() - sent, True))
            except InferenceError as exc:
                records.append(RequestRecord(i, modality, clock() - sent, False, str(exc)))

    try:
        start = clock()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = clock() - start
    finally:
        await client.close()
    return summarize(sorted(records, key=lambda r: r.index), wall)
