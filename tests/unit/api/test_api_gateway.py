"""``spec.gateway``, ``spec.model.inputs`` and ``spec.scaling.scaleToZeroAfterSeconds`` parsed by the CRD's rules:
defaults, bounds, and scale from zero legal only with the gateway (issue 19)."""

from __future__ import annotations

from typing import Any

import pytest

from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import GATEWAY_ENABLED_DEFAULT, GatewaySpec, ModelInputsSpec, parse_spec

GW = {"enabled": True}


def test_defaults_put_the_gateway_in_front_with_small_pods_and_name_the_built_in_inputs() -> None:
    spec = parse_spec({})
    assert GATEWAY_ENABLED_DEFAULT is True  # issue 19: the gateway is in every service's path by default
    assert spec.gateway == GatewaySpec(enabled=True, replicas=2, max_in_flight=1000, queue_size=1000,
                                       queue_timeout_s=120, max_body_bytes=64 * 1024 * 1024,
                                       tenant_header="x-modalscale-tenant", cpu="100m", memory="256Mi")
    assert parse_spec({"gateway": {}}).gateway.enabled is True
    assert parse_spec({"gateway": {"enabled": False}}).gateway.enabled is False  # the direct Service, when asked
    assert spec.model.inputs == ModelInputsSpec("IMAGES", "TEXT")
    assert spec.scaling.scale_to_zero_after_s is None


def test_every_gateway_field_is_read() -> None:
    spec = parse_spec({"gateway": {"enabled": True, "replicas": 3, "maxInFlight": 64, "queue": {
        "size": 10, "timeoutSeconds": 5}, "maxBodyBytes": 2048, "tenantHeader": "x-team",
        "resources": {"cpu": 1, "memory": "1Gi"}},
        "model": {"inputs": {"images": "pixel_values", "text": "input_ids"}}})
    assert spec.gateway == GatewaySpec(True, 3, 64, 10, 5, 2048, "x-team", "1", "1Gi")
    assert spec.model.inputs == ModelInputsSpec("pixel_values", "input_ids")


@pytest.mark.parametrize(("spec", "accepted"), [
    ({"scaling": {"mode": "Predictive", "minReplicas": 0}, "gateway": GW}, True),
    ({"scaling": {"mode": "Utilization", "minReplicas": 0}, "gateway": GW}, True),
    ({"scaling": {"mode": "Predictive", "minReplicas": 0, "scaleToZeroAfterSeconds": 300}, "gateway": GW}, True),
    ({"scaling": {"mode": "Fixed", "replicas": 0, "minReplicas": 0}}, True),
    ({"scaling": {"mode": "Predictive", "minReplicas": 0}}, True),
    ({"scaling": {"mode": "Predictive", "minReplicas": 0}, "gateway": {}}, True),
    ({"scaling": {"mode": "Predictive", "minReplicas": 0}, "gateway": {"enabled": False}}, False),
    ({"scaling": {"mode": "Utilization", "minReplicas": 0}, "gateway": {"enabled": False}}, False),
], ids=["predictive-gateway", "utilization-gateway", "scale-to-zero-gateway", "fixed-zero-no-gateway",
        "predictive-gateway-unset", "gateway-enabled-unset", "predictive-gateway-off", "utilization-gateway-off"])
def test_min_replicas_zero_is_legal_outside_fixed_mode_only_with_the_gateway(spec: dict[str, Any],
                                                                             accepted: bool) -> None:
    if accepted:
        assert parse_spec(spec).scaling.min_replicas == 0
        return
    with pytest.raises(InvalidSpec) as err:
        parse_spec(spec)
    assert err.value.field == "spec.scaling.minReplicas"
    assert "spec.gateway.enabled: true" in str(err.value)  # the fix is named


@pytest.mark.parametrize(("spec", "field", "fix"), [
    ({"scaling": {"minReplicas": 1, "scaleToZeroAfterSeconds": 60}, "gateway": GW},
     "spec.scaling.scaleToZeroAfterSeconds", "minReplicas: 0"),
    ({"scaling": {"mode": "Fixed", "replicas": 0, "minReplicas": 0, "scaleToZeroAfterSeconds": 60}},
     "spec.scaling.scaleToZeroAfterSeconds", "Predictive or Utilization"),
    ({"scaling": {"minReplicas": 0, "scaleToZeroAfterSeconds": 0}, "gateway": GW},
     "spec.scaling.scaleToZeroAfterSeconds", "[1, 86400]"),
    ({"gateway": {"replicas": 0}}, "spec.gateway.replicas", "[1, 20]"),
    ({"gateway": {"enabled": "yes"}}, "spec.gateway.enabled", "true or false"),
    ({"gateway": {"maxInFlight": 0}}, "spec.gateway.maxInFlight", "[1, 100000]"),
    ({"gateway": {"queue": {"size": -1}}}, "spec.gateway.queue.size", "[0, 100000]"),
    ({"gateway": {"queue": {"timeoutSeconds": 0}}}, "spec.gateway.queue.timeoutSeconds", "[1, 3600]"),
    ({"gateway": {"queue": {"timeout": 5}}}, "spec.gateway.queue.timeout", "timeoutSeconds"),
    ({"gateway": {"maxBodyBytes": 100}}, "spec.gateway.maxBodyBytes", "[1024, 1073741824]"),
    ({"gateway": {"tenantHeader": "X-Tenant"}}, "spec.gateway.tenantHeader", "does not match"),
    ({"gateway": {"resources": {"cpu": "0"}}}, "spec.gateway.resources.cpu", "greater than 0"),
    ({"gateway": {"resources": {"memory": "1GB"}}}, "spec.gateway.resources.memory", "not a quantity"),
    ({"gateway": {"port": 80}}, "spec.gateway.port", "unknown field"),
    ({"model": {"inputs": {"images": "1IMAGES"}}}, "spec.model.inputs.images", "does not match"),
    ({"model": {"inputs": {"audio": "AUDIO"}}}, "spec.model.inputs.audio", "unknown field"),
], ids=["stz-needs-min-zero", "stz-not-fixed", "stz-range", "replicas-range", "enabled-bool", "inflight-range",
        "queue-size-range", "queue-timeout-range", "queue-unknown", "body-range", "header-lowercase", "cpu-zero",
        "memory-unit", "gateway-unknown", "inputs-pattern", "inputs-unknown"])
def test_bad_gateway_fields_are_refused_naming_the_field_and_the_fix(spec: dict[str, Any], field: str,
                                                                     fix: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        parse_spec(spec)
    assert err.value.field == field
    assert fix in str(err.value)
