"""Events are posted off the reconcile's path (issue 21 §3) and still emitted: against the real apiserver, a
ValidatingAdmissionPolicy refuses the operator's Events in one namespace; the service there is still created and
reported Ready (the refusal is logged), and once the policy is lifted the next service's Event is posted by the
same operator, with the fields it always had."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from modalscale.devenv.kube import wait_for
from tests.integration.operator.isvc_helpers import create, get, make_isvc, wait_condition

CONTROLLER = "modalscale.io/modalscale-operator"


def operator_events(api: Any, ns: str, name: str) -> list[dict[str, Any]]:
    """events.k8s.io Events the operator posted about ``name`` (raw dicts)."""
    import json

    resp = client.EventsV1Api(api).list_namespaced_event(ns, _preload_content=False)
    return [e for e in json.loads(resp.data)["items"]
            if e.get("reportingController") == CONTROLLER and e["regarding"]["name"] == name]


def probe_refused(api: Any, ns: str) -> bool:
    """Whether the apiserver now refuses an Event like the operator's in ``ns`` (a dry run: nothing stored)."""
    import datetime as dt

    ev = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"generateName": "probe-", "namespace": ns},
          "eventTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "reportingController": CONTROLLER,
          "reportingInstance": "probe", "action": "Reconcile", "reason": "Probe", "type": "Normal",
          "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "name": "probe", "namespace": ns}}
    try:
        client.EventsV1Api(api).create_namespaced_event(ns, ev, dry_run="All")
    except ApiException as exc:
        if "the test refuses the operator's Events here" in (exc.body or ""):
            return True
        raise
    return False


@pytest.fixture
def events_refused(api: Any, namespace: str) -> Iterator[str]:
    """A policy and its binding that refuse the operator's Events in ``namespace``; yields the binding's name (the
    test deletes it to lift the refusal; anything left is deleted afterwards)."""
    adm = client.AdmissionregistrationV1Api(api)
    name = f"refuse-events-{namespace}"
    adm.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["events.k8s.io"], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["events"]}]},
                 "validations": [{"expression": f"!has(object.reportingController) || "
                                                f"object.reportingController != '{CONTROLLER}'",
                                  "message": "the test refuses the operator's Events here"}]}})
    adm.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}}})
    try:
        wait_for(lambda: probe_refused(api, namespace), 60, "the policy refusing the operator's Events", 0.2)
        yield name
    finally:
        for delete in (adm.delete_validating_admission_policy_binding, adm.delete_validating_admission_policy):
            try:
                delete(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def test_a_refused_event_does_not_fail_the_reconcile_and_later_events_are_still_posted(
        api: Any, operator: Any, namespace: str, events_refused: str) -> None:
    create(api, namespace, make_isvc("refused-ev"))
    wait_condition(api, namespace, "refused-ev", "Ready", "True")  # children created, status written
    wait_for(lambda: [line for line in operator.log().splitlines()
                      if "Posting the event failed: reason=Creating status=" in line
                      and "the test refuses the operator's Events here" in line], 30,
             "the refused Creating Event logged",
             explain=lambda: "\n".join(line for line in operator.log().splitlines()[-3000:]
                                       if "vent" in line and "Daemon" not in line)[-4000:])
    client.AppsV1Api(api).read_namespaced_deployment("refused-ev", namespace)
    client.CoreV1Api(api).read_namespaced_service("refused-ev", namespace)
    assert operator_events(api, namespace, "refused-ev") == []
    assert get(api, namespace, "refused-ev")["status"]["observedGeneration"] == 1

    client.AdmissionregistrationV1Api(api).delete_validating_admission_policy_binding(events_refused)
    wait_for(lambda: not probe_refused(api, namespace), 60, "the refusal lifted", 0.2)
    created = create(api, namespace, make_isvc("posted-ev"))
    (ev,) = wait_for(lambda: [e for e in operator_events(api, namespace, "posted-ev") if e["reason"] == "Creating"],
                     30, "the next service's Creating Event")
    assert (ev["type"], ev["action"], ev["reportingInstance"]) == ("Normal", "Reconcile", "modalscale-operator")
    assert ev["regarding"]["uid"] == created["metadata"]["uid"] and ev["regarding"]["kind"] == "InferenceService"
    wait_condition(api, namespace, "posted-ev", "Ready", "True")
