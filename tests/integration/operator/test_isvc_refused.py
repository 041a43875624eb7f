"""On a cluster whose CRD is older than its rules, the operator refuses what today's CRD would: by field, with
``Ready=False``/``InvalidSpec``, one Warning Event, and nothing created.

The rules: the name (it becomes the Service's, a DNS-1035 label, and the pods' label value, at most 63
characters), ``minReplicas >= 1`` outside Fixed mode unless the gateway is on (nothing else activates a service
from 0 replicas) and CPU and memory above 0, the gateway pods' too (a replica priced 0 USD never counts against a
budget). A control plane of its own carries the CRD without those rules; the session cluster's CRD has them and
refuses such objects at the apiserver (tests/integration/test_crds.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from modalscale.devenv.kube import wait_for
from tests.integration.operator.isvc_helpers import condition, create, get, make_isvc, wait_condition

REPO = Path(__file__).resolve().parents[3]
NEW_RULES = ("self.metadata.name", "minReplicas >= 1", "[.]0*")
"""Fragments of the CEL rules the older CRD lacks."""


def _strip_new_rules(schema: Any) -> int:
    """Remove the CEL rules named by :data:`NEW_RULES` from ``schema`` in place; returns how many."""
    removed = 0
    if isinstance(schema, dict):
        rules = schema.get("x-kubernetes-validations")
        if rules:
            kept = [r for r in rules if not any(f in r["rule"] for f in NEW_RULES)]
            removed += len(rules) - len(kept)
            if kept:
                schema["x-kubernetes-validations"] = kept
            else:
                del schema["x-kubernetes-validations"]
        for value in schema.values():
            removed += _strip_new_rules(value)
    elif isinstance(schema, list):
        for value in schema:
            removed += _strip_new_rules(value)
    return removed


@pytest.fixture(scope="module")
def older_crds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``crds/`` as it was before the rules: a folder of CRD files."""
    crds = tmp_path_factory.mktemp("older-crds")
    for path in (REPO / "crds").glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        if doc["metadata"]["name"] == "inferenceservices.modalscale.io":
            # the name, minReplicas, cpu and memory rules, and (issue 24) the staged name's length and the
            # image-encoder pool's cpu and memory rules, which reuse their fragments, and the name's length with
            # the gateway (its replicas' Service), and the gateway pods' cpu and memory rules (7 Dec 2026)
            assert _strip_new_rules(doc) == 10
        (crds / path.name).write_text(yaml.safe_dump(doc))
    return crds


@pytest.fixture(scope="module")
def older_crd_cluster(tmp_path_factory: pytest.TempPathFactory, older_crds: Path) -> Iterator[Any]:
    from modalscale.devenv.cluster import running_cluster

    with running_cluster(tmp_path_factory.mktemp("older-crd-cluster"), nodes=0, crd_dir=older_crds) as c:
        yield c


@pytest.fixture(scope="module")
def older_crd_operator(older_crd_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from modalscale.devenv.operator_process import OperatorProcess

    op = OperatorProcess(older_crd_cluster.kubeconfig, tmp_path_factory.mktemp("older-crd-operator") / "op.log")
    try:
        op.wait_healthy()
        yield op
    finally:
        op.stop()


REFUSED = [
    ("my.model.v2", {}, "metadata.name", ["DNS-1035", "rename", "'my-model-v2'"]),
    ("1abc", {}, "metadata.name", ["DNS-1035", "rename"]),
    ("a" * 70, {}, "metadata.name", ["70 characters", "at most 63"]),
    ("g" * 60, {"gateway": {"enabled": True}}, "metadata.name", ["60 characters", "at most 54",
                                                           "spec.gateway.enabled: false"]),
    ("util-zero", {"scaling": {"mode": "Utilization", "minReplicas": 0, "maxReplicas": 3},
                   "gateway": {"enabled": False}}, "spec.scaling.minReplicas", ["at least 1", "mode: Fixed"]),
    ("no-cpu", {"resources": {"cpu": "0", "memory": "1Gi"}}, "spec.resources.cpu", ["greater than 0", "0 USD"]),
    ("no-memory", {"resources": {"cpu": "1", "memory": "0Gi"}}, "spec.resources.memory", ["greater than 0"]),
    ("gw-no-cpu", {"gateway": {"enabled": True, "resources": {"cpu": "0"}}}, "spec.gateway.resources.cpu",
     ["greater than 0"]),
]


def test_what_the_crd_now_refuses_is_refused_by_the_operator_naming_the_field_and_nothing_is_created(
        older_crd_cluster: Any, older_crd_operator: Any) -> None:
    api, op = older_crd_cluster.api_client(), older_crd_operator
    ns = "default"
    for name, spec, _, _ in REFUSED:  # the older CRD admits every one of them
        create(api, ns, make_isvc(name, **spec))
    create(api, ns, make_isvc("fine"))  # a valid neighbour is served as usual
    for name, _, field, fragments in REFUSED:
        c = wait_condition(api, ns, name, "Ready", "False", "InvalidSpec", timeout_s=120)
        assert c["message"].startswith(f"{field}: "), c["message"]
        for fragment in fragments:
            assert fragment in c["message"], (fragment, c["message"])
        assert get(api, ns, name)["status"]["observedGeneration"] == 1
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    # The operator writes the neighbour's children one after another: wait for all three (waiting for the Deployment
    # alone and then listing Services found none once, on a loaded machine).
    wait_for(lambda: apps.list_namespaced_deployment(ns).items
             and [s for s in core.list_namespaced_service(ns).items if s.metadata.name != "kubernetes"]
             and [m for m in core.list_namespaced_config_map(ns).items if m.metadata.name.endswith("-model-repo")],
             120, "the valid neighbour's Deployment, Service and model-repository ConfigMap")
    assert [d.metadata.name for d in apps.list_namespaced_deployment(ns).items] == ["fine"]
    assert [s.metadata.name for s in core.list_namespaced_service(ns).items
            if s.metadata.name != "kubernetes"] == ["fine"]
    assert [m.metadata.name for m in core.list_namespaced_config_map(ns).items
            if m.metadata.name.endswith("-model-repo")] == ["fine-model-repo"]

    def warnings() -> dict[str, list[str]] | None:
        out: dict[str, list[str]] = {}
        for e in core.list_namespaced_event(ns).items:
            if e.reason == "InvalidSpec" and e.type == "Warning":
                out.setdefault(e.involved_object.name, []).extend([e.message] * (e.count or 1))
        return out if set(out) == {n for n, _, _, _ in REFUSED} else None

    by_object = wait_for(warnings, 60, "one InvalidSpec Warning Event per refused InferenceService")
    for name, _, field, _ in REFUSED:
        assert any(m.startswith(f"{field}: ") for m in by_object[name]), by_object[name]
    # A resync later (the operator's timer runs every few seconds in tests) nothing was posted again.
    resync_s = 5.0
    wait_for(lambda: op.metric("modalscale_reconciles_total", kind="InferenceService", result="InvalidSpec")
             >= 2 * len(REFUSED), 20 * resync_s, "refused objects reconciled again by the timer")
    again = warnings()
    assert again is not None and {n: len(m) for n, m in again.items()} == {n: len(m) for n, m in by_object.items()}
    assert condition(get(api, ns, "fine"), "Ready") is not None, op.log()[-4000:]


CHILD_REFUSED = [
    ("tol", {"placement": {"tolerations": [{"key": "foo", "operator": "Exists", "value": "bar"}]}},
     "spec.placement.tolerations", "value must be empty when `operator` is 'Exists'"),
    ("sel", {"placement": {"nodeSelector": {"bad key!": "x"}}}, "spec.placement.nodeSelector", "bad key!"),
]


def test_a_child_the_api_server_refuses_is_reported_on_the_spec_field_once(
        older_crd_cluster: Any, older_crd_operator: Any) -> None:
    """Found by a new-user audit (6 Dec 2026): these pass the CRD (any CRD: its schema has no rule for them), the
    Deployment's create got 422, and the operator logged a traceback every 60 s with an empty status and no Event.
    Now: Ready=False / InvalidSpec naming the spec field with the API server's own words, one Warning Event, and
    the object left refused until its spec changes (no retry storm)."""
    api, op = older_crd_cluster.api_client(), older_crd_operator
    core = client.CoreV1Api(api)
    ns = "child-refused"
    core.create_namespace({"metadata": {"name": ns}})
    for name, spec, _, _ in CHILD_REFUSED:
        create(api, ns, make_isvc(name, **spec))
    for name, _, field, fragment in CHILD_REFUSED:
        c = wait_condition(api, ns, name, "Ready", "False", "InvalidSpec", timeout_s=120)
        assert c["message"].startswith(f"{field}: the API server refused the Deployment {name} made from it (422: ")
        assert fragment in c["message"], c["message"]

    def warnings() -> dict[str, int] | None:
        out: dict[str, int] = {}
        for e in core.list_namespaced_event(ns).items:
            if e.reason == "InvalidSpec" and e.type == "Warning":
                out[e.involved_object.name] = out.get(e.involved_object.name, 0) + (e.count or 1)
        return out if set(out) == {n for n, _, _, _ in CHILD_REFUSED} else None

    assert wait_for(warnings, 60, "one InvalidSpec Warning Event per refused child") == {"tol": 1, "sel": 1}
    refused = op.metric("modalscale_reconciles_total", kind="InferenceService", result="InvalidSpec")
    wait_for(lambda: op.metric("modalscale_reconciles_total", kind="InferenceService", result="InvalidSpec")
             >= refused + 2 * len(CHILD_REFUSED), 120, "the refused objects reconciled again by the timer")
    assert warnings() == {"tol": 1, "sel": 1}  # reported once, not again at each resync
    assert not client.AppsV1Api(api).list_namespaced_deployment(ns).items


def test_threads_beyond_a_cpu_replicas_cores_get_one_warning_event_per_spec_change_and_the_service_runs(
        older_crd_cluster: Any, older_crd_operator: Any) -> None:
    api, op = older_crd_cluster.api_client(), older_crd_operator
    core = client.CoreV1Api(api)
    ns = "threads"
    core.create_namespace({"metadata": {"name": ns}})
    body = make_isvc("threads", resources={"cpu": "2", "memory": "2Gi"},
                     runtime={"instanceCount": 16, "intraOpThreads": 64})
    create(api, ns, body)

    def warnings() -> list[str]:
        return [m for e in core.list_namespaced_event(ns, field_selector="involvedObject.name=threads").items
                if e.reason == "CPUOversubscribed" and e.type == "Warning" for m in [e.message] * (e.count or 1)]

    (message,) = wait_for(warnings, 60, "a CPUOversubscribed Warning Event")
    assert "16 x 64 = 1024 threads on 2 CPU" in message and "raise spec.resources.cpu" in message
    client.AppsV1Api(api).read_namespaced_deployment("threads", ns)  # served, not refused
    ok = op.metric("modalscale_reconciles_total", kind="InferenceService", result="ok")
    wait_for(lambda: op.metric("modalscale_reconciles_total", kind="InferenceService", result="ok") >= ok + 3, 60,
             "three more reconciles (the timer)")
    assert len(warnings()) == 1  # the same spec generation warns once
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "modalscale.io", "v1alpha1", ns, "inferenceservices", "threads", {"spec": {"runtime": {"intraOpThreads": 32}}})
    wait_for(lambda: len(warnings()) == 2, 60, "a second Warning Event for the changed spec")
    assert "16 x 32 = 512 threads" in " ".join(warnings())


def test_after_the_crd_is_upgraded_a_refused_object_stays_writable_and_can_be_deleted(
        older_crd_cluster: Any, older_crd_operator: Any, older_crds: Path) -> None:
    """The name rule holds on create only: an object admitted before it keeps its status and finalizer writes
    (a rule re-checked on every update would leave it stuck in Terminating, its finalizer unremovable)."""
    from kubernetes.client.rest import ApiException

    from modalscale.devenv.kube import install_crds

    api = older_crd_cluster.api_client()
    custom = client.CustomObjectsApi(api)
    ns = "upgrade"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    create(api, ns, make_isvc("my.model.v3"))
    wait_condition(api, ns, "my.model.v3", "Ready", "False", "InvalidSpec", timeout_s=120)
    try:
        install_crds(api, REPO / "crds")  # today's CRD, with the rules

        def refused_now() -> bool:
            try:
                custom.delete_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices",
                                                       create(api, ns, make_isvc("probe.name"))["metadata"]["name"])
            except ApiException as exc:
                return exc.status == 422
            return False

        wait_for(refused_now, 60, "the upgraded CRD refusing a new bad name")
        patch = {"spec": {"priority": 5}}  # generation 2: the operator refuses it again and writes its status
        custom.patch_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices", "my.model.v3",
                                              patch)
        wait_for(lambda: (get(api, ns, "my.model.v3").get("status") or {}).get("observedGeneration") == 2, 60,
                 "status of generation 2 written under the upgraded CRD")
        assert get(api, ns, "my.model.v3")["metadata"]["finalizers"]  # kopf's: deletion needs the operator
        custom.delete_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices", "my.model.v3")

        def gone() -> bool:
            try:
                get(api, ns, "my.model.v3")
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_for(gone, 60, "the refused object deleted (its finalizer removed under the upgraded CRD)")
    finally:
        install_crds(api, older_crds)
