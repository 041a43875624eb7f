"""``modalscale load`` aimed at the other protocol's port printed only ``UNAVAILABLE ... Socket closed`` per
request (a new-user trial: ``profile --url`` takes Triton's HTTP port, ``load --url`` its gRPC one by default)."""

from __future__ import annotations

from modalscale.runtime.load_cli import protocol_hint
from modalscale.runtime.loadgen import LoadReport, ModalityStats


def report(requests: int, errors: int) -> LoadReport:
    nan = float("nan")
    return LoadReport(1.0, (ModalityStats("all", requests, errors, 0.0, nan, nan, nan, nan),))


def test_every_request_failed_names_the_port_and_the_flag() -> None:
    hint = protocol_hint(report(10, 10), "grpc", "127.0.0.1:8000")
    assert hint is not None and "8001 on Triton" in hint and "--protocol http" in hint
    assert "--protocol grpc" in (protocol_hint(report(3, 3), "http", "h:8001") or "")


def test_no_hint_when_any_request_was_answered_or_none_was_sent() -> None:
    assert protocol_hint(report(10, 9), "grpc", "h:8001") is None
    assert protocol_hint(report(0, 0), "grpc", "h:8001") is None
