"""Demand from one source: the request gateway's series with ``spec.gateway.enabled``, the replicas' otherwise.

Issue 19 item 4: the gateway exports the runtime's per-request series under the same names for any model, and the
built-in runtime behind it exports them too. Prometheus here is a stand-in that answers each query of
``build_queries`` from a universe of series, honouring only the query's ``component`` matcher (what tells the two
sources apart; the real-Prometheus test, tests/integration/gateway/test_gateway_autoscale_prometheus.py, checks the
PromQL for real). Each row of the universe is one pod's series as the chart's PodMonitors label them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import re
from typing import Any

import pytest

from modalscale.api.conditions import (
    NO_REQUEST_METRICS,
    NO_SCRAPE_TARGETS,
    NON_FINITE_METRICS,
    PARTIAL_TARGETS,
    SCRAPE_TARGETS_DOWN,
    UNKNOWN_SAMPLE_TIME,
)
from modalscale.autoscaler.metrics_parse import parse_answers
from modalscale.autoscaler.metrics_reading import MetricsReading
from modalscale.autoscaler.policy import Reason, ScalerState, ScalingPolicy, recommend
from modalscale.autoscaler.profile_data import generate_profile
from modalscale.autoscaler.regressor import ServiceTimeRegressor
from modalscale.operator.autoscale.observe import build_observation, build_queries

T = 1796049435.0
NOW = dt.datetime.fromtimestamp(T + 5, dt.UTC)
RPS_PER_POD = 3.0
"""Image requests per second through each gateway pod and into each replica (2 + 2 pods: 6 req/s in all)."""
PIXELS = 640 * 480
SERVICE_MS = 100.0


@dataclasses.dataclass
class Universe:
    """Every series Prometheus holds for ``ml/vc``: ``{query key: [(labels incl. component, value)]}``."""

    rows: dict[str, list[tuple[dict[str, str], float]]] = dataclasses.field(default_factory=dict)

    def add(self, key: str, labels: dict[str, str], value: float) -> None:
        self.rows.setdefault(key, []).append((labels, value))

    def answer(self, queries: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
        """What Prometheus answers to ``queries``: each key's rows whose ``component`` the query's matcher keeps
        (``=``, ``!=`` or ``!~`` with an anchored alternation, as PromQL evaluates them), without the
        ``component`` label (the queries' ``max by`` drop it)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for key, q in queries.items():
            if key in ("arrival_counts", "window_up", "window_before"):
                continue  # the window's scrapes cover every target, both components (no gap here: unanswered)
            matcher = re.search(r'component(=|!=|!~)"([^"]*)"', q)
            if matcher is None:
                raise AssertionError(f"query {key} selects no component: {q}")
            op, value = matcher.groups()

            def kept(component: str, op: str = op, value: str = value) -> bool:
                if op == "=":
                    return component == value
                if op == "!=":
                    return component != value
                return re.fullmatch(value, component) is None

            out[key] = [{"metric": {k: v for k, v in labels.items() if k != "component"}, "value": [T, repr(v)]}
                        for labels, v in self.rows.get(key, []) if kept(labels.get("component", ""))]
        return out


def universe(*, runtime_features: bool = True, gateway_pods: int = 2, replica_pods: int = 2,
             gateway_queue: float = 0.0, gateway_inflight: float = 1.0, gateway_down: int = 0,
             gateway_rps_per_pod: float = RPS_PER_POD, replica_rps_per_pod: float = RPS_PER_POD,
             triton_pending: float = 0.5, gateway_refused: float = 0.0, encoder_pods: int = 0) -> Universe:
    """Replica pods (Triton figures, and the built-in runtime's feature series when ``runtime_features``; a user's
    own model has none) and gateway pods (feature series + queue / in-flight gauges, split over the pods), each
    at :data:`RPS_PER_POD` image requests of one 640x480 image (``gateway_rps_per_pod`` / ``replica_rps_per_pod``
    to make them differ), ``triton_pending`` requests waiting in each replica's Triton queue and
    ``gateway_refused`` requests refused by the gateway's admission over the window (split over its pods).
    ``gateway_down`` gateway pods do not answer. ``encoder_pods`` image encoder pool pods of a staged service
    (``component="image-encoder"``, as the chart's third PodMonitor labels them): the same metric names, each
    pod encoding the images of every replica at 4x the replicas' compute time."""
    u = Universe()
    for i in range(replica_pods):
        t = {"pod": f"vc-5d8f-{i}", "instance": f"10.0.0.{i}:8002", "job": "ml/ms-modalscale-inferenceservices",
             "component": "inference-server"}
        u.add("up", t, 1.0)
        u.add("scraped", t, T - 2)
        if runtime_features:
            for p in ("", "recent_"):
                u.add(p + "requests", {**t, "modality": "image"}, replica_rps_per_pod)
                u.add(p + "images", {**t, "modality": "image"}, replica_rps_per_pod)
                u.add(p + "pixels", {**t, "modality": "image"}, replica_rps_per_pod * PIXELS)
                u.add(p + "tokens", {**t, "modality": "text"}, 0.0)
        model = {**t, "model": "byo", "version": "1"}
        for key in ("nv_count", "nv_exec", "nv_success"):
            u.add(key, model, replica_rps_per_pod)
        u.add("nv_compute_us", model, replica_rps_per_pod * SERVICE_MS * 1000)
        u.add("nv_request_us", model, replica_rps_per_pod * SERVICE_MS * 1100)
        u.add("nv_pending", model, triton_pending)
    for i in range(gateway_pods):
        t = {"pod": f"vc-gateway-7c9-{i}", "instance": f"10.0.1.{i}:9090", "job": "ml/ms-modalscale-gateways",
             "component": "gateway"}
        down = i < gateway_down
        u.add("gateway_up", t, 0.0 if down else 1.0)
        u.add("gateway_scraped", t, T - 1)
        if down:
            continue
        for p in ("", "recent_"):
            u.add(p + "requests", {**t, "modality": "image"}, gateway_rps_per_pod)
            u.add(p + "images", {**t, "modality": "image"}, gateway_rps_per_pod)
            u.add(p + "pixels", {**t, "modality": "image"}, gateway_rps_per_pod * PIXELS)
            u.add(p + "tokens", {**t, "modality": "text"}, 0.0)
        u.add("gateway_queue", t, gateway_queue / gateway_pods)
        u.add("gateway_inflight", t, gateway_inflight / gateway_pods)
        u.add("gateway_refused", t, gateway_refused / gateway_pods)
    for i in range(encoder_pods):
        t = {"pod": f"vc-image-encoder-6b7-{i}", "instance": f"10.0.2.{i}:8002",
             "job": "ml/ms-modalscale-image-encoders", "component": "image-encoder"}
        u.add("up", t, 1.0)
        u.add("scraped", t, T - 2)
        per_pod = replica_rps_per_pod * replica_pods / encoder_pods
        for p in ("", "recent_"):
            u.add(p + "requests", {**t, "modality": "image"}, per_pod)
            u.add(p + "images", {**t, "modality": "image"}, per_pod)
            u.add(p + "pixels", {**t, "modality": "image"}, per_pod * PIXELS)
        model = {**t, "model": "image_encoder", "version": "1"}
        for key in ("nv_count", "nv_success"):
            u.add(key, model, per_pod)
        u.add("nv_exec", model, per_pod / 2)  # batches of 2 images
        u.add("nv_compute_us", model, per_pod / 2 * 4 * SERVICE_MS * 1000)
        u.add("nv_request_us", model, per_pod * 4 * SERVICE_MS * 1100)
        u.add("nv_pending", model, 3.0)
    return u


def read(u: Universe, gateway: bool) -> MetricsReading:
    return parse_answers(u.answer(build_queries("ml", "vc", gateway=gateway)), "byo", gateway=gateway)


def decide(reading: MetricsReading, current: int = 2, state: ScalerState | None = None, later_s: float = 0.0) -> Any:
    """The decision at ``NOW + later_s`` on ``reading``, its scrapes taken ``later_s`` later too."""
    now = NOW + dt.timedelta(seconds=later_s)
    later = dt.timedelta(seconds=later_s)
    reading = dataclasses.replace(
        reading, observed_at=None if reading.observed_at is None else reading.observed_at + later,
        in_flight_at=None if reading.in_flight_at is None else reading.in_flight_at + later)
    obs = build_observation(reading, current_replicas=current, ready_replicas=current, slots_per_replica=1,
                            budget_max_replicas=None, now=now)
    policy = ScalingPolicy(scale_down_stabilization_s=0, target_p95_latency_ms=1000)
    return obs, recommend(obs, policy, state or ScalerState(), MODEL, now)


MODEL = ServiceTimeRegressor().fit(generate_profile(400, random_state=1))


def rate(reading: MetricsReading) -> float:
    assert reading.workload is not None, reading.problem
    return sum(c.rate_rps for c in reading.workload)


def test_queries_read_demand_from_one_source_and_service_time_from_the_replicas() -> None:
    off, on = build_queries("ml", "vc"), build_queries("ml", "vc", gateway=True)
    demand = ("requests", "images", "pixels", "tokens", "recent_requests", "recent_images", "recent_pixels",
              "recent_tokens", "arrival_counts")
    replicas = 'component!~"gateway|image-encoder"'
    for key in demand:
        assert replicas in off[key] and 'component="gateway"' not in off[key], key
        assert 'component="gateway"' in on[key] and replicas not in on[key], key
    for key in ("nv_count", "nv_exec", "nv_compute_us", "nv_pending", "inflight", "up", "scraped"):
        assert on[key] == off[key] and replicas in on[key], key
    assert set(on) - set(off) == {"gateway_up", "gateway_scraped", "gateway_queue", "gateway_inflight",
                                  "gateway_refused"}
    assert on["gateway_refused"] == ('max by (pod, instance, job) (increase(modalscale_gateway_rejected_total'
                                     '{namespace="ml",inferenceservice="vc",component="gateway",'
                                     'reason!="TenantBudgetExceeded"}[60s]))')
    assert on["gateway_queue"] == ('max by (pod, instance, job) (modalscale_gateway_queue_depth'
                                   '{namespace="ml",inferenceservice="vc",component="gateway"})')
    assert "modalscale_gateway_inflight_requests{" in on["gateway_inflight"]


@pytest.mark.parametrize(("gateway", "runtime_features", "gateway_pods", "rps", "problem"), [
    (False, True, 2, 6.0, None),  # both sources scraped, gateway off: the replicas' only, not 12
    (True, True, 2, 6.0, None),  # both sources scraped, gateway on: the gateway's only, not 12
    (True, False, 2, 6.0, None),  # a user's own model (no runtime features): the gateway's
    (False, True, 0, 6.0, None),  # no gateway at all: as before
    (False, False, 2, None, NO_REQUEST_METRICS),  # a user's own model with the gateway off: nothing to read
    (True, True, 0, None, NO_SCRAPE_TARGETS),  # gateway on, but no gateway target: unknown, not the replicas'
], ids=["off-both", "on-both", "on-byo-only-gateway", "off-only-runtime", "off-byo", "on-no-gateway-target"])
def test_demand_source_table(gateway: bool, runtime_features: bool, gateway_pods: int, rps: float | None,
                             problem: str | None) -> None:
    reading = read(universe(runtime_features=runtime_features, gateway_pods=gateway_pods), gateway)
    if rps is None:
        assert reading.workload is None and reading.recent_workload is None
        assert reading.problem is not None and reading.problem[0] == problem
        obs, decision = decide(reading, current=3)
        assert not decision.valid and decision.desired_replicas == 3  # hold, never scale
        return
    assert reading.problem is None, reading.problem
    assert rate(reading) == pytest.approx(rps)
    assert reading.recent_workload is not None
    assert sum(c.rate_rps for c in reading.recent_workload) == pytest.approx(rps)
    (image,) = reading.workload or ()
    assert image.mean_image_pixels == pytest.approx(PIXELS) and image.mean_image_count == pytest.approx(1.0)
    assert image.observed_service_ms == pytest.approx(SERVICE_MS)  # Triton's compute, whatever the source
    assert reading.busy_erlangs == pytest.approx(2 * RPS_PER_POD * SERVICE_MS / 1000)


def test_a_user_model_read_through_the_gateway_is_sized_like_the_built_in_one() -> None:
    """Same traffic, same replicas: the decision from the gateway's series of a model without runtime features
    equals the decision from the built-in runtime's series without the gateway (and the doubled sum would not)."""
    _, builtin = decide(read(universe(gateway_pods=0), gateway=False))
    _, byo = decide(read(universe(runtime_features=False), gateway=True))
    assert builtin.valid and byo.valid
    assert byo.desired_replicas == builtin.desired_replicas
    u = universe()
    answers = u.answer(build_queries("ml", "vc", gateway=True))
    answers["requests"] += u.answer(build_queries("ml", "vc", gateway=False))["requests"]
    both = parse_answers(answers, "byo", gateway=True)
    assert rate(both) == pytest.approx(12.0)  # what summing both sources would read: the fault this avoids


def test_gateway_queue_and_in_flight_count_as_observed_demand() -> None:
    reading = read(universe(gateway_queue=8.0, gateway_inflight=4.0), gateway=True)
    assert reading.in_flight_requests == pytest.approx(12.0)  # admitted + held, over both gateway pods
    # the count is the gateway's, sampled at its newest scrape (T - 1), not the older of both sources' (T - 2)
    assert reading.in_flight_at == dt.datetime.fromtimestamp(T - 1, dt.UTC)
    assert reading.observed_at == dt.datetime.fromtimestamp(T - 2, dt.UTC)
    assert reading.queued_requests == pytest.approx(8.0 + 2 * 0.5)  # held in the gateway + Triton's pending
    assert reading.extra["gateway_queue_requests"] == 8.0 and reading.extra["gateway_targets_total"] == 2.0
    without = read(universe(gateway_queue=8.0, gateway_inflight=4.0), gateway=False)
    assert without.queued_requests == pytest.approx(1.0) and without.in_flight_requests is None
    assert without.in_flight_at is None


def test_a_queue_building_in_the_gateway_scales_up_for_observed_queue() -> None:
    """A queue held in the gateway (above maxInFlight) that grows over three decisions contradicts a model
    that says 2 replicas suffice: KPA's rule sizes the observed concurrency (ScaleUpForObservedQueue). The decisions
    are 15 s apart, each on a new scrape (a count read again from the same scrape is no new sample)."""
    state = ScalerState()
    decisions = []
    for i, queue in enumerate((10.0, 20.0, 40.0)):
        _, decision = decide(read(universe(gateway_queue=queue, gateway_inflight=2.0), gateway=True), 2, state,
                             later_s=15.0 * i)
        state = decision.state
        decisions.append(decision)
    assert all("observation contradicts the model" not in d.message for d in decisions[:2])
    last = decisions[-1]
    assert "observation contradicts the model (in flight grew 12 -> 22 -> 42" in last.message, last.message
    assert last.features["in_flight_requests"] == pytest.approx(42.0)
    assert last.features["observed_queue_need_replicas"] == 60.0  # ceil(42 / (1 slot x 70 %))
    assert last.desired_replicas == 2 + ScalingPolicy().max_step_replicas  # as far as one step goes
    _, unqueued = decide(read(universe(gateway_queue=0.0, gateway_inflight=2.0), gateway=True), 2,
                         decisions[1].state, later_s=30.0)
    assert unqueued.desired_replicas <= 2  # the same traffic without the gateway's queue needs no more


@pytest.mark.parametrize(("key", "bad"), [("gateway_queue", "NaN"), ("gateway_inflight", "+Inf"),
                                          ("requests", "NaN"), ("pixels", "-Inf")])
def test_unreadable_gateway_answers_are_missing_data_and_hold(key: str, bad: str) -> None:
    u = universe(gateway_queue=30.0)
    answers = u.answer(build_queries("ml", "vc", gateway=True))
    answers[key][0]["value"][1] = bad
    reading = parse_answers(answers, "byo", gateway=True)
    assert reading.workload is None and reading.problem is not None
    assert reading.problem[0] == NON_FINITE_METRICS
    obs, decision = decide(reading, current=3)
    assert not decision.valid and decision.desired_replicas == 3


def test_missing_gateway_gauges_hold() -> None:
    u = universe()
    del u.rows["gateway_inflight"]
    reading = read(u, gateway=True)
    assert reading.workload is None and reading.problem is not None and reading.problem[0] == NO_REQUEST_METRICS
    assert "modalscale_gateway_inflight_requests" in reading.problem[1]
    assert not decide(reading, current=3)[1].valid


@pytest.mark.parametrize("spoil", ["missing", "one-pod", "NaN", "milliseconds"])
def test_gateway_targets_without_a_readable_scrape_time_hold(spoil: str) -> None:
    """The gateway's series are the demand's only source: of unknown age (``timestamp(up)`` missing or unreadable
    for a gateway pod that answered), they are not read, and the decision holds."""
    u = universe()
    rows = u.rows["gateway_scraped"]
    if spoil == "missing":
        del u.rows["gateway_scraped"]
    elif spoil == "one-pod":
        del rows[0]
    else:
        rows[0] = (rows[0][0], float("nan") if spoil == "NaN" else (T - 1) * 1000)
    reading = read(u, gateway=True)
    assert reading.workload is None and reading.problem is not None and reading.problem[0] == UNKNOWN_SAMPLE_TIME
    assert "request gateway" in reading.problem[1] and "vc-gateway-7c9-0" in reading.problem[1]
    assert not decide(reading, current=3)[1].valid


def test_all_gateway_targets_down_hold() -> None:
    reading = read(universe(gateway_down=2), gateway=True)
    assert reading.workload is None and reading.problem is not None and reading.problem[0] == SCRAPE_TARGETS_DOWN
    assert not decide(reading, current=3)[1].valid


def test_one_gateway_target_down_reads_a_lower_bound_and_never_scales_down() -> None:
    """Half the gateway pods answered: the rate reads half the demand, so the policy may not scale down on it."""
    reading = read(universe(replica_pods=6, gateway_down=1), gateway=True)
    assert rate(reading) == pytest.approx(3.0)
    assert reading.problem is not None and reading.problem[0] == PARTIAL_TARGETS
    assert reading.down_targets == ("vc-gateway-7c9-0",) and reading.partial
    assert (reading.gateway_targets_up, reading.gateway_targets_total) == (1, 2)
    obs, decision = decide(reading, current=6)
    assert (obs.targets_up, obs.targets_expected) == (7, 8)  # 6 replicas + 1 of 2 gateways, of 6 ready + 2
    assert decision.desired_replicas == 6 and decision.reason == Reason.HELD_PARTIAL_METRICS, decision.message
    _, whole = decide(read(universe(replica_pods=6), gateway=True), current=6)
    assert whole.desired_replicas < 6  # the same service with every gateway answering does scale down


def test_gateway_targets_count_in_the_observation_only_with_the_gateway() -> None:
    on = build_observation(read(universe(), gateway=True), current_replicas=2, ready_replicas=2,
                           slots_per_replica=1, budget_max_replicas=None, now=NOW)
    off = build_observation(read(universe(), gateway=False), current_replicas=2, ready_replicas=2,
                            slots_per_replica=1, budget_max_replicas=None, now=NOW)
    assert (on.targets_up, on.targets_expected) == (4, 4)
    assert (off.targets_up, off.targets_expected) == (2, None)


def test_traffic_that_bypasses_the_gateway_is_unknown_demand_not_idle() -> None:
    """Gateway on, but the requests reach the replicas directly (the Service not switched yet, or a client inside
    the NetworkPolicy's reach): the gateway reads 0 while Triton counts requests. That is a contradiction, so the
    demand is unknown and the policy holds; it never reads idle and never scales down or to zero on it."""
    from modalscale.api.conditions import METRICS_CONTRADICT
    from modalscale.autoscaler.policy import observed_idle

    reading = read(universe(runtime_features=False, gateway_rps_per_pod=0.0), gateway=True)
    assert reading.workload is None and reading.problem is not None and reading.problem[0] == METRICS_CONTRADICT
    obs, decision = decide(reading, current=3)
    assert not decision.valid and decision.desired_replicas == 3
    assert not observed_idle(obs, ScalingPolicy(min_replicas=0, scale_to_zero_after_s=60), NOW)


def test_a_request_held_in_the_gateway_is_never_idle() -> None:
    """No arrival rate (nothing sent to a replica in the window) but a request held in the gateway: not idle, so
    no scale to zero under a waiting client."""
    from modalscale.autoscaler.policy import observed_idle

    policy = ScalingPolicy(min_replicas=0, scale_to_zero_after_s=60)
    held = read(universe(gateway_rps_per_pod=0.0, replica_rps_per_pod=0.0, gateway_queue=1.0,
                         gateway_inflight=0.0), gateway=True)
    quiet = read(universe(gateway_rps_per_pod=0.0, replica_rps_per_pod=0.0, gateway_queue=0.0,
                          gateway_inflight=0.0, triton_pending=0.0), gateway=True)
    assert held.workload == () and quiet.workload == ()
    build = dict(current_replicas=1, ready_replicas=1, slots_per_replica=1, budget_max_replicas=None, now=NOW)
    assert not observed_idle(build_observation(held, **build), policy, NOW)  # type: ignore[arg-type]
    assert observed_idle(build_observation(quiet, **build), policy, NOW)  # type: ignore[arg-type]


@pytest.mark.parametrize(("enabled", "status", "expected"), [
    (True, {"gateway": {"replicas": 2, "readyReplicas": 2}}, True),
    (True, {"gateway": {"replicas": 2, "readyReplicas": 1}}, True),
    # With the gateway on by default, a gateway that cannot run (Pending pods, an image that cannot be pulled)
    # leaves the Service on the replicas: demand is read there, not from a gateway that exports nothing (that held
    # the autoscaler for good with NoScrapeTargets while the replicas served).
    (True, {"gateway": {"replicas": 2, "readyReplicas": 0}}, False),
    (True, {"gateway": {"replicas": 2}}, False),
    (True, {}, False),
    (True, {"gateway": {"readyReplicas": "two"}}, False),
    (False, {"gateway": {"replicas": 2, "readyReplicas": 2}}, False),  # status not yet updated after turning it off
])
def test_the_daemon_reads_demand_where_the_service_sends_requests(enabled: bool, status: dict[str, Any],
                                                                   expected: bool) -> None:
    """``decide_once`` reads the gateway's series only while ``spec.gateway.enabled`` and a gateway pod is Ready
    (``status.gateway.readyReplicas``: when the plan switches the Service to the gateway), else the replicas'
    (stand-ins for the Kubernetes reads: no Deployment yet, so it stops after reading)."""
    import threading
    import types

    from kubernetes.client.exceptions import ApiException

    from modalscale.operator.autoscale.handlers import decide_once

    calls: list[dict[str, Any]] = []

    class Reader:
        def read(self, namespace: str, name: str, model_name: str, at: dt.datetime, *,
                 gateway: bool = False) -> MetricsReading:
            calls.append({"args": (namespace, name, model_name), "gateway": gateway})
            return MetricsReading(None, None)

    def no_deployment(*_: Any, **__: Any) -> Any:
        raise ApiException(status=404)

    raw = {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
           "metadata": {"name": "vc", "namespace": "ml", "uid": "u1", "generation": 1},
           "spec": {"model": {"name": "byo"}, "scaling": {"mode": "Utilization"}, "gateway": {"enabled": enabled}},
           "status": status}
    lock = threading.Lock()
    deps: Any = types.SimpleNamespace(
        autoscale=types.SimpleNamespace(reader=Reader()),
        observer=types.SimpleNamespace(read_isvc=lambda ns, name: raw,
                                       apps=types.SimpleNamespace(read_namespaced_deployment=no_deployment)),
        lock_for=lambda uid: lock, clock=lambda: NOW)
    decide_once(deps, "ml", "vc", None, logging.getLogger("test"))
    assert calls == [{"args": ("ml", "vc", "byo"), "gateway": expected}]


@pytest.mark.parametrize(("arrived", "in_flight", "queue", "refused", "pending", "contradiction"), [
    (8.0, 8.0, 0.0, 0.0, 0.0, False),  # 8 long requests arrived, all still in flight: none could have completed
    (8.0, 2.0, 6.0, 0.0, 0.0, False),  # 2 in flight, 6 held in the gateway's queue
    (8.0, 0.0, 0.0, 8.0, 0.0, False),  # all 8 refused by admission (no Ready replica): they never reach Triton
    (12.0, 2.0, 6.0, 0.0, 3.0, False),  # 8 read as 12: rate()'s extrapolation of a series 3 scrapes old
    (40.0, 2.0, 0.0, 0.0, 3.0, True),  # 38 of 40 left the gateway and Triton completed none: a contradiction
], ids=["all-in-flight", "held-in-queue", "all-refused", "extrapolated", "unaccounted"])
def test_arrivals_not_completed_yet_are_no_contradiction(arrived: float, in_flight: float, queue: float,
                                                         refused: float, pending: float, contradiction: bool) -> None:
    """The gateway counts requests on arrival, Triton on completion: a burst of long requests (in the 60 s window,
    Triton's counters still 0, some pending in its queue) read as triton-inference-server#8125 and held the
    autoscaler while the burst grew (issue 20's long requests). Only arrivals that are neither in flight, queued
    nor refused, beyond what rate()'s extrapolation can add, yet uncounted by Triton are a contradiction."""
    from modalscale.api.conditions import METRICS_CONTRADICT

    u = universe(gateway_rps_per_pod=arrived / 2 / 60, replica_rps_per_pod=0.0, gateway_inflight=in_flight,
                 gateway_queue=queue, gateway_refused=refused, triton_pending=pending)
    reading = read(u, gateway=True)
    if contradiction:
        assert reading.problem is not None and reading.problem[0] == METRICS_CONTRADICT, reading.problem
        assert "40 requests" in reading.problem[1] and "2 of them outstanding" in reading.problem[1]
    else:
        assert reading.problem is None, reading.problem
        assert rate(reading) == pytest.approx(arrived / 60)


@pytest.mark.parametrize("gateway", [False, True], ids=["replicas", "gateway"])
def test_the_image_encoder_pools_series_never_count_as_the_replicas_demand_or_busy_time(gateway: bool) -> None:
    """A staged service's encoder pool is scraped with the same metric names (component="image-encoder"): the
    replicas' reading is the same with and without its series. With the replicas' old selector
    (``component!="gateway"``) its targets and compute time were added in (0.6 busy erlangs more), and without the
    gateway its requests too (12 req/s instead of 6)."""
    alone = read(universe(), gateway)
    staged = read(universe(encoder_pods=2), gateway)
    assert rate(staged) == rate(alone) == pytest.approx(2 * RPS_PER_POD)
    assert staged.busy_erlangs == alone.busy_erlangs == pytest.approx(2 * RPS_PER_POD * SERVICE_MS / 1000)
    assert (staged.targets_up, staged.targets_total, staged.queued_requests) == (2, 2, alone.queued_requests)
    old = {k: q.replace('component!~"gateway|image-encoder"', 'component!="gateway"')
           for k, q in build_queries("ml", "vc", gateway=gateway).items()}
    doubled = parse_answers(universe(encoder_pods=2).answer(old), "byo", gateway=gateway)
    assert doubled.targets_total == 4 and doubled.busy_erlangs == pytest.approx(staged.busy_erlangs + 0.6)
    if not gateway:
        assert rate(doubled) == pytest.approx(4 * RPS_PER_POD)


def test_the_pools_reading_is_its_own_series_only() -> None:
    """``component="image-encoder"``: the pool's requests (6 req/s of one image over 2 pods), its targets, Triton's
    pending count and its busy erlangs, compute time / mean batch size (metrics_parse's formula)."""
    u = universe(gateway_pods=2, encoder_pods=2)
    queries = build_queries("ml", "vc", component="image-encoder")
    assert all('component="image-encoder"' in q for q in queries.values())
    reading = parse_answers(u.answer(queries), "image_encoder")
    assert (reading.targets_up, reading.targets_total, reading.per_pod_targets) == (2, 2, True)
    assert rate(reading) == pytest.approx(2 * RPS_PER_POD)
    # per pod: 1.5 executions/s x 400 ms = 0.6 s of compute per s, over a mean batch of 2 -> 0.3 erlangs
    assert reading.busy_erlangs == pytest.approx(2 * 0.3)
    assert reading.queued_requests == pytest.approx(6.0)
    with pytest.raises(ValueError):
        build_queries("ml", "vc", gateway=True, component="image-encoder")


def test_a_gateway_target_whose_last_scrape_is_minutes_old_makes_the_demand_stale() -> None:
    """The replicas' targets date the data by their stalest live target (a pod last scraped minutes ago has no rate
    in the window); the gateway's, the demand's only source with the gateway on, do too: gateway pod 0's newest
    ``up`` (1) is 200 s old and none of its rates are in the window, so the sum over the gateway reads half the
    demand. Dated by the fresh pod, the reading looked fresh and complete and scaled 6 -> 2 on it; it is stale: hold."""
    u = universe(replica_pods=6)
    stale = "vc-gateway-7c9-0"
    for key, rows in list(u.rows.items()):
        if key == "gateway_scraped":
            u.rows[key] = [(labels, T - 200.0 if labels["pod"] == stale else v) for labels, v in rows]
        elif key != "gateway_up":
            u.rows[key] = [(labels, v) for labels, v in rows if labels.get("pod") != stale]
    reading = read(u, gateway=True)
    assert reading.observed_at == dt.datetime.fromtimestamp(T - 200.0, dt.UTC)
    _, decision = decide(reading, current=6)
    assert (decision.valid, decision.desired_replicas, decision.reason) == (False, 6, Reason.HELD_STALE_METRICS), \
        decision.message
    _, whole = decide(read(universe(replica_pods=6), gateway=True), current=6)
    assert whole.desired_replicas < 6  # the same service with both gateway pods fresh does scale down


@pytest.mark.parametrize("owner", [None, {"kind": "InferenceService", "name": "o", "uid": "u2", "controller": True}],
                         ids=["users", "another-service"])
def test_the_daemon_takes_no_deployment_of_the_services_name_that_is_not_its_own(owner: dict[str, Any] | None
                                                                                 ) -> None:
    """Found by the isvc review (7 Dec 2026): ``decide_once`` read the Deployment ``<name>`` by name and decided from
    its replicas whoever's it was (a user's ``vc`` at 5 replicas read as the service's 5); now one that is not the
    service's (``plan.child_ownership``) counts as none, as the planner takes it: no decision until the service's
    own is created (stand-ins for the Kubernetes reads: nothing is written, no writer is there to write)."""
    import threading
    import types

    from modalscale.operator.autoscale.handlers import decide_once

    class Reader:
        def read(self, *_: Any, **__: Any) -> MetricsReading:
            return MetricsReading(None, None)

    users = {"metadata": {"name": "vc", "namespace": "ml", "labels": {"app": "mine"},
                          "ownerReferences": [owner] if owner else []},
             "spec": {"replicas": 5}, "status": {"replicas": 5, "readyReplicas": 5}}

    class Response:
        data = json.dumps(users).encode()

    raw = {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
           "metadata": {"name": "vc", "namespace": "ml", "uid": "u1", "generation": 1},
           "spec": {"model": {"name": "byo"}, "scaling": {"mode": "Utilization"}, "gateway": {"enabled": False}}}
    lock = threading.Lock()
    deps: Any = types.SimpleNamespace(
        autoscale=types.SimpleNamespace(reader=Reader()),
        observer=types.SimpleNamespace(read_isvc=lambda ns, name: raw, apps=types.SimpleNamespace(
            read_namespaced_deployment=lambda *_, **__: Response())),
        lock_for=lambda uid: lock, clock=lambda: NOW)
    round_ = decide_once(deps, "ml", "vc", None, logging.getLogger("test"))
    assert round_.state is not None and round_.state.recommendations == ()  # no decision taken


def featureless(u: Universe) -> Universe:
    """``u`` with the gateway's demand as a model without image or text inputs (the new-user trial's ``ident``,
    one FP32 input) has it: every request in the ``text`` class, its image count and its 0 tokens observed
    (``gateway.features.FEATURELESS``), no pixel series."""
    for key, rows in list(u.rows.items()):
        bare = key.removeprefix("recent_")
        if bare not in ("requests", "images", "pixels", "tokens"):
            continue
        kept = [(labels, v) for labels, v in rows if labels.get("component") != "gateway"]
        for labels, v in rows:
            if labels.get("component") == "gateway" and bare in ("requests", "images", "tokens"):
                kept.append(({**labels, "modality": "text"}, v if bare == "requests" else 0.0))
        u.rows[key] = kept
    return u


def test_a_model_without_image_or_text_inputs_is_sized_on_its_rate_and_observed_service_time() -> None:
    """The gateway counts such a request in the text class with 0 images and 0 tokens: read as 6 req/s of text
    with no features, timed by Triton's observed service time, it is a valid workload (0 tokens is no missing
    feature for the text class), and a service under load is never read idle (no scale to zero on it)."""
    reading = read(featureless(universe(runtime_features=False)), gateway=True)
    assert reading.problem is None, reading.problem
    (text,) = reading.workload or ()
    assert text.modality.value == "text" and text.rate_rps == pytest.approx(2 * RPS_PER_POD)
    assert (text.mean_image_count, text.mean_image_pixels, text.mean_text_tokens) == (0.0, 0.0, 0.0)
    assert text.observed_service_ms == pytest.approx(SERVICE_MS)
    obs, decision = decide(reading)  # a profiled model (costModelRef): its prediction at 0 images, 0 tokens
    assert decision.valid, decision.message
    assert decision.desired_replicas >= 1
    # without one (`modalscale profile` drives IMAGES / TEXT only): Predictive falls back to Utilization
    unprofiled = recommend(obs, ScalingPolicy(scale_down_stabilization_s=0, target_p95_latency_ms=1000),
                           ScalerState(), None, NOW)
    assert unprofiled.valid and unprofiled.mode_used.value == "Utilization", unprofiled.message
    from modalscale.autoscaler.policy import observed_idle

    assert not observed_idle(obs, ScalingPolicy(min_replicas=0, scale_to_zero_after_s=60), NOW)
