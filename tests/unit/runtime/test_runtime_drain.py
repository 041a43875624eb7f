"""The drain step before SIGTERM: what counts as in flight, and when the wait ends."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from modalscale.runtime.drain import inflight_requests, main, wait_until_drained


def test_in_flight_sums_executing_and_queued_requests_over_all_models() -> None:
    samples = {
        'modalscale_inflight_requests{model="multimodal"}': 3.0,
        'modalscale_inflight_requests{model="multimodal_image"}': 2.0,
        'nv_inference_pending_request_count{model="multimodal_image",version="1"}': 4.0,
        'nv_inference_request_success{model="multimodal",version="1"}': 99.0,
        'modalscale_inflight_requests_other': 7.0,
    }
    assert inflight_requests(samples) == 9.0
    assert inflight_requests({}) == 0.0


class FakeServer:
    """In-flight counts per poll on a fake clock (0.1 s per poll)."""

    def __init__(self, counts: list[float]) -> None:
        self.counts = counts
        self.t = 0.0
        self.polls = 0

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s

    def scrape(self) -> Mapping[str, float]:
        value = self.counts[min(self.polls, len(self.counts) - 1)]
        self.polls += 1
        return {'modalscale_inflight_requests{model="m"}': value}


def test_waits_for_the_requests_then_for_the_quiet_period() -> None:
    server = FakeServer([3, 2, 2, 1] + [0] * 100)
    result = wait_until_drained(server.scrape, timeout_s=30, quiet_s=1.0, clock=server.clock, sleep=server.sleep)
    assert result.drained and result.reason == "Drained" and result.inflight == 0
    assert abs(result.waited_s - 1.4) < 1e-6  # idle from t=0.4, quiet for 1.0 s


def test_a_request_during_the_quiet_period_restarts_it() -> None:
    server = FakeServer([0, 0, 0, 1] + [0] * 100)
    result = wait_until_drained(server.scrape, timeout_s=30, quiet_s=1.0, clock=server.clock, sleep=server.sleep)
    assert result.drained and abs(result.waited_s - 1.4) < 1e-6


def test_busy_until_the_deadline_gives_up_without_claiming_drained() -> None:
    server = FakeServer([5])
    result = wait_until_drained(server.scrape, timeout_s=2.0, quiet_s=1.0, clock=server.clock, sleep=server.sleep)
    assert not result.drained and result.reason == "Timeout" and result.inflight == 5
    assert 2.0 <= result.waited_s < 2.2


def test_an_unreachable_server_ends_the_wait_at_once() -> None:
    def refused() -> Mapping[str, float]:
        raise httpx.ConnectError("connection refused")

    result = wait_until_drained(refused, timeout_s=30, quiet_s=1.0, clock=lambda: 0.0, sleep=lambda _s: None)
    assert (result.drained, result.reason, result.inflight) == (False, "MetricsUnavailable", None)


def test_prestop_command_exits_zero_when_nothing_answers(capsys) -> None:
    assert main(["--metrics-url", "http://127.0.0.1:9/metrics", "--timeout-s", "5"]) == 0
    assert "MetricsUnavailable" in capsys.readouterr().out
