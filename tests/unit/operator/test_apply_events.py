"""The Writer's Events (issue 21 §3, reconcile p99 in the creation burst): queued and posted off the reconcile's
path, in order per object, a transient failure retried, a refused post logged and never raised.

``EventPoster`` is tested with a recording ``post`` (its own logic: order, retries, flush); against the real
apiserver: tests/integration/operator/test_events_off_path.py.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from modalscale.operator.apply import EVENT_RETRIES, EventPoster

LOG = logging.getLogger("test-apply-events")


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
    poster = EventPoster(post, lambda ns, name, error: counted.append((ns, name)))
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
    poster = EventPoster(post, lambda ns, name, error: None, retry_s=0.01)
    poster.put(event("Creating"), LOG)
    assert poster.flush(5.0)
    assert post.posted == [("ns", "Creating")] and post.attempts == 3


def test_a_refused_post_is_logged_not_raised_and_the_next_event_is_posted(caplog: pytest.LogCaptureFixture) -> None:
    refusal = ApiException(status=403, reason="Forbidden")
    refusal.body = '{"message": "denied by policy"}'
    post = Recorder(fail=1, error=refusal)
    poster = EventPoster(post, lambda ns, name, error: None, retry_s=0.01)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        poster.put(event("Refused"), LOG)
        poster.put(event("Next"), LOG)
        assert poster.flush(5.0)
    assert post.attempts == 2  # 403 is not retried
    assert post.posted == [("ns", "Next")]
    assert "Posting the event failed: reason=Refused status=403 body={\"message\": \"denied by policy\"}" in caplog.text


def test_flush_gives_up_after_its_timeout_and_close_stops_the_thread() -> None:
    release = threading.Event()
    poster = EventPoster(lambda ns, ev: release.wait(5), lambda ns, name, error: None)
    poster.put(event("Slow"), LOG)
    assert not poster.flush(0.05)
    release.set()
    assert poster.close(5.0)
    assert poster.flush(0.01)  # nothing started: nothing to wait for


def writer_over_nothing() -> Any:
    from modalscale.operator.apply import Writer
    from modalscale.operator.metrics import OperatorMetrics
    from tests.unit.operator.test_isvc_cache import unreachable_api

    return Writer(unreachable_api(), OperatorMetrics())


def test_writer_event_returns_at_once_and_an_unreachable_apiserver_never_reaches_the_caller(
        caplog: pytest.LogCaptureFixture) -> None:
    # Before the queue, Writer.event caught only ApiException: a post that got no answer (connection refused or
    # reset) raised out of the reconcile after its writes and status were done.
    writer = writer_over_nothing()
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
    writes = writer.metrics.api_writes
    assert writes.labels(kind="Event", verb="create", outcome="failed")._value.get() == 3  # three attempts, none posted
    assert writes.labels(kind="Event", verb="create", outcome="written")._value.get() == 0


def test_an_event_posted_now_is_posted_on_the_callers_thread_and_a_transient_failure_is_retried_by_the_queue(
        caplog: pytest.LogCaptureFixture) -> None:
    # A refusal's Event is posted once per new problem (reconcile.refuse): a post lost to one reset was never posted
    # again; retried on the caller's thread it would hold a kopf handler through the waits.
    post = Recorder(fail=0, error=ConnectionResetError("reset"))
    poster = EventPoster(post, lambda ns, name, error: None, retry_s=0.01)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        poster.post_now(event("InvalidSpec"), LOG)  # posted here, no thread
        assert post.posted == [("ns", "InvalidSpec")] and not poster._threads
        post.fail = 2
        t0 = time.monotonic()
        poster.post_now(event("Refused"), LOG)  # fails once here, returns at once, queued
        assert time.monotonic() - t0 < 0.5 and poster._threads
        assert poster.flush(5.0)
    assert post.attempts == 3 and post.posted == [("ns", "InvalidSpec"), ("ns", "Refused")]
    assert "queued to retry: reason=Refused status=None error=ConnectionResetError" in caplog.text


def test_an_event_posted_now_gives_up_after_the_queues_retries_or_at_a_refusal_and_logs_it_without_raising(
        caplog: pytest.LogCaptureFixture) -> None:
    post = Recorder(fail=99, error=ConnectionResetError("reset"))
    poster = EventPoster(post, lambda ns, name, error: None, retry_s=0.01)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        poster.post_now(event("Refused"), LOG)
        assert poster.flush(5.0)
    assert post.attempts == 1 + EVENT_RETRIES and post.posted == []
    assert "Posting the event failed: reason=Refused status=None body=ConnectionResetError: reset" in caplog.text
    invalid = Recorder(fail=99, error=ApiException(status=422, reason="Unprocessable Entity"))
    refused = EventPoster(invalid, lambda ns, name, error: None, retry_s=0.01)
    refused.post_now(event("Refused"), LOG)
    assert invalid.attempts == 1 and not refused._threads  # a refusal by the API server is not retried
