"""The Writer's log line and ``modalscale_api_writes_total`` say what became of each write: written, refused by the
API server (with its status code) or failed without an answer (found by a user trial: "Wrote kind=NetworkPolicy
verb=create ..." was logged, and the write counted, before the call, for writes the API server refused)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from modalscale.operator.apply import Writer
from modalscale.operator.isvc.plan import Write
from modalscale.operator.metrics import OperatorMetrics
from tests.unit.operator.test_isvc_cache import unreachable_api

NP = {"metadata": {"name": "vc"}, "spec": {"podSelector": {"matchLabels": {"bad key!": "x"}}}}


class _Networking:
    """``create_namespaced_network_policy`` answers with ``error`` (None: accepted)."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error

    def create_namespaced_network_policy(self, namespace: str, body: dict[str, Any]) -> None:
        if self.error is not None:
            raise self.error

    def patch_namespaced_network_policy(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("not patched")

    def delete_namespaced_network_policy(self, name: str, namespace: str) -> None:
        if self.error is not None:
            raise self.error


def _writer(error: Exception | None) -> Writer:
    writer = Writer(unreachable_api(), OperatorMetrics())
    writer.networking = _Networking(error)  # type: ignore[assignment]
    return writer


def _count(writer: Writer, outcome: str, verb: str = "create") -> float:
    value: float = writer.metrics.api_writes.labels(kind="NetworkPolicy", verb=verb, outcome=outcome)._value.get()
    return value


@pytest.mark.parametrize(("error", "outcome", "words"), [
    (None, "written", "Wrote kind=NetworkPolicy verb=create namespace=ml name=vc"),
    (ApiException(status=422, reason="Unprocessable Entity"), "refused",
     "Write refused kind=NetworkPolicy verb=create namespace=ml name=vc status=422"),
    (ConnectionRefusedError("nobody there"), "failed",
     "Write failed kind=NetworkPolicy verb=create namespace=ml name=vc error=ConnectionRefusedError"),
], ids=["written", "refused", "no-answer"])
def test_a_write_is_logged_and_counted_as_what_became_of_it(error: Exception | None, outcome: str, words: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    writer = _writer(error)
    with caplog.at_level(logging.INFO, logger="modalscale.operator.writes"):
        if error is None:
            writer.apply("ml", Write("NetworkPolicy", "create", "vc", NP))
        else:
            with pytest.raises(type(error)):
                writer.apply("ml", Write("NetworkPolicy", "create", "vc", NP))
    assert words in caplog.text
    if error is not None:
        assert "Wrote" not in caplog.text
    assert [_count(writer, o) for o in ("written", "refused", "failed")] == [
        1.0 if o == outcome else 0.0 for o in ("written", "refused", "failed")]


def test_a_delete_that_finds_the_object_gone_is_not_logged_as_deleted(caplog: pytest.LogCaptureFixture) -> None:
    writer = _writer(ApiException(status=404, reason="Not Found"))
    with caplog.at_level(logging.INFO, logger="modalscale.operator.writes"):
        writer.apply("ml", Write("NetworkPolicy", "delete", "vc", {}))  # not an error
    assert "Write refused kind=NetworkPolicy verb=delete namespace=ml name=vc status=404" in caplog.text
    assert "Wrote" not in caplog.text
    assert (_count(writer, "written", "delete"), _count(writer, "refused", "delete")) == (0.0, 1.0)


def test_a_status_patch_the_api_server_refuses_is_counted_refused(caplog: pytest.LogCaptureFixture) -> None:
    writer = _writer(None)

    class Custom:
        def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> None:
            raise ApiException(status=409, reason="Conflict")

    writer.custom = Custom()  # type: ignore[assignment]
    with caplog.at_level(logging.INFO, logger="modalscale.operator.writes"), pytest.raises(ApiException):
        writer.patch_status("inferenceservices", "ml", "vc", {"phase": "Ready"})
    assert "Write refused kind=inferenceservices verb=patch-status namespace=ml name=vc status=409" in caplog.text
    assert writer.metrics.api_writes.labels(kind="inferenceservices", verb="patch-status",
                                            outcome="refused")._value.get() == 1


def test_the_kinds_the_writer_checks_are_the_kinds_it_has_calls_for() -> None:
    from modalscale.operator.apply import WRITE_KINDS

    assert WRITE_KINDS == {"Deployment", "Service", "ConfigMap", *_writer(None)._gateway_calls()}
    with pytest.raises(ValueError, match="unknown kind Pod"):
        _writer(None).apply("ml", Write("Pod", "create", "vc", {}))
