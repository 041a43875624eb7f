"""Trace-driven simulation of the staged layout (issue 24, ModServe arXiv 2502.00937) beside the one-piece pool.

A staged InferenceService (``spec.stages.imageEncoder``) runs two pools: the front (text encoder + fusion, the
service's ``spec.resources`` and ``spec.runtime``) takes every request; for a request with images it calls the
image encoder pool (``<name>-image-encoder``) and waits for it. This module replays a trace through both pools with
the same assumptions as :mod:`modalscale.autoscaler.simulate` (FCFS per pool over all its ready slots, batch size
1, arrivals as recorded, the same service-time draws, start-up delays drawn per replica, a removed replica drains
its requests and costs until it has), and adds:

- Work split: a request's service time ``S`` (:func:`~modalscale.autoscaler.simulate.service_times_ms`, the
  one-piece simulator's draw) is split into the image encoder's part ``E = S x share`` and the front's part
  ``F = S - E`` (:func:`split_service_ms`), so both layouts serve exactly the same work. ``share`` comes from the
  service-time model, not from a measurement: ``(predict(x) - predict(x without images)) / predict(x)``, where
  "without images" zeroes the request's pixels and image count (its modality stays). For the shipped additive
  regressor (:func:`~modalscale.autoscaler.simulate.train_default_model`) that is exactly its ``megapixels`` and
  ``images`` terms (both the per-request and the batch-shared one: about 395 ms per MP + 49 ms per image at batch
  1, fitted on the SYNTHETIC profile of ``profile_data.SyntheticServiceLaw``, whose law has 400 and 50); the
  modality constant (launch, pre/post-processing, fusion: ~59 ms) and the text terms stay with the front. The
  runtime's measured stage times are not used: ``benchmarks/staged_call_path.py`` measured client latency on a
  shared machine, not CPU-seconds per stage. A text-only request has ``share = 0`` exactly and never reaches the pool.
- Call path, as the runtime has it (``runtime/model/staged.py``): when the front starts a request (a slot is free)
  it sends the images to the pool at once and runs its own part ``F`` meanwhile; the pool serves its requests FCFS
  in the order they were sent, each ``E`` in one of its slots. The request is answered at
  ``max(front start + F, pool answer)``; fusion, which follows the images, is not separable in the model and is
  counted inside the overlapped ``F`` (optimistic by the fusion time). The front's slot (a Triton model instance
  blocked on the call's future) is HELD until then: its measured time, and so what the front's autoscaler sees,
  contains the pool's queue and execution. ``StagedConfig.front_waits=False`` frees the slot after ``F`` instead (a
  decoupled front the runtime does not have: a counterfactual that measures what the wait costs).
- Deciders: the same rules the operator runs (``operator/autoscale/handlers.py``): the front is sized by
  :func:`~modalscale.autoscaler.policy.recommend` in Predictive mode on its own observed workload, with the
  one-piece simulator's predictive decider and the service's model (its observed service time is the slot hold
  time, as the front's Triton compute time is); the pool, after the front at each decision, by ``recommend`` with
  :func:`~modalscale.autoscaler.policy.image_encoder_policy` (the Utilization rule over the pool's busy slots,
  and its observed-queue rule over the pool's requests in flight now, queued included, as the operator reads the
  pool's Triton pending count and in-flight gauge) raised by
  :func:`~modalscale.autoscaler.policy.stage_latency_need` to the pool's share of the p95 target from
  :func:`~modalscale.autoscaler.stages.split_slo` on the two pools' readings of the same window. No budget cap.
- Cost: replica-hours per pool, and replica-CPU-hours = replica-hours x the pool's CPU cores per replica
  (``StagedConfig``: the CRD's separate ``spec.resources.cpu`` and ``spec.stages.imageEncoder.resources.cpu``).

Initial replicas: the front starts with the one-piece run's count (``SimulationConfig.initial_replicas``, else the
oracle's first minute); the pool with that count times the first minute's image share of the work, rounded up,
within its bounds. The pool draws its start-up delays from its own seeded stream (seed + 1000).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import numpy as np
from numpy.typing import NDArray

from modalscale.api.inferenceservice import ImageEncoderStageSpec, ResourceSpec, RuntimeSpec, ScalingSpec
from modalscale.api.isvc_status import ScalerState
from modalscale.autoscaler.features import FEATURES, Modality
from modalscale.autoscaler.metrics_reading import MetricsReading
from modalscale.autoscaler.policy import (
    Decision,
    Observation,
    ScalingMode,
    ScalingPolicy,
    ServiceTimePredictor,
    WorkloadClass,
    image_encoder_policy,
    recommend,
)
from modalscale.autoscaler.simulate import (
    _EPOCH,
    SimulationConfig,
    _Metrics,
    _over_slo,
    _Pool,
    _predictive_decider,
    _slo_minutes,
    oracle_schedule,
    run_simulation,
    service_times_ms,
    trace_end_s,
    train_default_model,
)
from modalscale.autoscaler.stages import front_pool_figures, split_slo
from modalscale.autoscaler.traces import Trace

_I_PIXELS = FEATURES.index("image_pixels")
_I_IMAGES = FEATURES.index("image_count")
_ENCODER_SEED_OFFSET = 1000
_MIN_SAMPLES = 10  # completed requests a window needs for an observed mean (as simulate._Metrics)


@dataclass(frozen=True)
class StagedConfig:
    """The staged layout's own knobs beside :class:`SimulationConfig` (which the front uses as the service's spec).

    Attributes:
        cpu_cores_per_replica: CPU cores of one ONE-PIECE replica (``spec.resources.cpu``, CRD default "2"), for the
            one-piece run's replica-CPU-hours.
        front_cpu_cores_per_replica: Cores of one front replica (the front keeps ``spec.resources``: default 2).
        encoder_cpu_cores_per_replica: Cores of one encoder replica (``spec.stages.imageEncoder.resources.cpu``,
            CRD default "2").
        encoder_slots_per_replica: The pool's ``instanceCount`` (default ``spec.runtime``'s: 1).
        encoder_min_replicas: The pool's ``minReplicas`` (CRD default 1).
        encoder_max_replicas: The pool's ``maxReplicas`` (CRD default 10; 200 here, the simulator's one-piece bound,
            so that no bound decides a comparison).
        front_waits: The front's slot is held until the pool answers (the runtime); False = freed after the front's
            own part (counterfactual).
        split_slo: The pool gets its share of the p95 target (``stages.split_slo``) and the stage latency rule; False
            = the Utilization rule alone (counterfactual).
    """

    cpu_cores_per_replica: float = 2.0
    front_cpu_cores_per_replica: float = 2.0
    encoder_cpu_cores_per_replica: float = 2.0
    encoder_slots_per_replica: int = 1
    encoder_min_replicas: int = 1
    encoder_max_replicas: int = 200
    front_waits: bool = True
    split_slo: bool = True

    def __post_init__(self) -> None:
        if min(self.cpu_cores_per_replica, self.front_cpu_cores_per_replica, self.encoder_cpu_cores_per_replica) <= 0:
            raise ValueError("CPU cores per replica must be > 0")
        if self.encoder_slots_per_replica < 1:
            raise ValueError("encoder_slots_per_replica must be >= 1")
        if not 1 <= self.encoder_min_replicas <= self.encoder_max_replicas:
            raise ValueError("need 1 <= encoder_min_replicas <= encoder_max_replicas")


def image_service_share(trace: Trace, predict: Any) -> NDArray[np.float64]:
    """The image encoder's share of each request's service time, 0..1, shape ``(n,)`` (module docstring).

    Args:
        trace: Requests.
        predict: ``features (n, len(FEATURES)) -> service ms (n,)``: the service-time model's ``predict`` (or a
            law's ``mean_ms``).
    Returns:
        ``(predict(x) - predict(x without pixels and images)) / predict(x)``, clipped to [0, 1]; exactly 0 for a
        request without images.
    """
    x = trace.features()
    bare = x.copy()
    bare[:, _I_PIXELS] = 0.0
    bare[:, _I_IMAGES] = 0.0
    full = np.asarray(predict(x), dtype=np.float64)
    image_ms = full - np.asarray(predict(bare), dtype=np.float64)
    share = np.clip(image_ms / np.maximum(full, 1e-9), 0.0, 1.0)
    return np.where(trace.image_count > 0, share, 0.0)


def split_service_ms(service_ms: NDArray[np.float64], share: NDArray[np.float64]
                     ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``(front ms, image encoder ms)`` per request, shape ``(n,)`` each: ``E = S x share``, ``F = S - E``."""
    encoder = np.asarray(service_ms, dtype=np.float64) * share
    return np.asarray(service_ms, dtype=np.float64) - encoder, encoder


def encoder_pool_policy(config: SimulationConfig, staged: StagedConfig) -> ScalingPolicy:
    """The pool's policy as the operator builds it: :func:`image_encoder_policy` of the ``spec.scaling`` that
    ``config``'s predictive policy stands for and the pool's ``spec.stages.imageEncoder``.

    Raises:
        ValueError: a knob the CRD holds as an integer (target, utilization, windows) is not a whole number.
    """
    front = config.scaling_policy(ScalingMode.PREDICTIVE)

    def whole(name: str, value: float) -> int:
        if not float(value).is_integer():
            raise ValueError(f"{name} is an integer in the CRD, got {value!r}")
        return int(value)

    scaling = ScalingSpec(
        mode=ScalingMode.PREDICTIVE.value, replicas=None, min_replicas=front.min_replicas,
        max_replicas=front.max_replicas,
        target_p95_latency_ms=whole("target_p95_ms", front.target_p95_latency_ms),
        target_utilization_percent=whole("target utilization", front.target_utilization_percent),
        tolerance_percent=whole("tolerance_percent", front.tolerance_percent),
        scale_up_stabilization_s=whole("scale_up_stabilization_s", front.scale_up_stabilization_s),
        scale_down_stabilization_s=whole("scale-down stabilization", front.scale_down_stabilization_s),
        max_step_replicas=front.max_step_replicas,
        decision_interval_s=whole("decision_interval_s", front.decision_interval_s))
    stage = ImageEncoderStageSpec(
        min_replicas=staged.encoder_min_replicas, max_replicas=staged.encoder_max_replicas,
        resources=ResourceSpec(cpu=f"{staged.encoder_cpu_cores_per_replica:g}", memory="8Gi", gpu_count=0,
                               gpu_type=None),
        runtime=RuntimeSpec(instance_count=staged.encoder_slots_per_replica))
    return image_encoder_policy(scaling, stage)


class _HeldPool(_Pool):
    """A front pool whose slots may be held, past their own work, until the image encoder pool answers: a held slot
    sits in the heap as ``(inf, seq, replica)`` until :meth:`release` (internal)."""

    def remove(self, count: int, now_s: float) -> None:
        before = list(self.heap)
        active = set(self.active)
        super().remove(count, now_s)  # a replica with a held slot sorts as busy (inf) and is removed last
        for index in active - set(self.active):
            rep = self.replicas[index]
            if rep.drained_s is not None and math.isinf(rep.drained_s):  # drained once its held slots are released
                rep.drained_s = max([now_s] + [f for f, _, i in before if i == index and math.isfinite(f)])

    def release(self, seq: int, index: int, free_at_s: float) -> None:
        for k, (_, s, _) in enumerate(self.heap):
            if s == seq:
                self.heap[k] = (free_at_s, seq, index)
                heapq.heapify(self.heap)
                return
        rep = self.replicas[index]  # removed meanwhile: it costs until this slot is free
        rep.drained_s = max(rep.drained_s if rep.drained_s is not None else free_at_s, free_at_s)


class _StagedPools:
    """The front and the image encoder pool, coupled by the synchronous call (internal; module docstring)."""

    def __init__(self, trace: Trace, front_ms: NDArray[np.float64], encoder_ms: NDArray[np.float64],
                 config: SimulationConfig, staged: StagedConfig) -> None:
        n = len(trace)
        self.arrival = trace.arrival_s
        self.front_ms = front_ms
        self.calls = trace.image_count > 0
        self.waits = staged.front_waits
        self.front = _HeldPool(trace.arrival_s, front_ms / 1000.0, config.slots_per_replica)
        self.encoder = _Pool(np.full(n, np.nan), encoder_ms / 1000.0, staged.encoder_slots_per_replica)
        self.hold_ms = np.full(n, np.nan)  # front slot time per request, ms (what the front's Triton measures)
        self.answered_s = np.full(n, np.nan)  # when the client gets the answer
        self.queue: deque[int] = deque()  # sent to the pool, not started there
        self.held: dict[int, tuple[int, int]] = {}  # request -> (slot seq, front replica)

    def advance(self, until_s: float) -> None:
        """Start requests (front FCFS by arrival, pool FCFS by sending) whose start is <= ``until_s``, in time
        order; the pool first on a tie (its answer may free a front slot at that instant)."""
        front, enc = self.front, self.encoder
        i, n = front.next_i, self.arrival.shape[0]
        while True:
            tf = max(self.arrival[i], front.heap[0][0]) if i < n and front.heap else math.inf
            te = max(enc.arrival[self.queue[0]], enc.heap[0][0]) if self.queue and enc.heap else math.inf
            t = min(tf, te)
            if t == math.inf or t > until_s:
                break
            if te <= tf:
                j = self.queue.popleft()
                _, seq, index = enc.heap[0]
                end = te + enc.service[j]
                heapq.heapreplace(enc.heap, (end, seq, index))
                enc.start[j], enc.finish[j] = te, end
                self._answer(j, end)
                continue
            _, seq, index = front.heap[0]
            front.start[i] = tf
            own_end = tf + front.service[i]
            if self.calls[i]:
                enc.arrival[i] = tf
                self.queue.append(i)
            if self.calls[i] and self.waits:
                heapq.heapreplace(front.heap, (math.inf, seq, index))
                self.held[i] = (seq, index)
            else:
                heapq.heapreplace(front.heap, (own_end, seq, index))
                front.finish[i], self.hold_ms[i] = own_end, self.front_ms[i]
                if not self.calls[i]:
                    self.answered_s[i] = own_end
            i += 1
        front.next_i = i

    def _answer(self, j: int, pool_end_s: float) -> None:
        own_end = self.front.start[j] + self.front.service[j]
        done = max(own_end, pool_end_s)
        self.answered_s[j] = done
        if j in self.held:
            seq, index = self.held.pop(j)
            self.front.finish[j] = done
            self.hold_ms[j] = self.front_ms[j] if pool_end_s <= own_end else (pool_end_s - self.front.start[j]) * 1e3
            self.front.release(seq, index, done)


class _PoolMetrics:
    """Window metrics of the image encoder pool, as its Triton series give them (``component="image-encoder"``)."""

    def __init__(self, trace: Trace, pools: _StagedPools) -> None:
        self.pools = pools
        self.pixels = trace.image_pixels.astype(np.float64)
        self.images = trace.image_count.astype(np.float64)

    def reading(self, lo_s: float, hi_s: float) -> MetricsReading:
        """The pool's ``MetricsReading`` over ``(lo_s, hi_s]``: one ``image`` class (requests sent in the window:
        rate, mean pixels and images; mean execution ms of those completed; no SCV, which the operator does not
        read), ``mean_latency_ms`` (queue + execution of those completed), the busy slots, and at ``hi_s`` the
        requests queued (sent, not started: Triton's pending count) and in flight (sent, not answered: the model
        ``image_encoder``'s ``modalscale_inflight_requests`` + its pending count), as the operator's reading of the
        pool has them."""
        enc = self.pools.encoder
        sent = (enc.arrival > lo_s) & (enc.arrival <= hi_s)
        done = np.isfinite(enc.finish) & (enc.finish > lo_s) & (enc.finish <= hi_s)
        count = int(sent.sum())
        extra: dict[str, float] = {}
        workload: tuple[WorkloadClass, ...] = ()
        if count:
            exec_ms = enc.service[done] * 1000.0
            positive = exec_ms.size >= _MIN_SAMPLES and float(exec_ms.mean()) > 0
            workload = (WorkloadClass(
                modality=Modality.IMAGE, rate_rps=count / (hi_s - lo_s),
                mean_image_pixels=float(self.pixels[sent].mean()), mean_image_count=float(self.images[sent].mean()),
                observed_service_ms=float(exec_ms.mean()) if positive else None),)
            if done.sum() >= _MIN_SAMPLES:
                extra["mean_latency_ms"] = float(((enc.finish - enc.arrival)[done]).mean() * 1000.0)
        started = np.isfinite(enc.start) & (enc.start < hi_s) & (enc.finish > lo_s)
        busy_s = float(np.clip(np.minimum(enc.finish[started], hi_s) - np.maximum(enc.start[started], lo_s), 0.0,
                               None).sum())
        sent_by_now = enc.arrival <= hi_s  # NaN (never sent) is not
        in_flight = sent_by_now & ~(enc.finish <= hi_s)
        queued = sent_by_now & ~(enc.start <= hi_s)
        return MetricsReading(observed_at=_EPOCH + timedelta(seconds=hi_s), workload=workload,
                              busy_erlangs=busy_s / (hi_s - lo_s), extra=extra,
                              queued_requests=float(queued.sum()), in_flight_requests=float(in_flight.sum()))


def _encoder_decider(config: SimulationConfig, staged: StagedConfig, pools: _StagedPools, metrics: _PoolMetrics,
                     front_metrics: _Metrics, log: list[Decision]) -> Any:
    """The operator's pool decision (``decide_pool_once``) at each decision time, after the front's."""
    policy = encoder_pool_policy(config, staged)
    state = ScalerState()

    def decide(now_s: float) -> int:
        nonlocal state
        enc = pools.encoder
        lo = max(0.0, now_s - config.metrics_window_s)
        reading = metrics.reading(lo, now_s)
        ready = enc.ready_count(now_s)
        capacity = enc.ready_slot_seconds(lo, now_s)
        utilization = (None if capacity <= 0 or reading.busy_erlangs is None
                       else min(1.0, reading.busy_erlangs * (now_s - lo) / capacity))
        target_ms = None
        if staged.split_slo:
            front = MetricsReading(observed_at=reading.observed_at,
                                   workload=front_metrics.workload(pools.front, lo, now_s))
            target_ms = split_slo(config.target_p95_ms, front, reading).image_encoder_target_ms
        obs = Observation(observed_at=_EPOCH + timedelta(seconds=now_s), current_replicas=len(enc.active),
                          ready_replicas=ready, workload=reading.workload, utilization_ratio=utilization,
                          window_s=now_s - lo, stage_target_p95_ms=target_ms,
                          queued_requests=reading.queued_requests, in_flight_requests=reading.in_flight_requests)
        decision = recommend(obs, policy, state, None, _EPOCH + timedelta(seconds=now_s))
        state = decision.state
        log.append(decision)
        return decision.desired_replicas if decision.valid else len(enc.active)

    return decide


def _initial_encoder_replicas(trace: Trace, service_ms: NDArray[np.float64], encoder_ms: NDArray[np.float64],
                              initial: int, staged: StagedConfig) -> int:
    first = trace.arrival_s < 60.0
    work = float(service_ms[first].sum())
    share = float(encoder_ms[first].sum()) / work if work > 0 else 0.0
    return min(staged.encoder_max_replicas, max(staged.encoder_min_replicas, math.ceil(initial * share - 1e-9)))


def simulate_staged(trace: Trace, front_ms: NDArray[np.float64], encoder_ms: NDArray[np.float64],
                    config: SimulationConfig, staged: StagedConfig, model: ServiceTimePredictor,
                    initial_replicas: tuple[int, int]) -> dict[str, Any]:
    """Replay ``trace`` through the staged layout under its per-stage deciders (module docstring).

    Args:
        trace: Requests in arrival order.
        front_ms: The front's own work per request, ms, shape ``(n,)``.
        encoder_ms: The image encoder pool's work per request, ms, shape ``(n,)`` (only requests with images reach
            the pool, whatever this holds for the others).
        config: The service (the front's spec, target, start-up law; ``policies`` is ignored).
        staged: The pool's spec, cores and counterfactual switches.
        model: The service's service-time model (the front's predictive decider).
        initial_replicas: ``(front, pool)`` ready at t=0.
    Returns:
        ``{"slo_minutes_fraction", "p95_latency_ms", "requests_over_slo", "burst_requests_over_slo",
        "replica_hours", "front_replica_hours", "encoder_replica_hours", "replica_cpu_hours",
        "front_work_s", "encoder_work_s" (execution seconds served: the front's own part of each answered
        request; the pool's from its replayed start and end), "front_hold_s" (front slot-seconds held, the wait for
        the pool included),
        "encoder_requests", "decision_times_s", "front_desired_replicas", "encoder_desired_replicas" (after each
        decision), "front_reasons", "encoder_reasons" ({reason: decisions}), "minute_p95_ms", "response_ms" (per
        request, shape ``(n,)``, NaN = never answered)}``; replica-hours to the end of the trace's last minute.
    Raises:
        ValueError: an empty trace.
    """
    if len(trace) == 0:
        raise ValueError("cannot simulate an empty trace")
    end_s = trace_end_s(trace)
    times = np.arange(config.decision_interval_s, end_s + 1e-9, config.decision_interval_s)
    pools = _StagedPools(trace, np.asarray(front_ms, np.float64), np.asarray(encoder_ms, np.float64), config, staged)
    for _ in range(initial_replicas[0]):
        pools.front.add(0.0, 0.0)
    for _ in range(initial_replicas[1]):
        pools.encoder.add(0.0, 0.0)
    front_metrics = _Metrics(trace, pools.hold_ms)  # its utilization is NaN (unknown) while a slot is held: Predictive
    # mode does not read it
    front_log: list[Decision] = []
    encoder_log: list[Decision] = []
    pool_metrics = _PoolMetrics(trace, pools)

    def pool_figures(now_s: float) -> dict[str, Any]:  # what the operator's front decision reads of the pool
        reading = pool_metrics.reading(max(0.0, now_s - config.metrics_window_s), now_s)
        return front_pool_figures(reading, pools.encoder.ready_count(now_s), staged.encoder_slots_per_replica)

    decide_front = _predictive_decider(config, model, front_metrics, front_log, pool_figures)
    decide_encoder = _encoder_decider(config, staged, pools, pool_metrics, front_metrics, encoder_log)
    front_delays = config.startup_delays()
    encoder_delays = replace(config, random_state=config.random_state + _ENCODER_SEED_OFFSET).startup_delays()
    front_desired: list[int] = []
    encoder_desired: list[int] = []
    for d in times:
        now = float(d)
        pools.advance(now)
        want_front = decide_front(pools.front, now)
        want_encoder = decide_encoder(now)
        pools.front.resize(want_front, now, front_delays)
        pools.encoder.resize(want_encoder, now, encoder_delays)
        front_desired.append(len(pools.front.active))
        encoder_desired.append(len(pools.encoder.active))
    pools.advance(math.inf)
    fraction, minute_p95 = _slo_minutes(trace, pools.answered_s, config.target_p95_ms, end_s)
    over, over_in_bursts, _ = _over_slo(trace, pools.answered_s, config.target_p95_ms, end_s)
    latency = (pools.answered_s - trace.arrival_s) * 1000.0
    front_h = pools.front.replica_seconds(end_s) / 3600.0
    encoder_h = pools.encoder.replica_seconds(end_s) / 3600.0
    served = np.isfinite(pools.answered_s)
    called = served & pools.calls

    def reasons(log: list[Decision]) -> dict[str, int]:
        out: dict[str, int] = {}
        for decision in log:
            out[decision.reason.value] = out.get(decision.reason.value, 0) + 1
        return out

    return {
        "slo_minutes_fraction": fraction,
        "p95_latency_ms": float(np.percentile(np.where(np.isfinite(latency), latency, np.inf), 95)),
        "requests_over_slo": over,
        "burst_requests_over_slo": over_in_bursts,
        "replica_hours": front_h + encoder_h,
        "front_replica_hours": front_h,
        "encoder_replica_hours": encoder_h,
        "replica_cpu_hours": front_h * staged.front_cpu_cores_per_replica
        + encoder_h * staged.encoder_cpu_cores_per_replica,
        "front_work_s": float(pools.front.service[served].sum()),
        "encoder_work_s": float((pools.encoder.finish - pools.encoder.start)[called].sum()),
        "front_hold_s": float(pools.hold_ms[served].sum()) / 1000.0,
        "encoder_requests": int(called.sum()),
        "decision_times_s": [float(t) for t in times],
        "front_desired_replicas": front_desired,
        "encoder_desired_replicas": encoder_desired,
        "front_reasons": reasons(front_log),
        "encoder_reasons": reasons(encoder_log),
        "minute_p95_ms": [float(x) for x in minute_p95],
        "response_ms": latency,
    }


def compare_layouts(trace: Trace, config: SimulationConfig, staged: StagedConfig = StagedConfig(),
                    model: ServiceTimePredictor | None = None, one_piece: bool = True) -> dict[str, dict[str, Any]]:
    """One-piece predictive against staged predictive on the same trace, service-time draws and start-up law.

    Args:
        trace: Requests in arrival order.
        config: The service as :func:`~modalscale.autoscaler.simulate.run_simulation` takes it (its predictive
            settings); ``initial_replicas`` None = the oracle's first minute, the same for both layouts.
        staged: The pool's spec and cores.
        model: The service-time model; None = :func:`train_default_model`.
        one_piece: Also run the one-piece layout (False: the staged result alone).
    Returns:
        ``{"one_piece": run_simulation's predictive result plus "replica_cpu_hours", "staged": simulate_staged's}``.
    """
    if model is None:
        model = train_default_model(config)
    service = service_times_ms(trace, config, model)
    initial = config.initial_replicas
    if initial is None:
        end_s = trace_end_s(trace)
        initial = oracle_schedule(trace, service, config, end_s)[0][0]
    config = replace(config, initial_replicas=initial, policies=("predictive",))
    front_ms, encoder_ms = split_service_ms(service, image_service_share(trace, model.predict))
    out: dict[str, dict[str, Any]] = {}
    if one_piece:
        result = run_simulation(trace, config, model)["predictive"]
        out["one_piece"] = {**result, "replica_cpu_hours": result["replica_hours"] * staged.cpu_cores_per_replica,
                            "work_s": float(service.sum()) / 1000.0}
    pool_initial = _initial_encoder_replicas(trace, service, encoder_ms, initial, staged)
    out["staged"] = simulate_staged(trace, front_ms, encoder_ms, config, staged, model, (initial, pool_initial))
    return out


__all__ = ["StagedConfig", "compare_layouts", "encoder_pool_policy", "image_service_share", "simulate_staged",
           "split_service_ms"]
