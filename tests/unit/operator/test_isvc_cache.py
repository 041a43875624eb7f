"""The children's watch caches (operator/isvc/cache.py): list, watch from the list's version, bookmarks, a new list on
410 Gone that reports what vanished, owners found for every kind, NotSynced before the first list (the reconcile
holds), and an Observer that reads them instead of the API server.

The list calls are scripted, answering with real ``urllib3.HTTPResponse`` objects (what the typed client returns with
``_preload_content=False``)."""

from __future__ import annotations

import asyncio
import copy
import io
import json
import threading
from types import SimpleNamespace
from typing import Any

import pytest
import urllib3
from kubernetes import client

from modalscale.api.inferenceservice import parse_isvc
from modalscale.operator.isvc.cache import (
    MANAGED_SELECTOR,
    ChildCaches,
    Informer,
    NotSynced,
    Pokes,
    owner_of,
)
from modalscale.operator.isvc.objects import build_deployment, build_service, gateway_labels, owned_labels
from modalscale.operator.isvc.observe import Observer
from tests.factories import inference_service


class Body(io.BytesIO):
    """A response body that closes at its end, as a socket's does (urllib3 streams until the body is closed)."""

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        if not data:
            self.close()
        return data


def response(payload: Any, chunks: list[bytes] | None = None) -> urllib3.HTTPResponse:
    body = b"".join(chunks) if chunks is not None else json.dumps(payload).encode()
    return urllib3.HTTPResponse(body=Body(body), preload_content=False, status=200)


def obj(name: str, rv: str, ns: str = "ns", owner: str | None = None, labels: dict[str, str] | None = None,
        **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "resourceVersion": rv, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": "InferenceService", "name": owner, "controller": True}]
    return {"metadata": meta, **extra}


def events(*evs: tuple[str, dict[str, Any]]) -> list[bytes]:
    """A watch stream's bytes, cut mid-line to check the reassembly of lines."""
    text = b"".join(json.dumps({"type": t, "object": o}).encode() + b"\n" for t, o in evs)
    return [text[:7], text[7:50], text[50:]]


class Script:
    """A list call that answers each request with the next scripted response and records the arguments."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> urllib3.HTTPResponse:
        self.calls.append(kwargs)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_reads_before_the_first_list_raise_not_synced_instead_of_answering_missing() -> None:
    inf = Informer("Deployment", Script(), MANAGED_SELECTOR, lambda *_: None)
    with pytest.raises(NotSynced, match="Deployment"):
        inf.get("ns", "a")
    with pytest.raises(NotSynced):
        inf.items("ns")


def test_list_then_watch_from_its_version_with_bookmarks_and_every_change_reported_with_its_owner() -> None:
    changes: list[tuple[str, Any, Any]] = []
    listing = {"metadata": {"resourceVersion": "10"}, "items": [obj("a", "5", owner="svc-a")]}
    stream = events(("MODIFIED", obj("a", "11", owner="svc-a")), ("BOOKMARK", {"metadata": {"resourceVersion": "12"}}),
                    ("ADDED", obj("b", "13", owner="svc-b")), ("DELETED", obj("a", "14", owner="svc-a")))
    script = Script(response(listing), response(None, stream))
    inf = Informer("Deployment", script, MANAGED_SELECTOR, lambda k, o, n: changes.append((k, o, n)))
    inf.list_once()
    assert inf.get("ns", "a") == listing["items"][0] and changes == []  # the first list is no news
    assert inf.watch_once() is True
    assert script.calls[0]["label_selector"] == MANAGED_SELECTOR
    watch = script.calls[1]
    assert (watch["watch"], watch["resource_version"], watch["allow_watch_bookmarks"]) == (True, "10", True)
    assert inf.get("ns", "a") is None and inf.get("ns", "b") is not None
    assert inf.resource_version == "14"
    assert [(k, (o or {}).get("metadata", {}).get("resourceVersion"), (n or {}).get("metadata", {}).get(
        "resourceVersion")) for k, o, n in changes] == [("Deployment", "5", "11"), ("Deployment", None, "13"),
                                                          ("Deployment", "11", None)]


def test_410_gone_lists_again_and_reports_what_vanished_and_changed_meanwhile() -> None:
    changes: list[tuple[str, Any, Any]] = []
    first = {"metadata": {"resourceVersion": "10"}, "items": [obj("a", "5", owner="x"), obj("b", "6", owner="y")]}
    gone = events(("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"}))
    second = {"metadata": {"resourceVersion": "90"}, "items": [obj("b", "80", owner="y"), obj("c", "85", owner="z")]}
    script = Script(response(first), response(None, gone), response(second), response(None, []))
    inf = Informer("ConfigMap", script, MANAGED_SELECTOR, lambda k, o, n: changes.append((k, o, n)))
    inf.list_once()
    assert inf.watch_once() is False  # 410: must list again
    inf.list_once()
    assert inf.relists == 1 and inf.resource_version == "90"
    assert inf.get("ns", "a") is None and inf.get("ns", "c") is not None
    reported = sorted(((o or n)["metadata"]["name"], o is None, n is None) for _, o, n in changes)
    assert reported == [("a", False, True), ("b", False, False), ("c", True, False)]


def test_run_retries_after_a_failed_list_and_lists_again_after_410() -> None:
    gone = events(("ERROR", {"kind": "Status", "code": 410, "message": "gone"}))
    listing = {"metadata": {"resourceVersion": "3"}, "items": [obj("a", "3")]}
    script = Script(client.exceptions.ApiException(status=500, reason="boom"), response(listing),
                    response(None, gone), response(listing))
    inf = Informer("Pod", script, MANAGED_SELECTOR, lambda *_: None)

    def stop_when_scripts_run_out(**kwargs: Any) -> urllib3.HTTPResponse:
        if not script.answers:
            inf.stop()
            return response(None, [])
        return script(**kwargs)

    inf.list_call = stop_when_scripts_run_out
    import modalscale.operator.isvc.cache as cache

    old, cache.RETRY_S = cache.RETRY_S, 0.0
    try:
        inf.run()
    finally:
        cache.RETRY_S = old
    assert inf.synced.is_set() and inf.get("ns", "a") is not None
    assert ["watch" in c for c in script.calls] == [False, False, True, False]  # failed list, list, 410 watch, list


def test_owners_come_from_the_controller_reference_the_pod_labels_or_the_hpa_target() -> None:
    assert owner_of("Deployment", obj("d", "1", owner="svc")) == ("ns", "svc")
    assert owner_of("Pod", obj("svc-abc", "1", labels={"modalscale.io/inferenceservice": "svc"})) == ("ns", "svc")
    assert owner_of("Pod", obj("gw-abc", "1", labels={"modalscale.io/gateway": "svc"})) == ("ns", "svc")
    hpa = obj("h", "1", spec={"scaleTargetRef": {"kind": "Deployment", "name": "svc"}})
    assert owner_of("HorizontalPodAutoscaler", hpa) == ("ns", "svc")
    assert owner_of("HorizontalPodAutoscaler", obj("h", "1", spec={"scaleTargetRef": {"kind": "StatefulSet",
                                                                                       "name": "x"}})) is None
    assert owner_of("ConfigMap", obj("other", "1")) is None


def test_pokes_cross_from_the_informer_thread_to_the_worker_loop() -> None:
    pokes = Pokes()

    async def worker() -> bool:
        event = pokes.subscribe("ns", "svc")
        threading.Thread(target=pokes.poke, args=("ns", "svc")).start()
        await asyncio.wait_for(event.wait(), 5)
        pokes.unsubscribe("ns", "svc", event)
        return event.is_set()

    assert asyncio.run(worker()) is True
    assert pokes.sent == 1


def test_a_poke_with_no_worker_wakes_the_next_worker_of_that_object() -> None:
    pokes = Pokes()
    pokes.poke("ns", "svc")  # no worker: not started yet, or this replica paused by peering

    async def subscribe(name: str) -> bool:
        return pokes.subscribe("ns", name).is_set()

    assert asyncio.run(subscribe("other")) is False
    assert asyncio.run(subscribe("svc")) is True
    assert asyncio.run(subscribe("svc")) is False  # taken once


ISVC = inference_service("svc", "ns", uid="u1", generation=1,
                         resources={"cpu": "1", "memory": "1Gi", "gpu": {"count": 1, "type": "nvidia-l4"}},
                         scaling={"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 2},
                         gateway={"enabled": False})


def unreachable_api() -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard port: any request the Observer made would fail
    return client.ApiClient(cfg)


def synced_caches(objects: dict[str, list[dict[str, Any]]]) -> ChildCaches:
    caches = ChildCaches(unreachable_api(), namespaces=("ns",))
    for kind, informers in caches.informers.items():
        for inf in informers:
            inf.list_call = Script(response({"metadata": {"resourceVersion": "1"}, "items": objects.get(kind, [])}))
            inf.list_once()
    return caches


def test_observer_reads_children_from_the_caches_without_a_request() -> None:
    spec = parse_isvc(ISVC)
    dep, svc = build_deployment(spec, 1, {}), build_service(spec)
    pod = obj("svc-1", "3", labels=owned_labels(spec), status={"phase": "Running"})
    other_pod = obj("other-1", "3", labels={**owned_labels(spec), "modalscale.io/inferenceservice": "other"})
    hpa = obj("theirs", "4", spec={"scaleTargetRef": {"kind": "Deployment", "name": "svc"}})
    observer = Observer(unreachable_api(), synced_caches(
        {"Deployment": [dep], "Service": [svc], "Pod": [pod, other_pod], "HorizontalPodAutoscaler": [hpa]}))
    obs = observer.observe(spec, {})
    assert obs.deployment == dep and obs.service == svc and obs.configmap is None
    assert obs.pods == [pod] and obs.foreign_autoscalers == ["theirs"]
    assert obs.gateway_objects == {"Deployment": None, "ServiceAccount": None}


def test_observer_reads_the_gateway_pods_with_the_gateway_enabled() -> None:
    """Their failures go into GatewayReady and Degraded (a new-user trial, 7 Dec 2026: Pending gateway pods read as
    "0/2 gateway pod(s) ready" and Degraded=False Healthy)."""
    gateway = gateway_labels(parse_isvc(ISVC))
    pods = [obj("svc-gateway-1", "3", labels={**gateway, "modalscale.io/gateway": "svc"}),
            obj("svc-1", "3", labels=owned_labels(parse_isvc(ISVC))),
            obj("other-gateway-1", "3", labels={**gateway, "modalscale.io/gateway": "other"})]
    enabled = parse_isvc({**ISVC, "spec": {**ISVC["spec"], "gateway": {"enabled": True}}})
    obs = Observer(unreachable_api(), synced_caches({"Pod": pods})).observe(enabled, {})
    assert obs.gateway_pods == [pods[0]] and obs.pods == [pods[1]]
    assert Observer(unreachable_api(), synced_caches({"Pod": pods})).observe(parse_isvc(ISVC), {}).gateway_pods == []


def test_observer_reads_every_leftover_of_a_gateway_or_pool_the_spec_no_longer_has() -> None:
    """The plan deletes only what it read (``plan.delete_refusal`` checks each object's owner and label): with the
    gateway off and no ``spec.stages``, two reads each tell whether an earlier spec left anything (the object made
    first and deleted last among them, so a pass stopped between two deletes is seen too); when one did,
    every object of those names is read, so that each delete is checked against the object itself."""
    spec = parse_isvc(ISVC)
    managed = {"app.kubernetes.io/managed-by": "modalscale-operator"}
    left = {"RoleBinding": [obj("svc-gateway", "2", owner="svc", labels=managed)],  # a pass stopped after the
            "ServiceAccount": [obj("svc-gateway", "2", owner="svc", labels=managed)],  # Deployment's delete
            "ConfigMap": [obj("svc-image-encoder-model-repo", "2", owner="svc", labels=managed)],
            "Service": [obj("svc-image-encoder", "2", owner="svc", labels=managed)]}
    obs = Observer(unreachable_api(), synced_caches(left)).observe(spec, {})
    assert set(obs.gateway_objects) == {"ServiceAccount", "Role", "RoleBinding", "Service", "NetworkPolicy",
                                        "PodDisruptionBudget", "Deployment"}
    assert obs.gateway_objects["RoleBinding"] == left["RoleBinding"][0]
    assert set(obs.image_encoder) == {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"}
    assert obs.image_encoder["Service"] == left["Service"][0]
    none_left = Observer(unreachable_api(), synced_caches({})).observe(spec, {})
    assert set(none_left.gateway_objects) == {"Deployment", "ServiceAccount"}
    assert set(none_left.image_encoder) == {"ConfigMap", "Deployment"}


def test_observer_holds_on_a_cache_that_has_not_synced() -> None:
    caches = synced_caches({})
    caches.informers["Pod"][0].synced.clear()
    with pytest.raises(NotSynced, match="Pod"):
        Observer(unreachable_api(), caches).observe(parse_isvc(ISVC), {})


class _AppsWithExisting:
    """An AppsV1Api stand-in: the Deployment ``existing`` already exists (create answers 409, a read returns it),
    patches are recorded."""

    def __init__(self, existing: dict[str, Any]) -> None:
        self.existing = existing
        self.patches: list[tuple[str, str, dict[str, Any], str]] = []

    def create_namespaced_deployment(self, *_: object) -> None:
        raise client.exceptions.ApiException(status=409, reason="AlreadyExists")

    def read_namespaced_deployment(self, name: str, namespace: str, _preload_content: bool = True) -> Any:
        return SimpleNamespace(data=json.dumps(self.existing).encode())

    def patch_namespaced_deployment(self, name: str, namespace: str, body: dict[str, Any],
                                    _content_type: str) -> None:
        self.patches.append((name, namespace, body, _content_type))


def test_a_create_that_finds_the_object_patches_it_back_into_the_cache() -> None:
    # The watch cache keeps only objects with the managed-by label: a Deployment whose label was removed (or that
    # predates it) is missing there, so the plan creates it. The 409 must not end there (it would, every pass,
    # forever): the Writer patches it to the desired object, labels and ownerReferences included, as a pass that had
    # read it with a GET would have. It is read first: only this service's own is patched
    # (test_isvc_child_ownership.py has the foreign ones).
    from modalscale.operator.apply import SMP, Writer
    from modalscale.operator.isvc.plan import Write
    from modalscale.operator.metrics import OperatorMetrics

    spec = parse_isvc(ISVC)
    body = build_deployment(spec, 1, {})
    writer = Writer(unreachable_api(), OperatorMetrics())
    existing = copy.deepcopy(body)
    existing["metadata"]["labels"].pop("app.kubernetes.io/managed-by")
    apps = _AppsWithExisting(existing)
    writer.apps = apps  # type: ignore[assignment]
    writer.apply("ns", Write("Deployment", "create", "svc", body))
    assert apps.patches == [("svc", "ns", body, SMP)]
    assert body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "modalscale-operator"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u1"
