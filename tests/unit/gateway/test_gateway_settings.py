"""GatewaySettings.from_env: defaults, every value read, and every error listed at once."""

from __future__ import annotations

import pytest

from modalscale.gateway.activation import ACTIVATION_ANNOTATION, activation_patch
from modalscale.gateway.settings import SETTINGS_ENV, ConfigError, GatewaySettings

BASE = {"MODALSCALE_GATEWAY_NAMESPACE": "team-a", "MODALSCALE_GATEWAY_SERVICE": "clip"}


def test_defaults_with_namespace_and_service() -> None:
    s = GatewaySettings.from_env(BASE)
    assert (s.namespace, s.service, s.replicas_service) == ("team-a", "clip", "clip-replicas")
    assert (s.http_port, s.grpc_port, s.metrics_port) == (8000, 8001, 9090)
    assert s.tenant_header == "x-modalscale-tenant" and s.inputs.images == "IMAGES" and s.inputs.text == "TEXT"
    assert s.static_endpoints == ()


def test_every_value_is_read() -> None:
    env = {**BASE, "MODALSCALE_GATEWAY_REPLICAS_SERVICE": "other", "MODALSCALE_GATEWAY_HTTP_PORT": "9000",
           "MODALSCALE_GATEWAY_GRPC_PORT": "0", "MODALSCALE_GATEWAY_METRICS_PORT": "9100",
           "MODALSCALE_GATEWAY_MAX_INFLIGHT": "8", "MODALSCALE_GATEWAY_QUEUE_SIZE": "3",
           "MODALSCALE_GATEWAY_QUEUE_TIMEOUT_S": "2.5", "MODALSCALE_GATEWAY_MAX_BODY_BYTES": "4096",
           "MODALSCALE_GATEWAY_TENANT_HEADER": "X-Team", "MODALSCALE_GATEWAY_MAX_TENANTS": "5",
           "MODALSCALE_GATEWAY_IMAGES_INPUT": "pixels", "MODALSCALE_GATEWAY_TEXT_INPUT": "prompt",
           "MODALSCALE_GATEWAY_AFFINITY_LOAD_FACTOR": "1.5", "MODALSCALE_GATEWAY_DRAIN_TIMEOUT_S": "7",
           "MODALSCALE_GATEWAY_SHUTDOWN_DELAY_S": "0",
           "MODALSCALE_GATEWAY_UPSTREAM_TIMEOUT_S": "11", "MODALSCALE_GATEWAY_LOG_LEVEL": "debug",
           "MODALSCALE_GATEWAY_ENDPOINTS": "h:1:2", "MODALSCALE_GATEWAY_PROBE_INTERVAL_S": "0",
           "MODALSCALE_GATEWAY_WARM_PROBE_INTERVAL_S": "0.5"}
    assert set(env) == SETTINGS_ENV  # the test covers every variable
    s = GatewaySettings.from_env(env)
    assert (s.replicas_service, s.http_port, s.grpc_port, s.metrics_port) == ("other", 9000, 0, 9100)
    assert (s.max_inflight, s.queue_size, s.queue_timeout_s, s.max_body_bytes) == (8, 3, 2.5, 4096)
    assert (s.tenant_header, s.max_tenants, s.inputs.images, s.inputs.text) == ("x-team", 5, "pixels", "prompt")
    assert (s.affinity_load_factor, s.drain_timeout_s, s.upstream_timeout_s, s.log_level) == (1.5, 7, 11, "DEBUG")
    assert s.shutdown_delay_s == 0 and s.probe_interval_s == 0  # 0: no active health probes
    assert s.warm_probe_interval_s == 0.5
    assert [e.key for e in s.static_endpoints] == ["h:1"]


def test_static_endpoints_need_no_namespace() -> None:
    s = GatewaySettings.from_env({"MODALSCALE_GATEWAY_ENDPOINTS": "127.0.0.1:8000:8001"})
    assert s.static_endpoints[0].grpc_target == "127.0.0.1:8001"


def test_every_error_is_listed_at_once() -> None:
    env = {"MODALSCALE_GATEWAY_SERVICE": "Bad_Name", "MODALSCALE_GATEWAY_HTTP_PORT": "http",
           "MODALSCALE_GATEWAY_QUEUE_SIZE": "-1", "MODALSCALE_GATEWAY_MAX_INFLIGT": "3",
           "MODALSCALE_GATEWAY_AFFINITY_LOAD_FACTOR": "0.5", "MODALSCALE_GATEWAY_TENANT_HEADER": "x tenant",
           "MODALSCALE_GATEWAY_IMAGES_INPUT": "X", "MODALSCALE_GATEWAY_TEXT_INPUT": "X",
           "MODALSCALE_GATEWAY_LOG_LEVEL": "loud", "MODALSCALE_OTHER": "ignored: not the gateway's prefix"}
    with pytest.raises(ConfigError) as err:
        GatewaySettings.from_env(env)
    text = str(err.value)
    for needle in ("MODALSCALE_GATEWAY_SERVICE='Bad_Name'", "MODALSCALE_GATEWAY_HTTP_PORT='http': not a whole number",
                   "MODALSCALE_GATEWAY_QUEUE_SIZE='-1': out of range",
                   "MODALSCALE_GATEWAY_MAX_INFLIGT: unknown setting; did you mean MODALSCALE_GATEWAY_MAX_INFLIGHT?",
                   "MODALSCALE_GATEWAY_AFFINITY_LOAD_FACTOR='0.5'", "MODALSCALE_GATEWAY_TENANT_HEADER='x tenant'",
                   "are both 'X'", "MODALSCALE_GATEWAY_LOG_LEVEL='LOUD'",
                   "MODALSCALE_GATEWAY_NAMESPACE, MODALSCALE_GATEWAY_SERVICE: required"):
        assert needle in text, needle
    assert "MODALSCALE_OTHER" not in text


def test_bad_static_endpoint_is_named() -> None:
    with pytest.raises(ConfigError, match="MODALSCALE_GATEWAY_ENDPOINTS: 'h:x' is not host:http_port"):
        GatewaySettings.from_env({"MODALSCALE_GATEWAY_ENDPOINTS": "h:x"})


def test_ports_must_differ() -> None:
    with pytest.raises(ConfigError, match="must differ"):
        GatewaySettings.from_env({**BASE, "MODALSCALE_GATEWAY_METRICS_PORT": "8000"})


def test_activation_patch_is_an_rfc3339_utc_annotation() -> None:
    from datetime import datetime, timedelta, timezone

    now = datetime(2026, 12, 2, 9, 15, 3, 700000, tzinfo=timezone(timedelta(hours=1)))
    assert activation_patch(now) == {"metadata": {"annotations": {ACTIVATION_ANNOTATION: "2026-12-02T08:15:03Z"}}}
    with pytest.raises(ValueError, match="timezone-aware"):
        activation_patch(datetime(2026, 12, 2))


def test_cli_exits_2_listing_every_bad_setting(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from modalscale.cli import main

    monkeypatch.setenv("MODALSCALE_GATEWAY_QUEUE_SIZE", "many")
    monkeypatch.delenv("MODALSCALE_GATEWAY_NAMESPACE", raising=False)
    monkeypatch.delenv("MODALSCALE_GATEWAY_ENDPOINTS", raising=False)
    assert main(["gateway"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("modalscale gateway: invalid gateway settings:")
    assert "MODALSCALE_GATEWAY_QUEUE_SIZE='many'" in err and "MODALSCALE_GATEWAY_NAMESPACE" in err


def test_the_gateway_lists_its_known_names_once() -> None:
    env = {f"MODALSCALE_GATEWAY_PORT_8000_TCP{s}": "x" for s in ("", "_ADDR", "_PORT")}
    with pytest.raises(ConfigError) as err:
        GatewaySettings.from_env(env)
    assert str(err.value).count("the gateway reads") == 1 and str(err.value).count(": unknown setting") == 3
