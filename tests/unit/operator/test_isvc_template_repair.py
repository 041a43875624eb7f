"""A spec change that drops a field of the pod template reaches the Deployment: the operator's strategic merge patch
nulls what it no longer wants, instead of leaving it beside the new value.

The operator patches its Deployments with a strategic merge patch, which keeps every map key the patch does not name
and merges list items by their merge key (containers and volumes by ``name``, volume mounts by ``mountPath``).
:func:`is_derivative` also ignores keys the desired object lacks. So a field the spec no longer asks for stays:

- ``resources.gpu.count`` 1 -> 0 kept ``nvidia.com/gpu: 1`` in the requests and limits and the node selector
  ``nvidia.com/gpu.product``: the "CPU" replicas kept taking a GPU each on GPU nodes (priced as CPU replicas);
  0 -> 1 kept the CPU limit a GPU replica must not have;
- ``model.source`` BuiltIn -> PVC (or any other switch) merged the new volume source into the old one
  (``configMap`` and ``persistentVolumeClaim`` in one volume) and the new probe handler into the old one (``exec``
  and ``httpGet``): the API server refuses both (``may not specify more than 1 volume type``, ``may not specify more
  than 1 handler type``), so the service was refused until deleted.

:func:`strategic_merge` is the API server's merge for the Deployment's fields these tests touch.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from modalscale.api.inferenceservice import parse_isvc
from modalscale.operator.isvc.objects import GPU_PRODUCT_LABEL, GPU_RESOURCE
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, plan_isvc
from modalscale.operator.isvc.reconcile import repository_files
from tests.factories import inference_service

NOW = dt.datetime(2026, 12, 8, 12, 0, tzinfo=dt.UTC)
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "env": "name",
              "volumeMounts": "mountPath", "ports": "containerPort", "imagePullSecrets": "name"}
"""Patch merge keys of the pod spec's lists (k8s.io/api/core/v1 ``patchMergeKey``); other lists are atomic."""
GPU = {"cpu": "2", "memory": "8Gi", "gpu": {"count": 1, "type": "nvidia-l4"}}
CPU = {"cpu": "2", "memory": "8Gi"}


def strategic_merge(obj: Any, patch: Any, key: str = "", keys: dict[str, str] | None = None) -> Any:
    """``obj`` after the strategic merge ``patch``: maps merge key by key (``null`` deletes, ``$patch: replace``
    replaces), lists of ``keys`` (a Deployment's: :data:`MERGE_KEYS`) merge item by item on their key (an item with
    ``$patch: delete`` is deleted), other values replace."""
    keys = MERGE_KEYS if keys is None else keys
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
        out = copy.deepcopy(obj) if isinstance(obj, dict) else {}
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = strategic_merge(out.get(k), v, k, keys)
        return out
    if isinstance(patch, list) and key in keys and isinstance(obj, list):
        merge_key = keys[key]
        out = copy.deepcopy(obj)
        for item in patch:
            at = next((i for i, o in enumerate(out) if o.get(merge_key) == item.get(merge_key)), None)
            if item.get("$patch") == "delete":  # the item is deleted (absent: nothing happens)
                if at is not None:
                    del out[at]
            elif at is None:
                out.append(copy.deepcopy(item))
            else:
                out[at] = strategic_merge(out[at], item, keys=keys)
        return out
    return copy.deepcopy(patch)


def body(**spec: Any) -> dict[str, Any]:
    return inference_service("vc", "ml", uid="u-1", generation=1, gateway={"enabled": False},
                             **{"scaling": {"mode": "Fixed", "replicas": 2, "minReplicas": 1, "maxReplicas": 4},
                                **spec})


def plan(b: dict[str, Any], obs: IsvcObserved) -> Any:
    spec = parse_isvc(b)
    return plan_isvc(spec, obs, repository_files(spec), PlanConfig(), NOW)


def settled(b: dict[str, Any]) -> IsvcObserved:
    """Every child of ``b`` as stored after its first pass (a PVC source's claim exists)."""
    first = plan(b, IsvcObserved(pvc_exists=True))
    obs = IsvcObserved(status=first.status, pvc_exists=True)
    for w in first.writes:
        assert w.action == "create"
        stored = copy.deepcopy(w.body)
        stored["metadata"].update(generation=1, resourceVersion="1")
        setattr(obs, w.kind.lower(), stored)
    assert plan(b, obs).writes == []
    return obs


def changed(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], IsvcObserved]:
    """The Deployment once the pass for ``after`` is applied to the children of ``before``, and the world then."""
    obs = settled(before)
    p = plan(after, obs)
    (w,) = [w for w in p.writes if w.kind == "Deployment"]
    assert w.action == "patch"
    for other in p.writes:  # the Deployment's patch, and any other child's create, patch or delete
        slot = other.kind.lower()
        setattr(obs, slot, None if other.action == "delete" else copy.deepcopy(other.body)
                if other.action == "create" else strategic_merge(getattr(obs, slot), other.body))
    return obs.deployment, obs


def wanted(b: dict[str, Any]) -> dict[str, Any]:
    """The Deployment a first pass of ``b`` creates."""
    return next(w.body for w in plan(b, IsvcObserved(pvc_exists=True)).writes if w.kind == "Deployment")


def pod(dep: dict[str, Any]) -> dict[str, Any]:
    return dep["spec"]["template"]["spec"]


@pytest.mark.parametrize(("before", "after"), [(GPU, CPU), (CPU, GPU)], ids=["gpu-to-cpu", "cpu-to-gpu"])
def test_a_gpu_count_change_leaves_no_gpu_request_selector_or_cpu_limit_of_the_old_layout(
        before: dict[str, Any], after: dict[str, Any]) -> None:
    dep, obs = changed(body(resources=before), body(resources=after))
    want = pod(wanted(body(resources=after)))
    have = pod(dep)
    assert have["containers"][0]["resources"] == want["containers"][0]["resources"]
    assert (have.get("nodeSelector") or {}) == (want.get("nodeSelector") or {})
    if after is CPU:
        assert GPU_RESOURCE not in have["containers"][0]["resources"]["requests"]
        assert GPU_PRODUCT_LABEL not in (have.get("nodeSelector") or {})
    else:
        assert "cpu" not in have["containers"][0]["resources"]["limits"]  # a GPU replica has no CPU limit
    assert plan(body(resources=after), obs).writes == []  # and the next pass writes nothing


HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
SOURCES = {
    "builtin": {"source": "BuiltIn"},
    "pvc": {"source": "PVC", "pvc": {"claimName": "models", "subPath": "repo"}},
    "image": {"source": "Image", "image": {"reference": "registry.example.com/models/cap:v3"}},
    "uri": {"source": "URI", "uri": "s3://bucket/models"},
}


@pytest.mark.parametrize(("before", "after"), [
    ("builtin", "pvc"), ("pvc", "builtin"), ("builtin", "image"), ("pvc", "image"), ("builtin", "uri"), ("pvc", "uri"),
    ("image", "uri"), ("uri", "builtin")])
def test_a_model_source_change_gives_a_pod_template_the_api_server_accepts_and_nothing_of_the_old_source(
        before: str, after: str) -> None:
    dep, obs = changed(body(model=SOURCES[before]), body(model=SOURCES[after]))
    want, have = pod(wanted(body(model=SOURCES[after]))), pod(dep)
    for volume in have["volumes"]:  # ValidateVolumes: "may not specify more than 1 volume type"
        assert len(set(volume) - {"name"}) == 1, volume
    (container,) = have["containers"]
    (desired,) = want["containers"]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):  # "may not specify more than 1 handler type"
        assert [h for h in HANDLERS if h in container[probe]] == [h for h in HANDLERS if h in desired[probe]]
    assert ("lifecycle" in container) == ("lifecycle" in desired)  # the BuiltIn runtime's preStop hook only
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for m in desired["volumeMounts"]:
        assert mounts[m["mountPath"]] == m  # no subPath of a PVC source left on another source's mount
    # A URI source reads the repository itself: no volume of the old source stays mounted at /models (a ConfigMap
    # deleted later would hold every new pod in ContainerCreating, FailedMount)
    assert sorted(v["name"] for v in have["volumes"]) == sorted(v["name"] for v in want["volumes"])
    assert sorted(mounts) == sorted(m["mountPath"] for m in desired["volumeMounts"])
    assert plan(body(model=SOURCES[after]), obs).writes == []


USER_MODEL = {"source": "ConfigMap", "configMap": {"name": "cap"}}


@pytest.mark.parametrize("after", ["pvc", "image", "uri", "configmap"])
def test_leaving_the_builtin_model_deletes_the_generated_repository_after_the_deployment_lets_go_of_it(
        after: str) -> None:
    """Found by the isvc review (7 Dec 2026): the ConfigMap ``<name>-model-repo`` the operator made for the BuiltIn
    model stayed once ``spec.model.source`` left BuiltIn (only the InferenceService's deletion collected it, by its
    owner reference), holding the old repository for nothing. It is the operator's child it no longer wants: the pass
    deletes it, after the Deployment's patch that takes its volume off the pods (a refused patch leaves it).

    And not in the pass of that patch (found by the isvc review, 7 Dec 2026: it was): the old ReplicaSet's pods still
    mount it until the rollout completes, and one it recreates meanwhile waits in ContainerCreating. It goes in the
    first pass that sees the rollout complete by ``kubectl rollout status``'s rule."""
    source = {**SOURCES, "configmap": USER_MODEL}[after]
    obs = settled(body(model={"source": "BuiltIn"}))
    obs.user_configmap_keys = ["cap__config.pbtxt"] if after == "configmap" else None
    p = plan(body(model=source), obs)
    assert [(w.kind, w.action) for w in p.writes] == [("Deployment", "patch")]  # its pods still mount it
    obs.deployment = strategic_merge(obs.deployment, p.writes[0].body)
    obs.deployment["metadata"]["generation"] = 2
    assert "vc-model-repo" not in [v["configMap"]["name"] for v in pod(obs.deployment)["volumes"] if "configMap" in v]
    for rolling in ({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2},
                    {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1, "availableReplicas": 2},
                    {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2, "availableReplicas": 3},
                    {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}):
        obs.deployment["status"] = rolling  # the old ReplicaSet's pods still mount it (and may be recreated)
        assert [w for w in plan(body(model=source), obs).writes if w.action == "delete"] == [], rolling
    obs.deployment["status"] = {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}
    p = plan(body(model=source), obs)
    assert [(w.kind, w.action, w.name) for w in p.writes] == [("ConfigMap", "delete", "vc-model-repo")]
    obs.configmap = None
    assert plan(body(model=source), obs).writes == []  # and the next pass writes nothing


@pytest.mark.parametrize("stored", ["no-owner", "another-owner", "unmanaged"])
def test_a_model_repo_configmap_that_is_not_this_services_child_is_never_deleted(stored: str) -> None:
    """Only the operator's own child goes: a ConfigMap of the same name without this service's controller reference
    or the operator's managed-by label (a user's, read with no watch cache) stays: ``ChildNotDeleted`` for an orphan
    with the operator's labels or one without the managed-by label, ``ChildConflict`` (Event ``ForeignObject``) for
    another InferenceService's, no child of this one at all."""
    cm = copy.deepcopy(settled(body(model={"source": "BuiltIn"})).configmap)
    assert cm is not None
    meta = cm["metadata"]
    if stored == "no-owner":
        meta.pop("ownerReferences")
    elif stored == "another-owner":
        meta["ownerReferences"] = [{**meta["ownerReferences"][0], "uid": "u-2"}]
    else:
        meta["labels"].pop("app.kubernetes.io/managed-by")
    obs = settled(body(model={"source": "BuiltIn"}))
    obs.configmap = cm
    obs.deployment = None  # nothing mounts it: only the guard keeps it
    uri = body(model=SOURCES["uri"])
    uri["metadata"]["generation"] = 2
    p = plan(uri, obs)
    assert [w for w in p.writes if w.kind == "ConfigMap"] == []
    (event,) = [e for e in p.events if e[1] in ("ChildNotDeleted", "ForeignObject")]
    reason = "ForeignObject" if stored == "another-owner" else "ChildNotDeleted"
    assert event[:2] == ("Warning", reason) and "ConfigMap vc-model-repo" in event[2]


def test_a_service_that_names_its_generated_repository_as_its_model_configmap_keeps_it() -> None:
    """``spec.model.configMap.name: <name>-model-repo``: the ConfigMap is the service's model now, not a left-over."""
    obs = settled(body(model={"source": "BuiltIn"}))
    obs.user_configmap_keys = sorted(obs.configmap["data"]) if obs.configmap else None
    own = {"source": "ConfigMap", "configMap": {"name": "vc-model-repo"}}
    assert [w for w in plan(body(model=own), obs).writes if w.kind == "ConfigMap"] == []


def test_a_node_selector_label_taken_out_of_the_placement_leaves_the_replicas_and_the_gateway() -> None:
    """Found by the isvc review (7 Dec 2026): only the GPU product and Spot labels were nulled, so a label taken out of
    ``spec.placement.nodeSelector`` stayed on the pods' selector (a strategic merge keeps map keys a patch does not
    name): the replicas and the gateway stayed pinned to the old node pool."""
    def gated(selector: dict[str, str]) -> dict[str, Any]:
        return inference_service("vc", "ml", uid="u-1", generation=1, placement={"nodeSelector": selector},
                                 scaling={"mode": "Fixed", "replicas": 2, "minReplicas": 1, "maxReplicas": 4})

    before, after = gated({"pool": "a", "zone": "z1"}), gated({"zone": "z1"})
    obs = settled_all(before)
    p = plan(after, obs)
    obs = applied_all(obs, p)
    assert pod(obs.deployment)["nodeSelector"] == {**pod(wanted(after))["nodeSelector"]}
    assert "pool" not in pod(obs.gateway_objects["Deployment"]).get("nodeSelector", {})
    assert pod(obs.gateway_objects["Deployment"])["nodeSelector"] == {"zone": "z1"}
    assert plan(after, obs).writes == []


def applied_all(obs: IsvcObserved, p: Any) -> IsvcObserved:
    """``obs`` after every write of ``p`` (the gateway's objects too)."""
    obs = copy.deepcopy(obs)
    for w in p.writes:
        gateway = w.name.endswith("-gateway") or (w.name.endswith("-replicas") and w.kind != "Deployment")
        have = obs.gateway_objects.get(w.kind) if gateway else getattr(obs, w.kind.lower())
        new = copy.deepcopy(w.body) if w.action == "create" else strategic_merge(have, w.body) \
            if w.kind == "Deployment" else merge_replacing_lists(have, w.body)
        if w.action == "create":
            new["metadata"].update(generation=1, resourceVersion="1")
            if w.kind == "Deployment":
                n = new["spec"]["replicas"]
                new["status"] = {"observedGeneration": 1, "replicas": n, "readyReplicas": n, "updatedReplicas": n}
        if gateway:
            obs.gateway_objects[w.kind] = new
        else:
            setattr(obs, w.kind.lower(), new)
    return obs


def merge_replacing_lists(obj: Any, patch: Any) -> Any:
    """A merge patch of another kind's object: maps key by key (``null`` deletes, ``$patch: replace`` replaces),
    lists replaced whole (these tests' Service ports and selectors change as a whole)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = copy.deepcopy(obj) if isinstance(obj, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_replacing_lists(out.get(k), v)
    return out


def settled_all(b: dict[str, Any]) -> IsvcObserved:
    obs = IsvcObserved(pvc_exists=True)
    for _ in range(3):
        obs = applied_all(obs, plan(b, obs))
    assert plan(b, obs).writes == []
    return obs
