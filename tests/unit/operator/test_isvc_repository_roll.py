"""A changed generated model repository rolls the pods that mount it (Triton reads its repository once at start).

Before: ``spec.runtime.maxBatchSize`` 8 -> 16 rewrote the ConfigMap only; the Deployment's template was equal, so
no pod restarted and every running Triton kept batching at 8 while the InferenceService said 16."""

from __future__ import annotations

from typing import Any

from modalscale.api.inferenceservice import parse_isvc
from modalscale.operator.isvc.objects import (
    MODEL_REPOSITORY_HASH_ANNOTATION,
    REPLICAS_ANNOTATION,
    build_deployment,
    content_hash,
)
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, plan_isvc
from modalscale.operator.isvc.reconcile import repository_files
from tests.unit.operator.test_isvc_plan import NOW, apiserver_view
from tests.unit.operator.test_isvc_plan import make_isvc as _make_isvc

CPU = {"cpu": "2", "memory": "8Gi"}
"""A CPU replica: its modality models batch ``spec.runtime.maxBatchSize`` requests (the GPU layout's encoders batch a
fixed number of images)."""


def make_isvc(**spec: Any) -> dict[str, Any]:
    return _make_isvc(resources=CPU, **spec)


def _observed(body: dict[str, Any]) -> IsvcObserved:
    spec = parse_isvc(body)
    first = plan_isvc(spec, IsvcObserved(), repository_files(spec), PlanConfig(), NOW)
    kinds = {w.kind: apiserver_view(w.body) for w in first.writes}
    return IsvcObserved(status=first.status, deployment=kinds["Deployment"], service=kinds["Service"],
                        configmap=kinds["ConfigMap"], poddisruptionbudget=kinds["PodDisruptionBudget"])


def _template_annotations(dep: dict[str, Any]) -> dict[str, str]:
    return dep["spec"]["template"]["metadata"].get("annotations") or {}


def test_the_pod_template_carries_the_hash_of_the_repository_it_mounts() -> None:
    spec = parse_isvc(make_isvc(runtime={"maxBatchSize": 8}))
    files = repository_files(spec)
    dep = build_deployment(spec, 2, files)
    assert _template_annotations(dep) == {MODEL_REPOSITORY_HASH_ANNOTATION: content_hash(files)}
    assert len(content_hash(files)) == 12
    other = repository_files(parse_isvc(make_isvc(runtime={"maxBatchSize": 16})))
    assert content_hash(other) != content_hash(files)  # the batch size is in config.pbtxt


def test_a_changed_batch_size_patches_the_configmap_and_the_template_and_leaves_replicas_alone() -> None:
    obs = _observed(make_isvc(runtime={"maxBatchSize": 8}))
    before = _template_annotations(obs.deployment)[MODEL_REPOSITORY_HASH_ANNOTATION]
    spec = parse_isvc(make_isvc(runtime={"maxBatchSize": 16}))
    files = repository_files(spec)
    plan = plan_isvc(spec, obs, files, PlanConfig(), NOW)
    by_kind = {w.kind: w for w in plan.writes}
    assert sorted(by_kind) == ["ConfigMap", "Deployment"]
    assert [w.kind for w in plan.writes].index("ConfigMap") < [w.kind for w in plan.writes].index("Deployment")
    dep = by_kind["Deployment"]
    assert dep.action == "patch"
    after = _template_annotations(dep.body)[MODEL_REPOSITORY_HASH_ANNOTATION]
    assert after == content_hash(files) != before
    assert "replicas" not in dep.body["spec"]  # a roll, not a scale
    batched = [v for k, v in by_kind["ConfigMap"].body["data"].items() if "max_batch_size: 16" in v]
    assert batched and not [v for v in batched if "max_batch_size: 8\n" in v]


def test_an_unchanged_repository_writes_nothing_and_others_annotations_are_kept() -> None:
    body = make_isvc(runtime={"maxBatchSize": 8})
    obs = _observed(body)
    _template_annotations(obs.deployment)  # created with the hash
    obs.deployment["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = "now"
    spec = parse_isvc(body)
    assert plan_isvc(spec, obs, repository_files(spec), PlanConfig(), NOW).writes == []
    assert REPLICAS_ANNOTATION not in _template_annotations(obs.deployment)


def test_a_user_repository_gets_no_hash() -> None:
    """A ConfigMap-source repository is the user's: its keys are read, not its content, so no hash is claimed."""
    spec = parse_isvc(make_isvc(model={"source": "ConfigMap", "name": "m", "configMap": {"name": "user-repo"}}))
    dep = build_deployment(spec, 1, repository_files(spec), ["m__config.pbtxt"])
    assert MODEL_REPOSITORY_HASH_ANNOTATION not in _template_annotations(dep)
