"""Without ``spec.stages`` (issue 24) every object and status the planner writes is what it wrote before stages existed:
over the example InferenceServices (``crds/examples/inferenceservice-*.yaml``) and the factory's default, the child
builders' objects and three passes of ``plan_isvc`` (create, a rerun over the stored objects, a drift repair) equal a
golden file written by the code before stages (commit df43d75).

Regenerate the golden only from a checkout of the code before stages:
``git archive df43d75 | tar -x -C /tmp/pre-stages`` and, with this file copied to the same path there,
``PYTHONPATH=/tmp/pre-stages/src:/tmp/pre-stages python /tmp/pre-stages/tests/unit/operator/test_isvc_stages_off.py
--write-golden``, then copy ``data/isvc_plan_before_stages.json`` back. This module imports nothing newer than that
commit, so it runs there.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import write_isvc_status
from modalscale.operator.isvc.objects import (
    build_configmap,
    build_deployment,
    build_pdb,
    build_service,
    gateway_children,
)
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, plan_isvc
from modalscale.runtime.repo_config import RESPONSE_CACHE_BYTES
from tests.factories import inference_service

try:  # the pod template's repository hash came after stages: left out of the comparison (None at df43d75)
    from tests.unit.operator.test_isvc_gateway_plan import without_repository_hash
except ImportError:
    def without_repository_hash(body: dict[str, Any]) -> dict[str, Any]:
        return body

LATER_GATEWAY_ENV = frozenset({"MODALSCALE_GATEWAY_SHUTDOWN_DELAY_S", "MODALSCALE_GATEWAY_DRAIN_TIMEOUT_S"})
"""Variables the gateway's Deployment gained after stages, independent of them (its drain sized from its grace
period): left out of the comparison (absent at df43d75, so the golden is unchanged)."""


def without_later_additions(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without the pod template's repository hash and without :data:`LATER_GATEWAY_ENV`."""
    body = copy.deepcopy(without_repository_hash(body))
    for container in body.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
        if "env" in container:
            container["env"] = [e for e in container["env"] if e.get("name") not in LATER_GATEWAY_ENV]
    return body


REPO = Path(__file__).resolve().parents[3]
NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)
FILES = {"multimodal/config.pbtxt": 'name: "multimodal"\n', "multimodal/1/model.py": "# model\n"}
GOLDEN = Path(__file__).parent / "data" / "isvc_plan_before_stages.json"
IMAGE = "registry.example.com/modalscale/operator:9.9.9"
EXAMPLES = ("inferenceservice-cpu-utilization.yaml", "inferenceservice-fixed.yaml",
            "inferenceservice-predictive.yaml", "inferenceservice-real-node.yaml")
"""The example manifests as they were before stages (a staged example added later is not part of this proof)."""


def bodies() -> dict[str, dict[str, Any]]:
    """Each example (and the factory's default, gateway on and off) as the apiserver would hand it to the operator."""
    out = {}
    for file in EXAMPLES:
        body = yaml.safe_load((REPO / "crds" / "examples" / file).read_text())
        body["metadata"].update(namespace="ml", uid="u-1", generation=1)
        out[file.removesuffix(".yaml")] = body
    out["factory"] = inference_service("vc", "ml", uid="u-1", generation=1)
    out["factory-direct"] = inference_service("vc", "ml", uid="u-1", generation=1, gateway={"enabled": False})
    return out


def stored(created: dict[str, Any]) -> dict[str, Any]:
    """A created object as the apiserver returns it (a ClusterIP, a Deployment with its replicas ready)."""
    obj = copy.deepcopy(created)
    obj["metadata"].update(generation=1, resourceVersion="1")
    if obj["kind"] == "Deployment":
        n = obj["spec"]["replicas"]
        obj["status"] = {"observedGeneration": 1, "replicas": n, "readyReplicas": n, "updatedReplicas": n,
                         "availableReplicas": n}
    if obj["kind"] == "Service":
        obj["spec"].update(clusterIP="10.0.0.12", sessionAffinity="None")
    return obj


def observed_after(obs: IsvcObserved, plan: Any, name: str) -> IsvcObserved:
    """``obs`` after the plan's creates (what this proof's passes write: creates, then patches it does not apply)."""
    obs = copy.deepcopy(obs)
    obs.status = plan.status
    for w in plan.writes:
        if w.action != "create":
            continue
        if w.name in (name, f"{name}-model-repo"):
            setattr(obs, w.kind.lower(), stored(w.body))
        else:
            obs.gateway_objects[w.kind] = stored(w.body)
    return obs


def _plan_json(plan: Any) -> dict[str, Any]:
    return {"writes": [[w.kind, w.action, w.name, without_later_additions(w.body)] for w in plan.writes],
            "status": write_isvc_status(plan.status), "events": plan.events,
            "desired": plan.desired_replicas}


def scenarios() -> dict[str, Any]:
    """The builders' objects and three planner passes for each body, as JSON-able values."""
    out: dict[str, Any] = {}
    config = PlanConfig(gateway_image=IMAGE)
    for key, body in bodies().items():
        spec = parse_isvc(body)
        keys = ["m__config.pbtxt"] if spec.model.source == "ConfigMap" else None
        files = FILES if spec.model.source == "BuiltIn" else {}
        objects = [build_configmap(spec, files), build_deployment(spec, 3, files, keys, 30), build_service(spec),
                   build_pdb(spec), *gateway_children(spec, IMAGE, {"app": "prometheus"}, 30)]
        first = plan_isvc(spec, IsvcObserved(user_configmap_keys=keys), files, config, NOW)
        obs = observed_after(IsvcObserved(user_configmap_keys=keys), first, spec.name)
        second = plan_isvc(spec, obs, files, config, NOW)
        drifted = copy.deepcopy(obs)
        assert drifted.deployment is not None
        drifted.deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "other:1"
        drifted.deployment["spec"]["replicas"] = 7
        third = plan_isvc(spec, drifted, files, config, NOW)
        scale = plan_isvc(spec, drifted, None, config, NOW)
        out[key] = {"objects": [without_later_additions(o) for o in objects],
                    "plans": [_plan_json(p) for p in (first, second, third, scale)]}
    return json.loads(json.dumps(out, sort_keys=True))


BEFORE_CACHE_CONFIG = "--cache-config=local,size=268435456"
"""The replicas' response-cache size before stages (256 MiB). Since 7 Dec 2026 the Deployment sizes it as ``runtime
serve`` does (``RESPONSE_CACHE_BYTES``, 64 MiB; tests/unit/operator/test_isvc_response_cache.py): the golden is read
with that one argument changed, everything else as the code before stages wrote it."""


def without_service_links(node: Any) -> Any:
    """Every pod spec (a dict with ``containers``) with ``enableServiceLinks: false``, as the builders set it since
    7 Dec 2026 (tests/unit/test_service_links.py)."""
    if isinstance(node, dict):
        out = {k: without_service_links(v) for k, v in node.items()}
        return {**out, "enableServiceLinks": False} if "containers" in node else out
    return [without_service_links(v) for v in node] if isinstance(node, list) else node


def golden() -> Any:
    """The golden file with the changes made since on purpose: the response-cache size, Progressing's message and no
    Service links."""
    text = GOLDEN.read_text().replace(BEFORE_CACHE_CONFIG, f"--cache-config=local,size={RESPONSE_CACHE_BYTES}")
    for n in (1, 2):
        text = text.replace(f'"{n} of {n} replica(s) updated, {n} ready"',
                            f'"{BEFORE_PROGRESSING_WRITE_BACK.format(n=n)}"')
    return without_service_links(json.loads(text))


BEFORE_PROGRESSING_WRITE_BACK = ("setting the Deployment's replicas from 7 to {n} ({n} replica(s), {n} updated, "
                                 "{n} available, {n} ready)")
"""``Progressing``'s message in the drift pass (the Deployment scaled to 7 by someone else, its pods at the
count): before stages "n of n replica(s) updated, n ready"; since 7 Dec 2026 it follows ``kubectl rollout status``
and says a scale as one (tests/unit/operator/test_isvc_progressing.py). The golden is read with that message changed."""


def test_without_stages_every_object_and_plan_is_what_the_code_before_stages_made() -> None:
    assert GOLDEN.read_text().count(BEFORE_CACHE_CONFIG) == 3  # the predictive example's responseCache: true
    assert scenarios() == golden()


def test_the_proof_covers_every_example_and_both_gateway_settings() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert set(golden) == {*(e.removesuffix(".yaml") for e in EXAMPLES), "factory", "factory-direct"}
    kinds = {w[0] for g in golden.values() for p in g["plans"] for w in p["writes"]}
    assert {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"} <= kinds


if __name__ == "__main__" and sys.argv[1:] == ["--write-golden"]:
    GOLDEN.write_text(json.dumps(scenarios(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
