"""How the Writer applies a plan (issue 21 §3, reconcile p99 in the creation burst): the creates of a new service go
at once, its Deployments once the objects their pods use exist; patches and deletes keep the plan's order; Events
are queued and posted off the reconcile's path, in order per object, a refused post logged and never raised.

``write_steps`` is pure and tested on the planner's real plans; ``EventPoster`` is tested with a recording
``post`` (its own logic: order, retries, flush); against the real apiserver: tests/integration/operator/
test_events_off_path.py.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from modalscale.api.inferenceservice import parse_isvc
from modalscale.operator.apply import EventPoster, Step, write_steps
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, Write, plan_isvc
from tests.unit.operator import test_isvc_gateway_plan as gw
from tests.unit.operator.test_isvc_plan import FILES, NOW, make_isvc

LOG = logging.getLogger("test-apply-batches")


def names(ws: list[Write]) -> list[tuple[str, str, str]]:
    return [(w.action, w.kind, w.name) for w in ws]


def test_a_new_services_creates_go_at_once_and_its_deployment_once_the_configmap_it_mounts_exists() -> None:
    plan = plan_isvc(parse_isvc(make_isvc()), IsvcObserved(), FILES, PlanConfig(), NOW)
    assert [w.kind for w in plan.writes] == ["ConfigMap", "Deployment", "Service"]  # the plan's order, unchanged
    (step,) = write_steps(plan.writes)
    assert names(step.at_once) == [("create", "ConfigMap", "vc-model-repo"), ("create", "Service", "vc")]
    assert names(step.then) == [("create", "Deployment", "vc")]


def test_with_the_gateway_both_deployments_wait_for_the_service_account_and_configmap() -> None:
    plan, _ = gw.run(gw.make_isvc())
    (step,) = write_steps(plan.writes)
    assert {w.kind for w in step.at_once} == {"ConfigMap", "Service", "ServiceAccount", "Role", "RoleBinding",
                                              "PodDisruptionBudget"}
    assert [(w.kind, w.name) for w in step.then] == [("Deployment", "vc"), ("Deployment", "vc-gateway")]
    assert sorted(id(w) for w in step.at_once + step.then) == sorted(id(w) for w in plan.writes)  # each once


def test_patches_and_deletes_keep_the_plans_order_one_at_a_time() -> None:
    # Turning the gateway off: the Service switches back to the replicas before the gateway's objects go.
    body = gw.make_isvc()
    plan, obs = gw.run(body)
    plan, obs = gw.run(body, obs)
    off = plan_isvc(parse_isvc(gw.make_isvc(gateway=gw.OFF)), obs, FILES, PlanConfig(gateway_image=gw.IMAGE), NOW)
    assert off.writes and all(w.action != "create" for w in off.writes)
    assert write_steps(off.writes) == [Step([w]) for w in off.writes]


def test_a_create_between_patches_stays_between_them_and_an_empty_plan_has_no_step() -> None:
    p1, c1, c2, p2 = (Write("Deployment", "patch", "a", {}), Write("ConfigMap", "create", "b", {}),
                      Write("Service", "create", "c", {}), Write("Service", "patch", "d", {}))
    d = Write("Deployment", "create", "e", {})
    assert write_steps([p1, c1, c2, p2]) == [Step([p1]), Step([c1, c2]), Step([p2])]
    assert write_steps([p1, d, p2]) == [Step([p1]), Step([d]), Step([p2])]  # a Deployment alone: nothing to wait for
    assert write_steps([]) == []


class Recorder:
    """``post``: records (namespace, reason) in order; fails the first ``fail`` calls with ``error``."""

    def __init__(self, fail: int = 0, error: Exception | None = None, delay_s: float = 0.0) -> None:
        self.posted: list[tuple[str, str]] = []
        self.attempts = 0
        self.fail, self.error, self.delay_s = fail, error, delay_s

    def __call__(self, ns: str, ev: dict[str, Any]) -> None:
        self.attempts += 1
        time.sleep(self.delay_s)
        if self.attempts <= self.fail:
            assert self.error is not None
            raise self.error
        self.posted.append((ns, ev["reason"]))


def event(reason: str, ns: str = "ns") -> dict[str, Any]:
    return {"metadata": {"namespace": ns}, "reason": reason, "regarding": {"name": "vc"}}


def test_events_are_posted_in_order_off_the_callers_thread_and_flush_waits_for_them() -> None:
    post = Recorder(delay_s=0.05)
    counted: list[tuple[str, str]] = []
    poster = EventPoster(post, lambda ns, name: counted.append((ns, name)))
    t0 = time.monotonic()
    for i in range(5):
        poster.put(event(f"R{i}"), LOG)
    assert time.monotonic() - t0 < 0.05  # queued: the caller did not wait for five posts of 50 ms
    assert poster.flush(5.0)
    assert post.posted == [("ns", f"R{i}") for i in range(5)]
    assert counted == [("ns", "vc")] * 5
    assert poster.close(1.0)


@pytest.mark.parametrize("error", [ApiException(status=500, reason="etcd"), ConnectionResetError("reset")],
                         ids=["500", "no-answer"])
def test_a_transient_failure_is_retried_and_the_event_still_posted(error: Exception) -> None:
    post = Recorder(fail=2, error=error)
    poster = EventPoster(post, lambda ns, name: None, retry_s=0.01)
    poster.put(event("Creating"), LOG)
    assert poster.flush(5.0)
    assert post.posted == [("ns", "Creating")] and post.attempts == 3


def test_a_refused_post_is_logged_not_raised_and_the_next_event_is_posted(caplog: pytest.LogCaptureFixture) -> None:
    refusal = ApiException(status=403, reason="Forbidden")
    refusal.body = '{"message": "denied by policy"}'
    post = Recorder(fail=1, error=refusal)
    poster = EventPoster(post, lambda ns, name: None, retry_s=0.01)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        poster.put(event("Refused"), LOG)
        poster.put(event("Next"), LOG)
        assert poster.flush(5.0)
    assert post.attempts == 2  # 403 is not retried
    assert post.posted == [("ns", "Next")]
    assert "Posting the event failed: reason=Refused status=403 body={\"message\": \"denied by policy\"}" in caplog.text


def test_flush_gives_up_after_its_timeout_and_close_stops_the_thread() -> None:
    release = threading.Event()
    poster = EventPoster(lambda ns, ev: release.wait(5), lambda ns, name: None)
    poster.put(event("Slow"), LOG)
    assert not poster.flush(0.05)
    release.set()
    assert poster.close(5.0)
    assert poster.flush(0.01)  # nothing started: nothing to wait for


class Calls:
    """Stand-ins for the typed clients' create calls: each takes ``delay_s``, records (what, start, end); the kinds
    in ``refuse`` answer 500."""

    def __init__(self, delay_s: float, refuse: tuple[str, ...] = ()) -> None:
        self.delay_s, self.refuse = delay_s, refuse
        self.calls: dict[str, tuple[float, float]] = {}
        self.lock = threading.Lock()

    def _create(self, kind: str) -> Any:
        def create(namespace: str, body: dict[str, Any], **_: Any) -> None:
            t0 = time.monotonic()
            time.sleep(self.delay_s)
            with self.lock:
                self.calls[kind] = (t0, time.monotonic())
            if kind in self.refuse:
                raise ApiException(status=500, reason=f"{kind} refused")
        return create

    def __getattr__(self, name: str) -> Any:
        kinds = {"create_namespaced_config_map": "ConfigMap", "create_namespaced_service": "Service",
                 "create_namespaced_deployment": "Deployment"}
        if name in kinds:
            return self._create(kinds[name])
        raise AttributeError(name)


def writer_over(calls: Calls) -> Any:
    from modalscale.operator.apply import Writer
    from modalscale.operator.metrics import OperatorMetrics
    from tests.unit.operator.test_isvc_cache import unreachable_api

    writer = Writer(unreachable_api(), OperatorMetrics())
    writer.core = writer.apps = calls
    return writer


def test_apply_all_overlaps_the_creates_and_starts_the_deployment_after_the_configmap() -> None:
    plan = plan_isvc(parse_isvc(make_isvc()), IsvcObserved(), FILES, PlanConfig(), NOW)
    calls = Calls(delay_s=0.2)
    done: list[str] = []
    writer = writer_over(calls)
    t0 = time.monotonic()
    writer.apply_all("ml", plan.writes, lambda w: done.append(w.kind))
    took = time.monotonic() - t0
    assert sorted(done) == ["ConfigMap", "Deployment", "Service"]
    cm, svc, dep = calls.calls["ConfigMap"], calls.calls["Service"], calls.calls["Deployment"]
    assert svc[0] < cm[1] and cm[0] < svc[1]  # the ConfigMap and the Service overlap
    assert dep[0] >= cm[1]  # the Deployment's pods mount the ConfigMap: created after it
    assert took < 0.55  # two steps of 0.2 s, not three


def test_a_failed_configmap_create_is_raised_and_no_deployment_is_created() -> None:
    plan = plan_isvc(parse_isvc(make_isvc()), IsvcObserved(), FILES, PlanConfig(), NOW)
    calls = Calls(delay_s=0.05, refuse=("ConfigMap",))
    with pytest.raises(ApiException, match="ConfigMap refused"):
        writer_over(calls).apply_all("ml", plan.writes)
    assert set(calls.calls) == {"ConfigMap", "Service"}  # the Service went through: the next pass finds it


def test_writer_event_returns_at_once_and_an_unreachable_apiserver_never_reaches_the_caller(
        caplog: pytest.LogCaptureFixture) -> None:
    # Before the queue, Writer.event caught only ApiException: a post that got no answer (connection refused or
    # reset) raised out of the reconcile after its writes and status were done.
    writer = writer_over(Calls(delay_s=0.0))
    writer.events_out.retry_s = 0.01

    class Unreachable:
        def create_namespaced_event(self, namespace: str, body: dict[str, Any]) -> None:
            raise ConnectionRefusedError("nobody there")

    writer.events = Unreachable()
    body = {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "vc", "namespace": "ml", "uid": "u-1"}}
    with caplog.at_level(logging.INFO, logger=LOG.name):
        writer.event(body, "Normal", "Creating", "creating", LOG)  # returns: the post happens on another thread
        assert writer.close(5.0)
    assert "Posting the event failed: reason=Creating status=None body=ConnectionRefusedError: nobody there" \
        in caplog.text
    assert writer.metrics.api_writes.labels(kind="Event", verb="create")._value.get() == 3  # three attempts
