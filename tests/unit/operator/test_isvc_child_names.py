"""Every name the operator gives a child fits the API's rule for its kind, in every layout, for the longest
InferenceService name the spec admits there (the gateway's ``<name>-replicas`` Service used to exceed 63 characters
for names over 54 with the gateway on, its default: the apiserver refused it and the service never served).

Services are DNS-1035 labels of at most 63 characters; the other kinds DNS-1123 subdomains of at most 253; label
values at most 63 (Kubernetes API conventions, ``IsDNS1035Label`` / ``IsDNS1123Subdomain`` / ``IsValidLabelValue``).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import GATEWAY_NAME_MAX_LENGTH, NAME_MAX_LENGTH, STAGED_NAME_MAX_LENGTH, parse_isvc
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, plan_isvc
from tests.factories import inference_service
from tests.unit.operator.test_isvc_stages import ENCODER_FILES, FRONT_FILES, applied

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)
CONFIG = PlanConfig(gateway_image="op:1", node_loss_toleration_s=30)
STAGES = {"imageEncoder": {"minReplicas": 1, "maxReplicas": 2}}


def body(name: str, gateway: bool, staged: bool) -> dict[str, Any]:
    extra: dict[str, Any] = {"stages": STAGES} if staged else {}
    return inference_service(name, "ml", uid="u-1", generation=1, gateway={"enabled": gateway},
                             scaling={"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 2}, **extra)


def longest_admitted(gateway: bool, staged: bool) -> int:
    for n in range(NAME_MAX_LENGTH + 5, 0, -1):
        try:
            parse_isvc(body("a" * n, gateway, staged))
        except InvalidSpec:
            continue
        return n
    raise AssertionError("no name admitted")


def labels_of(obj: dict[str, Any]) -> list[str]:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    template = (spec.get("template") or {}).get("metadata") or {}
    selector = spec.get("selector") or {}
    return [*(meta.get("labels") or {}).values(), *(template.get("labels") or {}).values(),
            *((selector.get("matchLabels") or selector) if isinstance(selector, dict) else {}).values()]


@pytest.mark.parametrize(("gateway", "staged", "longest"), [
    (False, False, NAME_MAX_LENGTH), (True, False, GATEWAY_NAME_MAX_LENGTH),
    (False, True, STAGED_NAME_MAX_LENGTH), (True, True, min(GATEWAY_NAME_MAX_LENGTH, STAGED_NAME_MAX_LENGTH))],
    ids=["direct", "gateway", "staged", "staged-gateway"])
def test_every_child_of_the_longest_admitted_name_has_a_name_its_kind_allows(gateway: bool, staged: bool,
                                                                           longest: int) -> None:
    assert longest_admitted(gateway, staged) == longest
    spec = parse_isvc(body("a" * longest, gateway, staged))
    obs, writes = IsvcObserved(), []
    for _ in range(3):  # the staged layout settles in passes (pool first, then the front staged)
        plan = plan_isvc(spec, obs, FRONT_FILES if staged else {"multimodal/config.pbtxt": ""}, CONFIG, NOW,
                         encoder_files=ENCODER_FILES)
        writes += [w for w in plan.writes if w.action == "create"]
        obs = applied(obs, plan) if not gateway else obs
    kinds = {w.kind for w in writes}
    assert "Service" in kinds and "Deployment" in kinds
    if gateway:
        assert any(w.name.endswith("-replicas") for w in writes if w.kind == "Service")
    for w in writes:
        limit, rule = (63, DNS_1035) if w.kind == "Service" else (253, DNS_1123_SUBDOMAIN)
        assert len(w.name) <= limit and rule.match(w.name), (w.kind, w.name, len(w.name))
        for value in labels_of(w.body):
            assert len(value) <= 63 and LABEL_VALUE.match(value), (w.kind, w.name, value)


def test_a_name_too_long_for_the_gateway_is_refused_naming_both_fixes() -> None:
    name = "a" * (GATEWAY_NAME_MAX_LENGTH + 1)
    with pytest.raises(InvalidSpec) as info:
        parse_isvc(body(name, True, False))
    assert info.value.field == "metadata.name"
    assert f"at most {GATEWAY_NAME_MAX_LENGTH} characters" in str(info.value)
    assert "spec.gateway.enabled: false" in str(info.value)
    assert parse_isvc(body(name, False, False)).name == name  # the direct Service takes it
