"""Issue 22 fault 4's kind: the user info of a configured Prometheus or OpenCost URL never reaches a condition, an
Event, status, a log line or a start-up error.

``MODALSCALE_PROMETHEUS_URL=https://promuser:Pr0mS3cret@...`` is how a Prometheus behind basic auth is configured
(requests and prometheus-api-client send the user info as HTTP Basic credentials); the readers wrote the URL as
given into ``PrometheusUnreachable`` / ``HistoryUnavailable`` messages, which the operator shows in conditions,
Events and logs. Port 1 on 127.0.0.1 is closed, so each reader meets a real connection failure.
"""

from __future__ import annotations

import datetime as dt

import pytest

from modalscale.api import conditions as R
from modalscale.costmodel.anomaly import AnomalyConfig
from modalscale.costmodel.catalog import load_catalog
from modalscale.operator.autoscale.observe import PrometheusReader
from modalscale.operator.budget.history import HistoryUnavailable, PrometheusHistory
from modalscale.operator.opencost_source import PriceBook
from modalscale.operator.settings import ConfigError, Settings
from modalscale.redaction import REDACTED, redact_url

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
USER, PASSWORD = "promuser-7f3a", "Pr0mS3cret"
CLOSED_URL = f"http://{USER}:{PASSWORD}@127.0.0.1:1"


def _leaks(text: str) -> list[str]:
    return [s for s in (USER, PASSWORD, "cHJvbXVzZXI") if s in text]


def test_the_autoscalers_unreachable_prometheus_message_shows_the_url_without_user_info() -> None:
    reading = PrometheusReader(CLOSED_URL, timeout_s=2).read("ml", "vc", "multimodal", T0)
    assert reading.problem is not None
    reason, message = reading.problem
    assert reason == R.PROMETHEUS_UNREACHABLE
    assert _leaks(message) == [], message
    assert f"Prometheus at http://{REDACTED}@127.0.0.1:1 did not answer" in message


def test_the_spend_history_unavailable_message_shows_the_url_without_user_info() -> None:
    with pytest.raises(HistoryUnavailable) as err:
        PrometheusHistory(CLOSED_URL, timeout_s=2).read("ml", "daily", T0, AnomalyConfig(), 60)
    assert _leaks(str(err.value)) == [], str(err.value)
    assert f"Prometheus at http://{REDACTED}@127.0.0.1:1 did not answer" in str(err.value)
    # The budget handlers' success message ("Read N burn-rate samples ... from Prometheus at ...") shows this.
    assert PrometheusHistory(CLOSED_URL).shown_url == f"http://{REDACTED}@127.0.0.1:1"


def test_an_unreachable_opencost_problem_shows_no_user_info() -> None:
    book = PriceBook(load_catalog(None), f"https://{USER}:{PASSWORD}@127.0.0.1:1", clock=lambda: T0)
    try:
        obs = book.observation()
    finally:
        book.close()
    assert obs is not None and obs.prices is None
    assert "OpenCost unreachable" in obs.problem and _leaks(obs.problem) == [], obs.problem


@pytest.mark.parametrize("variable", ["MODALSCALE_PROMETHEUS_URL", "MODALSCALE_OPENCOST_URL"])
@pytest.mark.parametrize("value", [f"{USER}:{PASSWORD}@prom:9090", f"ftp://{USER}:{PASSWORD}@prom:9090/x"])
def test_a_start_up_error_names_the_setting_without_its_user_info(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({variable: value})
    assert _leaks(str(err.value)) == [] and f"{variable}=" in str(err.value) and "prom:9090" in str(err.value)


@pytest.mark.parametrize(("url", "shown"), [
    ("https://u:p%40ss@prom.example:9090/prom", f"https://{REDACTED}@prom.example:9090/prom"),
    ("http://prom.example:9090", "http://prom.example:9090"),
    ("u:p@prom:9090", f"{REDACTED}@prom:9090"),
])
def test_redact_url_keeps_host_port_and_path(url: str, shown: str) -> None:
    assert redact_url(url) == shown
