"""A child the API server refuses as invalid (400 / 422) is reported on the InferenceService field it comes from
(found by a new-user audit, 6 Dec 2026: a toleration with operator Exists and a value passed the CRD, the
Deployment's create got 422 and the operator logged a traceback every 60 s with nothing in status or Events).
The end-to-end case: tests/integration/operator/test_isvc_refused.py."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from modalscale.api.errors import InvalidSpec
from modalscale.operator.isvc.plan import Write
from modalscale.operator.isvc.reconcile import child_refusal


def refused(*causes: tuple[str, str], status: int = 422, body: object = None) -> ApiException:
    exc = ApiException(status=status, reason="Unprocessable Entity")
    exc.body = body if body is not None else json.dumps(
        {"kind": "Status", "details": {"name": "vc", "kind": "Deployment",
                                      "causes": [{"reason": "FieldValueInvalid", "field": f, "message": m}
                                                 for f, m in causes]}}).encode()
    return exc


@pytest.mark.parametrize(("field", "spec_field"), [
    ("spec.template.spec.tolerations[0].value", "spec.placement.tolerations"),
    ("spec.template.spec.nodeSelector", "spec.placement.nodeSelector"),
    ("spec.template.spec.containers[0].image", "spec.runtime.image"),
    ("spec.template.spec.containers[0].resources.limits", "spec.resources"),
    # The CRD's pattern admits "a..b", which a DNS-1123 subdomain (the pod's account name) is not.
    ("spec.template.spec.serviceAccountName", "spec.serviceAccountName"),
    ("spec.template.spec.imagePullSecrets[0].name", "spec.imagePullSecrets"),
    ("metadata.labels", "spec"),
])
def test_the_refused_child_field_names_the_spec_field_it_comes_from(field: str, spec_field: str) -> None:
    err = child_refusal(Write("Deployment", "create", "vc", {}),
                        refused((field, "Invalid value: \"bar\": value must be empty when `operator` is 'Exists'")))
    assert isinstance(err, InvalidSpec) and err.reason == "InvalidSpec" and err.field == spec_field
    assert str(err).startswith(f"{spec_field}: the API server refused the Deployment vc made from it (422: {field}: ")
    assert str(err).endswith(f"fix {spec_field}")


@pytest.mark.parametrize("body", [b"not json", b"", b"[]", b'{"details": null}'])
def test_an_answer_without_causes_still_names_the_child_and_the_status(body: bytes) -> None:
    err = child_refusal(Write("Service", "create", "vc", {}), refused(status=400, body=body))
    assert err.field == "spec" and "the Service vc made from it (400: Unprocessable Entity)" in str(err)
