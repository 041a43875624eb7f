"""The InferenceService planner with the request gateway (issue 19): enabled, the gateway's objects with owner
references, the Service switched only once a gateway pod is ready, a rerun that writes nothing; disabled, exactly
the plan of the code before the gateway (a golden file written by that code), and left-overs deleted.

Regenerate the golden only from the planner before the gateway (commit 584e64b):
``PYTHONPATH=<checkout at 584e64b>/src python tests/unit/operator/test_isvc_gateway_plan.py --write-golden``.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import write_isvc_status
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, plan_isvc
from tests.factories import inference_service

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
FILES = {"multimodal/config.pbtxt": 'name: "multimodal"\n', "multimodal/1/model.py": "# model\n"}
GOLDEN = Path(__file__).parent / "data" / "isvc_plan_before_gateway.json"
IMAGE = "registry.example.com/modalscale/operator:9.9.9"


def make_isvc(**spec: Any) -> dict[str, Any]:
    return inference_service("vc", "ml", uid="u-1", generation=1, **{
        "resources": {"cpu": "2", "memory": "8Gi"},
        "scaling": {"mode": "Predictive", "minReplicas": 2, "maxReplicas": 6}, **spec})


def stored(created: dict[str, Any], ready: bool = True) -> dict[str, Any]:
    """A created object as the apiserver returns it (defaults, status)."""
    obj = copy.deepcopy(created)
    obj["metadata"].update(generation=1, resourceVersion="1")
    if obj["kind"] == "Deployment":
        r = obj["spec"]["replicas"] if ready else 0
        obj["spec"]["progressDeadlineSeconds"] = 600
        obj["status"] = {"observedGeneration": 1, "replicas": obj["spec"]["replicas"], "readyReplicas": r,
                         "updatedReplicas": obj["spec"]["replicas"], "availableReplicas": r}
    if obj["kind"] == "Service":
        obj["spec"].update(clusterIP="10.0.0.12", sessionAffinity="None")
    return obj


def apply(obs: IsvcObserved, plan: Any, gateway_ready: bool = True) -> IsvcObserved:
    """``obs`` after the plan's writes (creates, merge of patches as far as these tests need, deletes)."""
    obs = copy.deepcopy(obs)
    obs.status = plan.status
    for w in plan.writes:
        gw = w.name.endswith("-gateway") or w.name.endswith("-replicas")
        if w.action == "delete":
            obs.gateway_objects[w.kind] = None
            continue
        if w.action == "create":
            obj = stored(w.body, ready=gateway_ready or w.name != "vc-gateway")
        else:
            obj = copy.deepcopy(obs.gateway_objects[w.kind] if gw else getattr(obs, w.kind.lower()))
            for key, value in w.body.items():
                if key == "spec" and "selector" in value and "$patch" in value["selector"]:
                    value = {**value, "selector": {k: v for k, v in value["selector"].items() if k != "$patch"}}
                obj[key] = {**obj.get(key, {}), **value} if isinstance(value, dict) else value
        if gw:
            obs.gateway_objects[w.kind] = obj
        else:
            setattr(obs, w.kind.lower(), obj)
    return obs


def run(body: dict[str, Any], obs: IsvcObserved | None = None, gateway_ready: bool = True) -> tuple[Any, IsvcObserved]:
    obs = obs or IsvcObserved()
    plan = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(gateway_image=IMAGE), NOW)
    return plan, apply(obs, plan, gateway_ready)


# ---------------------------------------------------------------------------------------------- disabled
OFF = {"enabled": False}


def direct(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with ``gateway: {enabled: false}`` (the gateway is on by default); unchanged for the planner before
    the gateway, which writes the golden and knows no ``spec.gateway``."""
    try:
        from modalscale.api.inferenceservice import GATEWAY_ENABLED_DEFAULT  # noqa: F401
    except ImportError:
        return spec
    return {**spec, "gateway": OFF}


def before_gateway_config() -> PlanConfig:
    """``PlanConfig()`` as the planner before the gateway had it: the replicas' and gateway pods' node-loss
    tolerations (issue 21, scenario 2: test_isvc_node_loss_tolerations.py) came after and are left out, as the
    replicas' PodDisruptionBudget is below."""
    later = {"node_loss_toleration_s": None}
    return PlanConfig(**{k: v for k, v in later.items() if k in {f.name for f in dataclasses.fields(PlanConfig)}})


def without_later_changes(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the goldens' code wrote it, for what changed later on purpose: without the pod template's
    repository hash (``MODEL_REPOSITORY_HASH_ANNOTATION``), which came after the gateway (test_isvc_repository_roll.py)
    as the PodDisruptionBudget below did, and with the Triton container's startup probe as it was (every 5 s, 60
    failures) where it is the later one (``STARTUP_PROBE``, every second: 5 Dec 2026)."""
    try:
        from modalscale.operator.isvc.objects import MODEL_REPOSITORY_HASH_ANNOTATION
    except ImportError:
        return body
    try:
        from modalscale.operator.isvc.objects import STARTUP_PROBE
    except ImportError:
        STARTUP_PROBE = None  # the code the goldens came from has none
    body = copy.deepcopy(body)
    template = (body.get("spec") or {}).get("template") or {}
    meta = template.get("metadata") or {}
    if MODEL_REPOSITORY_HASH_ANNOTATION in (meta.get("annotations") or {}):
        del meta["annotations"][MODEL_REPOSITORY_HASH_ANNOTATION]
        if not meta["annotations"]:
            del meta["annotations"]
    for container in (template.get("spec") or {}).get("containers") or []:
        if STARTUP_PROBE is not None and container.get("startupProbe") == STARTUP_PROBE:
            container["startupProbe"] = {"httpGet": {"path": "/v2/health/live", "port": "http"},
                                         "periodSeconds": 5, "failureThreshold": 60}
    return body


without_repository_hash = without_later_changes
"""The name ``test_isvc_stages_off.py`` imports (it must also run at the commit its golden came from)."""


def scenarios() -> dict[str, Any]:
    """Plans of the disabled gateway (``gateway: {enabled: false}``) in several worlds, as JSON-able values."""
    out: dict[str, Any] = {}
    for name, spec in {"predictive": {}, "fixed-gpu": {
            "scaling": {"mode": "Fixed", "replicas": 3, "minReplicas": 0, "maxReplicas": 6},
            "resources": {"cpu": "2", "memory": "8Gi", "gpu": {"count": 1, "type": "nvidia-l4"}}},
            "configmap": {"model": {"source": "ConfigMap", "configMap": {"name": "mine"}}}}.items():
        body = make_isvc(**direct(spec))
        obs0 = IsvcObserved(user_configmap_keys=["m__config.pbtxt"])
        first = plan_isvc(parse_isvc(body), obs0, FILES, before_gateway_config(), NOW)
        obs1 = IsvcObserved(status=first.status, user_configmap_keys=["m__config.pbtxt"],
                            **{w.kind.lower(): stored(w.body) for w in first.writes})
        second = plan_isvc(parse_isvc(body), obs1, FILES, before_gateway_config(), NOW)
        drifted = copy.deepcopy(obs1)
        assert drifted.deployment is not None and drifted.service is not None
        drifted.deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "other:1"
        drifted.service["spec"]["ports"] = drifted.service["spec"]["ports"][:1]
        third = plan_isvc(parse_isvc(body), drifted, FILES, before_gateway_config(), NOW)
        # The replicas' PodDisruptionBudget ``<name>`` came after the gateway (issue 21, scenario 1) and is planned
        # whether the gateway is on or off (test_isvc_plan); the golden is what the planner before the gateway
        # wrote, so it is left out here and every other write is compared.
        out[name] = [{"writes": [[w.kind, w.action, w.name, without_later_changes(w.body)] for w in p.writes
                                 if (w.kind, w.name) != ("PodDisruptionBudget", "vc")],
                      "status": write_isvc_status(p.status),
                      "events": p.events} for p in (first, second, third)]
    return json.loads(json.dumps(out, sort_keys=True))


def test_disabled_plans_exactly_what_the_planner_before_the_gateway_planned() -> None:
    # With the one change made since on purpose: no Service links in any pod (tests/unit/test_service_links.py).
    from tests.unit.operator.test_isvc_stages_off import without_service_links

    assert scenarios() == without_service_links(json.loads(GOLDEN.read_text()))


def test_disabled_explicitly_plans_only_the_direct_children() -> None:
    plan, obs = run(make_isvc(gateway=OFF))
    assert sorted(w.kind for w in plan.writes) == ["ConfigMap", "Deployment", "PodDisruptionBudget", "Service"]
    assert plan.status.gateway is None
    assert all(c["type"] != "GatewayReady" for c in write_isvc_status(plan.status)["conditions"])


@pytest.mark.parametrize("gateway", [None, {}, {"replicas": 3}], ids=["unset", "empty", "enabled-unset"])
def test_enabled_is_the_default_a_spec_without_enabled_gets_the_gateway(gateway: dict[str, Any] | None) -> None:
    plan, _ = run(make_isvc() if gateway is None else make_isvc(gateway=gateway), gateway_ready=False)
    made = {(w.kind, w.name) for w in plan.writes}
    assert {("Deployment", "vc-gateway"), ("Service", "vc-replicas"), ("Service", "vc")} <= made
    dep = next(w.body for w in plan.writes if w.name == "vc-gateway" and w.kind == "Deployment")
    assert dep["spec"]["replicas"] == (gateway or {}).get("replicas", 2)
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}  # the small default
    assert {c["type"] for c in write_isvc_status(plan.status)["conditions"]} >= {"GatewayReady"}


# ---------------------------------------------------------------------------------------------- enabled
def test_enabled_creates_the_gateway_objects_with_owner_references_and_keeps_the_service_direct_until_ready() -> None:
    plan, obs = run(make_isvc(gateway={"enabled": True}), gateway_ready=False)
    made = [(w.kind, w.action, w.name) for w in plan.writes]
    assert made == [("ConfigMap", "create", "vc-model-repo"), ("Deployment", "create", "vc"),
                    ("PodDisruptionBudget", "create", "vc"), ("Service", "create", "vc"),
                    ("ServiceAccount", "create", "vc-gateway"),
                    ("Role", "create", "vc-gateway"), ("RoleBinding", "create", "vc-gateway"),
                    ("Service", "create", "vc-replicas"), ("PodDisruptionBudget", "create", "vc-gateway"),
                    ("Deployment", "create", "vc-gateway")]  # no NetworkPolicy before a gateway pod is ready
    for w in plan.writes:
        assert w.body["metadata"]["ownerReferences"][0]["uid"] == "u-1"
        assert w.body["metadata"]["namespace"] == "ml"
    svc = next(w.body for w in plan.writes if w.name == "vc" and w.kind == "Service")
    assert svc["spec"]["selector"] == {"modalscale.io/inferenceservice": "vc"}  # direct while no gateway is ready
    ready = {c["type"]: c for c in write_isvc_status(plan.status)["conditions"]}["GatewayReady"]
    assert (ready["status"], ready["reason"]) == ("False", "Creating")

    # Still no gateway pod ready: nothing to write, the Service stays direct.
    plan, obs = run(make_isvc(gateway={"enabled": True}), obs, gateway_ready=False)
    assert plan.writes == []
    ready = {c["type"]: c for c in write_isvc_status(plan.status)["conditions"]}["GatewayReady"]
    assert (ready["status"], ready["reason"]) == ("False", "GatewayUnavailable")


def test_once_a_gateway_pod_is_ready_the_service_selects_the_gateway_and_the_network_policy_is_written() -> None:
    body = make_isvc(gateway={"enabled": True})
    plan, obs = run(body)
    plan, obs = run(body, obs)
    assert [(w.kind, w.action, w.name) for w in plan.writes] == [
        ("Service", "patch", "vc"), ("NetworkPolicy", "create", "vc-replicas")]
    patch = plan.writes[0].body["spec"]
    # A strategic merge keeps map keys: the selector is replaced, never merged into one that selects nothing.
    assert patch["selector"] == {"$patch": "replace", "modalscale.io/gateway": "vc"}
    np = plan.writes[1].body["spec"]
    assert np["podSelector"] == {"matchLabels": {"modalscale.io/inferenceservice": "vc"}}
    assert [r["from"][0]["podSelector"]["matchLabels"] for r in np["ingress"]] == [
        {"modalscale.io/gateway": "vc"}, {"app.kubernetes.io/name": "prometheus"}]
    assert [[p["port"] for p in r["ports"]] for r in np["ingress"]] == [[8000, 8001], [8002]]
    assert write_isvc_status(plan.status)["gateway"] == {"replicas": 2, "readyReplicas": 2,
                                      "replicasUrl": "http://vc-replicas.ml.svc.cluster.local:8000"}
    assert write_isvc_status(plan.status)["url"] == "http://vc.ml.svc.cluster.local:8000"
    ready = {c["type"]: c for c in write_isvc_status(plan.status)["conditions"]}["GatewayReady"]
    assert (ready["status"], ready["reason"]) == ("True", "MinimumReplicasAvailable")

    plan, obs = run(body, obs)
    assert plan.writes == []  # a rerun with nothing changed writes nothing
    assert obs.service is not None and obs.service["spec"]["selector"] == {"modalscale.io/gateway": "vc"}


def test_when_no_gateway_pod_is_ready_the_service_goes_direct_and_the_network_policy_goes_with_it() -> None:
    """The NetworkPolicy admits only the gateway (and the scraper) to the replicas: kept while the Service ``<name>``
    falls back to the replicas (no gateway pod Ready), every client of that Service would be refused wherever the
    network plugin enforces it. It exists exactly while the Service selects the gateway."""
    body = make_isvc(gateway={"enabled": True})
    _, obs = run(body)
    _, obs = run(body, obs)
    assert obs.gateway_objects["NetworkPolicy"] is not None
    gw = obs.gateway_objects["Deployment"]
    assert gw is not None
    gw["status"].update(readyReplicas=0, availableReplicas=0)  # both gateway pods lost
    plan, obs = run(body, obs)
    assert [(w.kind, w.action, w.name) for w in plan.writes] == [
        ("Service", "patch", "vc"), ("NetworkPolicy", "delete", "vc-replicas")]
    assert plan.writes[0].body["spec"]["selector"] == {"$patch": "replace", "modalscale.io/inferenceservice": "vc"}
    plan, obs = run(body, obs)
    assert plan.writes == []  # a rerun writes nothing
    gw = obs.gateway_objects["Deployment"]
    assert gw is not None
    gw["status"].update(readyReplicas=2, availableReplicas=2)  # back
    plan, _ = run(body, obs)
    assert [(w.kind, w.action, w.name) for w in plan.writes] == [
        ("Service", "patch", "vc"), ("NetworkPolicy", "create", "vc-replicas")]


def test_the_gateway_deployment_runs_the_operator_image_with_its_config_probes_and_own_service_account() -> None:
    plan, _ = run(make_isvc(gateway={"enabled": True, "replicas": 3, "maxInFlight": 64, "queue": {"size": 5},
                                     "tenantHeader": "x-team"},
                            model={"source": "BuiltIn", "inputs": {"images": "PIXELS"}}), gateway_ready=False)
    dep = next(w.body for w in plan.writes if w.name == "vc-gateway" and w.kind == "Deployment")
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["selector"] == {"matchLabels": {"modalscale.io/gateway": "vc"}}
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert "modalscale.io/inferenceservice" not in labels  # never one of the replicas' pods (their selector)
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "vc-gateway"
    (c,) = pod["containers"]
    assert (c["image"], c["command"]) == (IMAGE, ["modalscale", "gateway"])
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env == {
        "MODALSCALE_GATEWAY_NAMESPACE": "ml", "MODALSCALE_GATEWAY_SERVICE": "vc",
        "MODALSCALE_GATEWAY_REPLICAS_SERVICE": "vc-replicas", "MODALSCALE_GATEWAY_HTTP_PORT": "8000",
        "MODALSCALE_GATEWAY_GRPC_PORT": "8001", "MODALSCALE_GATEWAY_METRICS_PORT": "9090",
        "MODALSCALE_GATEWAY_MAX_INFLIGHT": "64", "MODALSCALE_GATEWAY_QUEUE_SIZE": "5",
        "MODALSCALE_GATEWAY_QUEUE_TIMEOUT_S": "120", "MODALSCALE_GATEWAY_MAX_BODY_BYTES": "67108864",
        "MODALSCALE_GATEWAY_SHUTDOWN_DELAY_S": "5", "MODALSCALE_GATEWAY_DRAIN_TIMEOUT_S": "125",
        "MODALSCALE_GATEWAY_TENANT_HEADER": "x-team", "MODALSCALE_GATEWAY_IMAGES_INPUT": "PIXELS",
        "MODALSCALE_GATEWAY_TEXT_INPUT": "TEXT"}
    # The probes hit what `modalscale gateway` serves: /readyz and /healthz on its metrics port.
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # The gateway itself accepts every variable the operator writes, and listens where the ports say.
    from modalscale.gateway.settings import GatewaySettings

    settings = GatewaySettings.from_env({e["name"]: e["value"] for e in c["env"]})
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert (settings.http_port, settings.grpc_port, settings.metrics_port) == (
        ports["http"], ports["grpc"], ports["metrics"])
    assert c["securityContext"]["runAsUser"] >= 10000
    role = next(w.body for w in plan.writes if w.kind == "Role")
    assert role["rules"] == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["modalscale.io"], "resources": ["inferenceservices"], "resourceNames": ["vc"],
         "verbs": ["get", "list", "watch", "patch"]}]
    binding = next(w.body for w in plan.writes if w.kind == "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "vc-gateway", "namespace": "ml"}]
    pdb = next(w.body for w in plan.writes if w.kind == "PodDisruptionBudget" and w.name == "vc-gateway")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": {"modalscale.io/gateway": "vc"}}}


def test_drift_of_a_gateway_object_is_repaired_and_only_it_is_written() -> None:
    body = make_isvc(gateway={"enabled": True})
    _, obs = run(body)
    _, obs = run(body, obs)
    role = obs.gateway_objects["Role"]
    assert role is not None
    role["rules"] = role["rules"][:1]
    plan, _ = run(body, obs)
    assert [(w.kind, w.action) for w in plan.writes] == [("Role", "patch")]


def test_turning_the_gateway_off_switches_the_service_back_first_and_deletes_the_gateway_objects() -> None:
    on = make_isvc(gateway={"enabled": True})
    _, obs = run(on)
    _, obs = run(on, obs)
    plan, obs = run(make_isvc(gateway={"enabled": False}), obs)
    assert [(w.kind, w.action, w.name) for w in plan.writes] == [
        ("Service", "patch", "vc"),
        ("Deployment", "delete", "vc-gateway"), ("PodDisruptionBudget", "delete", "vc-gateway"),
        ("NetworkPolicy", "delete", "vc-replicas"), ("Service", "delete", "vc-replicas"),
        ("RoleBinding", "delete", "vc-gateway"), ("Role", "delete", "vc-gateway"),
        ("ServiceAccount", "delete", "vc-gateway")]
    assert plan.writes[0].body["spec"]["selector"] == {"$patch": "replace", "modalscale.io/inferenceservice": "vc"}
    assert write_isvc_status(plan.status)["gateway"] is None  # merge patch removes the block
    assert all(c["type"] != "GatewayReady" for c in write_isvc_status(plan.status)["conditions"])
    plan, _ = run(make_isvc(gateway={"enabled": False}), obs)
    assert plan.writes == []


GATEWAY_KINDS = ("ServiceAccount", "Role", "RoleBinding", "Service", "NetworkPolicy", "PodDisruptionBudget",
                 "Deployment")


def foreign(obj: dict[str, Any], stored_as: str) -> dict[str, Any]:
    """``obj`` as an object the operator did not make for this service: no controller owner reference, another
    owner's (another InferenceService's uid), or without the operator's managed-by label."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    if stored_as == "no-owner":
        meta.pop("ownerReferences", None)
    elif stored_as == "another-owner":
        meta["ownerReferences"] = [{**meta["ownerReferences"][0], "uid": "u-2", "name": "vc-gateway"}]
    else:
        meta["labels"].pop("app.kubernetes.io/managed-by")
    return obj


@pytest.mark.parametrize("stored_as", ["no-owner", "another-owner", "unmanaged"])
@pytest.mark.parametrize("kind", GATEWAY_KINDS)
def test_turning_the_gateway_off_deletes_only_the_gateway_objects_this_service_made(kind: str, stored_as: str) -> None:
    """Found by the isvc review (7 Dec 2026): with the gateway turned off every object of a gateway's name was deleted
    unread or unchecked, so a user's own ``vc-gateway`` ServiceAccount (read by name with no watch cache), or the
    Deployment of another InferenceService named ``vc-gateway`` (the cache holds every managed object), went with them.
    One that is not this service's child (its controller owner reference by uid and the managed-by label) stays,
    and a Warning Event names it, once for the spec change; a rerun writes nothing. Another InferenceService's is not
    this service's child at all: ``ChildConflict`` reports it, with an Event on its transition, as it would if the
    spec wanted the name (test_isvc_child_ownership.py)."""
    on = make_isvc(gateway={"enabled": True})
    _, obs = run(on)
    _, obs = run(on, obs)
    obj = obs.gateway_objects[kind]
    assert obj is not None
    obs.gateway_objects[kind] = foreign(obj, stored_as)
    off = make_isvc(gateway={"enabled": False})
    off["metadata"]["generation"] = 2
    plan, obs = run(off, obs)
    name = "vc-replicas" if kind in ("Service", "NetworkPolicy") else "vc-gateway"
    deleted = [(w.kind, w.name) for w in plan.writes if w.action == "delete"]
    assert (kind, name) not in deleted and len(deleted) == len(GATEWAY_KINDS) - 1
    reason = "ForeignObject" if stored_as == "another-owner" else "ChildNotDeleted"
    (event,) = [e for e in plan.events if e[1] in ("ChildNotDeleted", "ForeignObject")]
    assert event[:2] == ("Warning", reason) and f"{kind} {name}" in event[2]
    assert obs.gateway_objects[kind] is not None
    plan, _ = run(off, obs)
    assert plan.writes == [] and [e for e in plan.events if e[1] in ("ChildNotDeleted", "ForeignObject")] == []


@pytest.mark.parametrize("labels", [{"app": "prometheus-server"}, {"a": "1", "b": "2"}])
def test_the_network_policy_admits_the_configured_scraper(labels: dict[str, str]) -> None:
    body = make_isvc(gateway={"enabled": True})
    _, obs = run(body)
    plan = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(gateway_image=IMAGE, scraper_labels=labels), NOW)
    np = next(w.body for w in plan.writes if w.kind == "NetworkPolicy")
    assert np["spec"]["ingress"][1]["from"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": labels}}]


if __name__ == "__main__" and sys.argv[1:] == ["--write-golden"]:
    GOLDEN.write_text(json.dumps(scenarios(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")


def test_the_gateway_follows_the_users_placement_but_not_a_budgets_spot_switch_nor_the_gpu_selector() -> None:
    from modalscale.api.annotations import SpotSwitch
    from modalscale.api.capacity import SPOT_NODE_SELECTOR, SPOT_TOLERATION
    from modalscale.operator.isvc.plan import with_spot_placement

    taint = {"key": "modalscale.io/node-type", "operator": "Equal", "value": "real", "effect": "NoSchedule"}
    body = make_isvc(gateway={"enabled": True}, placement={"nodeSelector": {"pool": "a"}, "tolerations": [taint]},
                     resources={"cpu": "2", "memory": "8Gi", "gpu": {"count": 1, "type": "nvidia-l4"}})
    spec = with_spot_placement(parse_isvc(body), (SpotSwitch("ml/p", 50),))
    plan = plan_isvc(spec, IsvcObserved(), FILES, PlanConfig(gateway_image=IMAGE), NOW)
    replicas = next(w.body for w in plan.writes if w.name == "vc" and w.kind == "Deployment")["spec"]["template"]
    gateway = next(w.body for w in plan.writes if w.name == "vc-gateway" and w.kind == "Deployment")
    pod = gateway["spec"]["template"]["spec"]
    assert SPOT_TOLERATION in replicas["spec"]["tolerations"]  # the replicas did move to Spot
    assert set(SPOT_NODE_SELECTOR) <= set(replicas["spec"]["nodeSelector"])
    node_loss = [{"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute",
                  "tolerationSeconds": 30} for t in ("unreachable", "not-ready")]  # test_isvc_node_loss_tolerations
    assert (pod["nodeSelector"], pod["tolerations"]) == ({"pool": "a"}, [taint, *node_loss])


def test_the_gateway_pods_pull_their_image_with_the_operators_pull_secrets() -> None:
    """Found by the chart review (7 Dec 2026): the chart's ``imagePullSecrets`` reached the operator's pods only, and
    the gateway pods, which run the same image from the same (private) registry, sat in ImagePullBackOff. The
    operator's ``MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS`` (the chart passes the names) now goes on their pod spec;
    without it the pods name none, as before."""
    body = make_isvc(gateway={"enabled": True})
    plan = plan_isvc(parse_isvc(body), IsvcObserved(), FILES,
                     PlanConfig(gateway_image=IMAGE, gateway_image_pull_secrets=("regcred", "mirror.creds")), NOW)
    dep = next(w.body for w in plan.writes if w.name == "vc-gateway" and w.kind == "Deployment")
    assert dep["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror.creds"}]
    plain, _ = run(body)
    dep = next(w.body for w in plain.writes if w.name == "vc-gateway" and w.kind == "Deployment")
    assert "imagePullSecrets" not in dep["spec"]["template"]["spec"]


@pytest.mark.parametrize("queue_timeout_s", [1, 30, 120, 300, 3600])
def test_the_gateway_drains_in_flight_requests_for_its_whole_grace_period(queue_timeout_s: int) -> None:
    """The gateway pods' grace period says in-flight requests finish within the queue timeout, but the gateway's own
    drain (``MODALSCALE_GATEWAY_DRAIN_TIMEOUT_S``) was left at its 30 s default: at every rollout or scale-down of
    the gateway a request still being answered after the 5 s shutdown delay + 30 s was cut with a 135 s grace
    period unused. The drain now takes the grace period less the shutdown delay and 5 s for the teardown."""
    from modalscale.gateway.settings import GatewaySettings

    plan, _ = run(make_isvc(gateway={"enabled": True, "queue": {"timeoutSeconds": queue_timeout_s}}),
                  gateway_ready=False)
    dep = next(w.body for w in plan.writes if w.name == "vc-gateway" and w.kind == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    settings = GatewaySettings.from_env({e["name"]: e["value"] for e in pod["containers"][0]["env"]})
    grace_s = pod["terminationGracePeriodSeconds"]
    assert settings.shutdown_delay_s + settings.drain_timeout_s + 5 == grace_s
    assert settings.drain_timeout_s >= min(queue_timeout_s, 300)  # what the grace period's comment promises
