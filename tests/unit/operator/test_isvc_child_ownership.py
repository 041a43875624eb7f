"""An object that merely has a child's name is never the operator's to write (found by the isvc review, 7 Dec 2026).

The plan patched any object it read at a child's name to this InferenceService's labels, owner reference and spec
(``_child_write``), and the Writer patched whatever answered a create with 409: a user's own ConfigMap
``<name>-model-repo``, ServiceAccount ``<name>-gateway`` or Service ``<name>`` became the service's child, overwritten
and garbage-collected with it; another InferenceService's (a second controller reference) made the API server answer
422 in a loop. Now (``plan.child_ownership``): a controller owner reference with this service's uid is its child; no
controller reference but the operator's managed-by label and this service's instance label is a child to adopt back;
anything else is foreign: never created over, patched or deleted, reported in ``ChildConflict`` (and ``Ready`` when
it blocks the replicas or their Service) with a Warning Event on its transitions, whether the plan wanted to write
the name or delete it. The end-to-end case: tests/integration/operator/test_reconcile.py.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Any

import pytest
from kubernetes import client

from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import read_isvc_status, write_isvc_status
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, Write, plan_isvc
from tests.factories import inference_service
from tests.unit.operator.test_isvc_stages import merged

NOW = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
FILES = {"multimodal/config.pbtxt": 'name: "multimodal"\n'}
ENCODER_FILES = {"image_encoder/config.pbtxt": 'name: "image_encoder"\n'}
CONFIG = PlanConfig(gateway_image="op:1", node_loss_toleration_s=30)
STAGES = {"imageEncoder": {"minReplicas": 1, "maxReplicas": 2,
                           "resources": {"cpu": "3", "memory": "4Gi", "gpu": {"count": 1, "type": "nvidia-l4"}}}}

CHILDREN = [("Deployment", "vc"), ("Service", "vc"), ("PodDisruptionBudget", "vc"), ("ConfigMap", "vc-model-repo"),
            ("ServiceAccount", "vc-gateway"), ("Role", "vc-gateway"), ("RoleBinding", "vc-gateway"),
            ("Service", "vc-replicas"), ("NetworkPolicy", "vc-replicas"), ("PodDisruptionBudget", "vc-gateway"),
            ("Deployment", "vc-gateway"), ("ConfigMap", "vc-image-encoder-model-repo"),
            ("Deployment", "vc-image-encoder"), ("Service", "vc-image-encoder"),
            ("PodDisruptionBudget", "vc-image-encoder"), ("NetworkPolicy", "vc-image-encoder")]
"""Every object a BuiltIn service with the gateway and ``spec.stages`` makes, by kind and name."""
UNITS = {"vc": {("Deployment", "vc"), ("ConfigMap", "vc-model-repo")},
         "gateway": {c for c in CHILDREN if c[1] in ("vc-gateway", "vc-replicas")},
         "pool": {c for c in CHILDREN if c[1].startswith("vc-image-encoder")}}
"""The children written together: one foreign object holds every write of its group (a gateway running as a user's
ServiceAccount, a RoleBinding granting a user's Role, replicas mounting a user's ConfigMap as their model)."""


def body(generation: int = 1, **spec: Any) -> dict[str, Any]:
    return inference_service("vc", "ml", uid="u-1", generation=generation, **{
        "scaling": {"mode": "Fixed", "replicas": 2, "minReplicas": 1, "maxReplicas": 4}, "stages": STAGES, **spec})


def slot(obs: IsvcObserved, kind: str, name: str) -> tuple[dict[str, Any], str]:
    """Where ``obs`` keeps the object ``kind``/``name``: (the dict, the key)."""
    if name in ("vc-gateway", "vc-replicas"):
        return obs.gateway_objects, kind
    if name.startswith("vc-image-encoder"):
        return obs.image_encoder, kind
    return obs.__dict__, kind.lower()


def applied(obs: IsvcObserved, plan: Any) -> IsvcObserved:
    """``obs`` after ``plan``'s writes (creates stored Ready with a ClusterIP, patches merged key by key)."""
    obs = copy.deepcopy(obs)
    written = write_isvc_status(plan.status)
    obs.status = read_isvc_status({"status": {k: v for k, v in written.items() if v is not None}})
    for w in plan.writes:
        where, key = slot(obs, w.kind, w.name)
        if w.action == "delete":
            where[key] = None
        elif w.action == "create":
            obj = copy.deepcopy(w.body)
            if w.kind == "Deployment":
                n = obj["spec"]["replicas"]
                obj["metadata"]["generation"] = 1
                obj["status"] = {"observedGeneration": 1, "replicas": n, "readyReplicas": n, "updatedReplicas": n,
                                 "availableReplicas": n}
            if w.kind == "Service":
                obj["spec"]["clusterIP"] = "10.0.0.40"
            where[key] = obj
        else:
            where[key] = merged(where[key], w.body)
    return obs


def run(b: dict[str, Any], obs: IsvcObserved) -> tuple[Any, IsvcObserved]:
    plan = plan_isvc(parse_isvc(b), obs, FILES, CONFIG, NOW, encoder_files=ENCODER_FILES)
    return plan, applied(obs, plan)


def settled(b: dict[str, Any] | None = None) -> IsvcObserved:
    obs = IsvcObserved()
    for _ in range(3):
        _, obs = run(b or body(), obs)
    return obs


def users(kind: str, name: str) -> dict[str, Any]:
    """A user's own object of that kind and name: no owner, none of the operator's labels."""
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "ml", "labels": {"app": "mine"},
                                                           "resourceVersion": "7"},
            "data": {"keep": "me"}, "spec": {"selector": {"app": "mine"}}}


def another_services(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as another InferenceService's child (its controller reference has another uid; the labels stay)."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["ownerReferences"] = [{**obj["metadata"]["ownerReferences"][0], "uid": "u-2", "name": "other"}]
    return obj


def condition(plan: Any, type_: str) -> dict[str, Any] | None:
    return next((c for c in write_isvc_status(plan.status)["conditions"] if c["type"] == type_), None)


@pytest.mark.parametrize("who", ["user", "another-service"])
@pytest.mark.parametrize(("kind", "name"), CHILDREN)
def test_an_object_of_a_childs_name_that_is_not_this_services_is_never_written(kind: str, name: str, who: str) -> None:
    obs = settled()
    where, key = slot(obs, kind, name)
    where[key] = users(kind, name) if who == "user" else another_services(where[key])
    foreign = copy.deepcopy(where[key])
    plan, after = run(body(), obs)
    unit = next((u for u in UNITS.values() if (kind, name) in u), {(kind, name)})
    assert [(w.kind, w.name) for w in plan.writes if (w.kind, w.name) in unit] == []
    c = condition(plan, "ChildConflict")
    assert c is not None and (c["status"], c["reason"]) == ("True", "ForeignObject")
    assert f"{kind} {name} is not this InferenceService's" in c["message"]
    assert f"rename or delete the existing {kind} {name}" in c["message"]
    assert ("uid u-2" if who == "another-service" else "no controller owner reference") in c["message"]
    # One Event for the one cause (Ready's own went out beside it where the object holds the replicas: 2 Warnings)
    (event,) = [e for e in plan.events if e[1] == "ForeignObject"]
    assert event[0] == "Warning" and event[2].startswith("ChildConflict=True") and f"{kind} {name}" in event[2]
    ready = condition(plan, "Ready")
    assert ready is not None
    if (kind, name) in UNITS["vc"] | {("Service", "vc")}:
        assert (ready["status"], ready["reason"]) == ("False", "ForeignObject") and f"{kind} {name}" in ready["message"]
    where, key = slot(after, kind, name)
    where[key] = foreign
    plan, _ = run(body(), after)  # the next pass: the same, and no second Event
    assert [(w.kind, w.name) for w in plan.writes if (w.kind, w.name) in unit] == []
    assert [e for e in plan.events if e[1] == "ForeignObject"] == []


def test_a_new_service_whose_model_repository_name_is_taken_creates_no_replicas_and_says_so() -> None:
    obs = IsvcObserved()
    obs.configmap = users("ConfigMap", "vc-model-repo")
    plan, _ = run(body(stages=None), obs)
    assert [(w.kind, w.name) for w in plan.writes if (w.kind, w.name) in UNITS["vc"]] == []
    ready = condition(plan, "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "ForeignObject")
    assert "rename or delete the existing ConfigMap vc-model-repo" in ready["message"]
    assert {(w.kind, w.name) for w in plan.writes} >= {("Service", "vc"), ("ServiceAccount", "vc-gateway")}


@pytest.mark.parametrize(("kind", "name"), CHILDREN)
def test_an_orphaned_child_with_the_operators_labels_is_adopted_back(kind: str, name: str) -> None:
    """``kubectl delete --cascade=orphan`` takes the owner reference off every child (the labels stay): the service
    made again takes them back with a patch that puts its owner reference on, and no conflict."""
    obs = settled()
    where, key = slot(obs, kind, name)
    where[key] = copy.deepcopy(where[key])
    where[key]["metadata"].pop("ownerReferences")
    plan, _ = run(body(), obs)
    (w,) = [w for w in plan.writes if (w.kind, w.name) == (kind, name)]
    assert w.action == "patch" and w.body["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert condition(plan, "ChildConflict") is None


def test_a_users_object_of_a_disabled_gateways_name_is_reported_as_a_conflict_once_not_at_each_spec_change() -> None:
    """The delete path reports a foreign object as the write path does (it used to post ``ChildNotDeleted`` at every
    spec change for a user's ``<name>-gateway`` ServiceAccount of a service whose gateway was never on)."""
    off = {"enabled": False}
    obs = settled(body(gateway=off))
    obs.gateway_objects["ServiceAccount"] = users("ServiceAccount", "vc-gateway")
    plan, obs = run(body(generation=2, gateway=off), obs)
    assert [w for w in plan.writes if w.name == "vc-gateway"] == []
    c = condition(plan, "ChildConflict")
    assert c is not None and c["status"] == "True" and "ServiceAccount vc-gateway" in c["message"]
    assert "spec.gateway.enabled" in c["message"]
    assert [e[1] for e in plan.events if e[0] == "Warning"] == ["ForeignObject"]
    ready = condition(plan, "Ready")
    assert ready is not None and ready["reason"] != "ForeignObject"
    obs.gateway_objects["ServiceAccount"] = users("ServiceAccount", "vc-gateway")
    plan, obs = run(body(generation=3, gateway=off), obs)
    assert [w for w in plan.writes if w.name == "vc-gateway"] == []
    assert [e for e in plan.events if e[1] in ("ForeignObject", "ChildNotDeleted")] == []
    obs.gateway_objects["ServiceAccount"] = None  # the user deleted it
    plan, _ = run(body(generation=3, gateway=off), obs)
    c = condition(plan, "ChildConflict")
    assert c is not None and (c["status"], c["reason"]) == ("False", "NoConflict")
    assert [e[0] for e in plan.events if e[1] == "NoConflict"] == ["Normal"]


@pytest.mark.parametrize(("meta", "verdict"), [
    ({"ownerReferences": [{"uid": "u-1", "controller": True}]}, "own"),
    ({"ownerReferences": [{"uid": "u-1", "controller": True}], "labels": {"app": "x"}}, "own"),
    ({"labels": {"app.kubernetes.io/managed-by": "modalscale-operator", "app.kubernetes.io/instance": "vc"}},
     "adoptable"),
    ({"labels": {"app.kubernetes.io/managed-by": "modalscale-operator", "app.kubernetes.io/instance": "vc"},
      "ownerReferences": [{"uid": "u-9", "controller": False}]}, "adoptable"),
    ({"labels": {"app.kubernetes.io/managed-by": "modalscale-operator", "app.kubernetes.io/instance": "other"}},
     "foreign"),
    ({"labels": {"app.kubernetes.io/instance": "vc"}}, "foreign"),
    ({}, "foreign"),
    ({"ownerReferences": [{"uid": "u-1", "controller": False}]}, "foreign"),
    ({"labels": {"app.kubernetes.io/managed-by": "modalscale-operator", "app.kubernetes.io/instance": "vc"},
      "ownerReferences": [{"kind": "InferenceService", "name": "vc", "uid": "u-2", "controller": True}]}, "foreign"),
], ids=["controller", "controller-unlabelled", "orphan", "orphan-other-owner", "other-instance", "unmanaged",
        "nothing", "owner-not-controller", "another-uid"])
def test_child_ownership(meta: dict[str, Any], verdict: str) -> None:
    from modalscale.operator.isvc.plan import FOREIGN, child_ownership

    got, why = child_ownership("u-1", "vc", {"metadata": meta})
    assert got == verdict and (why is None) == (verdict != FOREIGN)


class _Core:
    """A CoreV1Api stand-in: the ConfigMap exists already (create answers 409) as ``existing``; patches recorded."""

    def __init__(self, existing: dict[str, Any]) -> None:
        self.existing, self.patches = existing, []  # type: list[Any]

    def create_namespaced_config_map(self, *_: object) -> None:
        raise client.exceptions.ApiException(status=409, reason="AlreadyExists")

    def read_namespaced_config_map(self, name: str, namespace: str, _preload_content: bool = True) -> Any:
        class _Response:
            data = json.dumps(self.existing).encode()
        return _Response()

    def patch_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any], _content_type: str) -> None:
        self.patches.append((name, body))


@pytest.mark.parametrize(("existing", "patched"), [
    ({"metadata": {"name": "vc-model-repo", "labels": {"app": "mine"}}, "data": {"keep": "me"}}, False),
    ({"metadata": {"name": "vc-model-repo", "ownerReferences": [{"uid": "u-2", "controller": True}]}}, False),
    ({"metadata": {"name": "vc-model-repo", "ownerReferences": [{"uid": "u-1", "controller": True}]}}, True),
    ({"metadata": {"name": "vc-model-repo", "labels": {"app.kubernetes.io/managed-by": "modalscale-operator",
                                                       "app.kubernetes.io/instance": "vc"}}}, True),
], ids=["users", "another-service", "this-service", "orphan"])
def test_a_create_answered_409_patches_only_an_object_of_this_service(existing: dict[str, Any], patched: bool) -> None:
    """Created meanwhile by the other operator replica (or missing from the watch cache: no managed-by label), the
    object is patched back; a foreign one is read, left as it is and raised as ``ForeignChild`` for the plan."""
    from modalscale.operator.apply import Writer
    from modalscale.operator.isvc.objects import build_configmap
    from modalscale.operator.isvc.plan import ForeignChild
    from modalscale.operator.metrics import OperatorMetrics
    from tests.unit.operator.test_isvc_cache import unreachable_api

    desired = build_configmap(parse_isvc(body(stages=None)), FILES)
    writer = Writer(unreachable_api(), OperatorMetrics())
    core = _Core(existing)
    writer.core = core  # type: ignore[assignment]
    if patched:
        writer.apply("ml", Write("ConfigMap", "create", "vc-model-repo", desired))
        assert core.patches == [("vc-model-repo", desired)]
        return
    with pytest.raises(ForeignChild) as err:
        writer.apply("ml", Write("ConfigMap", "create", "vc-model-repo", desired))
    assert core.patches == [] and (err.value.kind, err.value.name, err.value.observed) == (
        "ConfigMap", "vc-model-repo", existing)


def test_a_reconcile_that_meets_a_foreign_object_on_create_plans_again_and_writes_nothing_of_its_group() -> None:
    """With the watch caches a user's object (no managed-by label) is first met by a create (409): the pass plans
    again with it observed, holds its group (no RoleBinding to a user's ServiceAccount, no gateway pods running as
    it), applies the rest once, and reports the plan that says so."""
    import logging
    from types import SimpleNamespace

    from modalscale.operator.isvc.plan import ForeignChild, IsvcPlan
    from modalscale.operator.isvc.reconcile import _apply_owned

    mine = users("ServiceAccount", "vc-gateway")
    applied_writes: list[tuple[str, str, str]] = []

    def apply(namespace: str, w: Write) -> None:
        if (w.kind, w.name) == ("ServiceAccount", "vc-gateway"):
            raise ForeignChild(w.kind, w.name, mine, "it has no controller owner reference")
        applied_writes.append((w.kind, w.action, w.name))

    counter = SimpleNamespace(inc=lambda: None)
    deps = SimpleNamespace(writer=SimpleNamespace(apply=apply),
                           metrics=SimpleNamespace(decisions=SimpleNamespace(labels=lambda **_: counter)))
    b = body(stages=None, scaling={"mode": "Fixed", "replicas": 0, "minReplicas": 0, "maxReplicas": 4})
    spec = parse_isvc(b)

    def make_plan(observed: IsvcObserved) -> IsvcPlan:
        return plan_isvc(spec, observed, FILES, CONFIG, NOW)

    first = make_plan(IsvcObserved())
    assert ("ServiceAccount", "vc-gateway") in [(w.kind, w.name) for w in first.writes]
    plan = _apply_owned(deps, b, spec, IsvcObserved(), first, make_plan, NOW,  # type: ignore[arg-type]
                        logging.getLogger("test"))
    assert [n for _, _, n in applied_writes if n in ("vc-gateway", "vc-replicas")] == []
    assert len(applied_writes) == len(set(applied_writes))  # nothing applied twice
    assert {n for _, _, n in applied_writes} == {"vc", "vc-model-repo"}
    c = condition(plan, "ChildConflict")
    assert c is not None and c["status"] == "True" and "ServiceAccount vc-gateway" in c["message"]
    assert "the gateway's objects are held" in c["message"]
