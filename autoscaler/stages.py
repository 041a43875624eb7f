"""The p95 target of a staged service split between its stages (issue 24; pure).

A staged InferenceService (``spec.stages``) answers each request in its front pool (text encoder + fusion), which
calls the image encoder pool for the request's images and waits for it. The service has one p95 target
(``spec.scaling.targetP95LatencyMilliseconds``); :func:`split_slo` gives the pool its share of it, by the measured
time each stage spends on the requests that carry images, over the same metrics window:

- ``pool_ms``   = the time the pool's requests spend executing per second of traffic: Σ rate × execution ms of
  its classes (each request waits for its whole batch's execution: ``observed_service_ms x mean_batch_size``);
- ``front_ms``  = the front's time per second for its image and image+text classes (the same sum) minus
  the time those requests waited on the pool (the pool's request rate × its mean request duration, queue
  included): the front executes synchronously, so its measured time contains the pool's;
- ``share``     = ``pool_ms / (pool_ms + front_ms)``, kept within ``[MIN_SHARE, MAX_SHARE]`` so that neither
  stage is left without a budget by one noisy window;
- the pool's target = ``share × target``.

The pool is then sized so that its own p95 stays within that share
(:func:`modalscale.autoscaler.policy.stage_latency_need`, beside its Utilization rule); the front keeps the whole
target, because its measured time, and so its sizing, already contains the pool's answer. Issue 24 asks for a
split by measured stage times; the proportional rule and its bounds are this module's choice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from modalscale.autoscaler.features import Modality
from modalscale.autoscaler.metrics_reading import MetricsReading
from modalscale.autoscaler.policy import WorkloadClass

MIN_SHARE = 0.1
"""Least share of the target the pool gets (and 1 - ``MAX_SHARE`` the front keeps for itself)."""
MAX_SHARE = 0.9
"""Largest share of the target the pool gets."""
IMAGE_CLASSES = (Modality.IMAGE, Modality.IMAGE_TEXT)
"""The front's classes whose requests call the image encoder pool."""


@dataclass(frozen=True, slots=True)
class SloSplit:
    """The pool's part of the service's p95 target.

    Attributes:
        image_encoder_target_ms: The pool's p95 target, ms; None = not split this window (``message`` says why:
            the pool is then sized by its Utilization rule alone).
        share: ``image_encoder_target_ms / target_ms``; None when not split.
        pool_ms_per_s: Time the image requests spent executing in the pool per second of traffic, ms/s.
        front_ms_per_s: Time they spent in the front itself per second (its measured time less the pool's), ms/s.
        message: How the split was made, or why it was not.
    """

    image_encoder_target_ms: float | None
    share: float | None
    pool_ms_per_s: float | None
    front_ms_per_s: float | None
    message: str


def _timed_ms_per_s(classes: Iterable[WorkloadClass]) -> float | None:
    """Σ rate × the time a request spends executing (its share of the busy slot time × the batch it ran in: the
    whole execution) over classes with traffic, ms/s; None when one of them has no observed time or none has
    traffic."""
    total, seen = 0.0, False
    for c in classes:
        if c.rate_rps <= 0:
            continue
        if c.observed_service_ms is None:
            return None
        total += c.rate_rps * c.observed_service_ms * c.mean_batch_size
        seen = True
    return total if seen else None


def split_slo(target_p95_ms: float, front: MetricsReading | None, pool: MetricsReading | None) -> SloSplit:
    """Split a staged service's p95 target between its front and its image encoder pool (pure; module docstring).

    Args:
        target_p95_ms: ``spec.scaling.targetP95LatencyMilliseconds``, ms (> 0).
        front: The front's reading of this interval (the service's client-facing model); None = not read.
        pool: The pool's reading of the same interval (``component="image-encoder"``); None = not read.
    Returns:
        The split; not split (``image_encoder_target_ms`` None) when either reading is missing or unusable,
        neither has image traffic with observed times, or the pool's mean request duration is unknown.
    Raises:
        ValueError: ``target_p95_ms`` <= 0.
    """
    if not target_p95_ms > 0:
        raise ValueError(f"target_p95_ms must be > 0, got {target_p95_ms!r}")

    def unsplit(why: str) -> SloSplit:
        return SloSplit(None, None, None, None, f"p95 target not split between the stages: {why}")

    if front is None or front.workload is None:
        return unsplit("the front's metrics are not readable")
    if pool is None or pool.workload is None:
        return unsplit("the pool's metrics are not readable")
    front_ms = _timed_ms_per_s(c for c in front.workload if c.modality in IMAGE_CLASSES)
    pool_ms = _timed_ms_per_s(pool.workload)
    pool_rps = sum(c.rate_rps for c in pool.workload)
    latency_ms = pool.extra.get("mean_latency_ms")
    if front_ms is None or pool_ms is None:
        return unsplit("no image request with an observed time in this window (front or pool)")
    if latency_ms is None:
        return unsplit("the pool's mean request duration is unknown")
    own_ms = max(0.0, front_ms - pool_rps * latency_ms)
    share = min(MAX_SHARE, max(MIN_SHARE, pool_ms / (pool_ms + own_ms) if pool_ms + own_ms > 0 else MAX_SHARE))
    pool_target_ms = share * target_p95_ms
    return SloSplit(pool_target_ms, share, pool_ms, own_ms,
                    f"p95 target {target_p95_ms:.0f} ms split by measured stage time: pool {pool_ms:.0f} ms/s, "
                    f"front {own_ms:.0f} ms/s of image requests -> pool {share:.0%} = {pool_target_ms:.0f} ms")


def front_pool_figures(pool: MetricsReading | None, ready_replicas: int, slots_per_replica: int) -> dict[str, Any]:
    """What a staged front's decision is given of its image encoder pool (pure; ``Observation.image_encoder_*``).

    Args:
        pool: The pool's reading of this interval (``component="image-encoder"``); None = not read.
        ready_replicas: The pool's ready replicas (its Deployment's ``readyReplicas``).
        slots_per_replica: The pool's ``instanceCount``.
    Returns:
        ``{"image_encoder_wait_ms": the pool's mean request duration less its mean execution per request, ms, at
        least 0 (the time a front's image request waits in the pool's queue; None without a mean duration or an
        observed execution time), "image_encoder_queued_requests": its Triton pending count now (None = unknown),
        "image_encoder_ready_slots": ready_replicas x slots_per_replica}``; every value None when ``pool`` is None
        or unusable.
    """
    if pool is None or pool.workload is None:
        return {"image_encoder_wait_ms": None, "image_encoder_queued_requests": None,
                "image_encoder_ready_slots": None}
    latency_ms = pool.extra.get("mean_latency_ms")
    rps = sum(c.rate_rps for c in pool.workload)
    exec_ms = _timed_ms_per_s(pool.workload)  # Σ rate x execution ms: each request waits for its whole batch
    wait_ms = None if latency_ms is None or exec_ms is None or rps <= 0 else max(0.0, latency_ms - exec_ms / rps)
    return {"image_encoder_wait_ms": wait_ms, "image_encoder_queued_requests": pool.queued_requests,
            "image_encoder_ready_slots": ready_replicas * slots_per_replica}


def split_features(split: SloSplit) -> dict[str, float]:
    """The split's numbers as decision features (``status.stages[image-encoder].autoscaler``): the pool's target
    and share; empty when not split."""
    if split.image_encoder_target_ms is None or split.share is None:
        return {}
    return {"slo_split_target_p95_ms": round(split.image_encoder_target_ms, 1),
            "slo_split_share": round(split.share, 3)}


__all__ = ["IMAGE_CLASSES", "MAX_SHARE", "MIN_SHARE", "SloSplit", "front_pool_figures", "split_features",
           "split_slo"]
