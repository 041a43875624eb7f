"""The Deployment's termination sequence: the BuiltIn runtime drains in a preStop hook before SIGTERM."""

from __future__ import annotations

from typing import Any

from modalscale.operator.isvc.objects import (
    DRAIN_S,
    PRESTOP_DRAIN_S,
    PRESTOP_QUIET_S,
    TERMINATION_GRACE_S,
    build_deployment,
)
from modalscale.operator.isvc.spec import parse_isvc


def isvc(model: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"cpu": "2", "memory": "8Gi"}, "scaling": {"mode": "Fixed", "replicas": 1}}
    if model is not None:
        spec["model"] = model
    return {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "vc", "namespace": "ml", "uid": "u-1", "generation": 1}, "spec": spec}


def container(dep: dict[str, Any]) -> dict[str, Any]:
    return dep["spec"]["template"]["spec"]["containers"][0]


def test_builtin_runtime_drains_in_prestop_within_the_grace_period() -> None:
    dep = build_deployment(parse_isvc(isvc()), 1, {"multimodal/config.pbtxt": ""})
    command = container(dep)["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:3] == ["python3", "-m", "modalscale.runtime.drain"]
    assert "--metrics-url=http://127.0.0.1:8002/metrics" in command
    assert f"--timeout-s={PRESTOP_DRAIN_S}" in command and f"--quiet-s={PRESTOP_QUIET_S}" in command
    assert f"--exit-timeout-secs={DRAIN_S}" in container(dep)["args"]
    # the grace period runs from the start of the hook: hook, then Triton's own drain, must both fit
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == TERMINATION_GRACE_S
    assert TERMINATION_GRACE_S > PRESTOP_DRAIN_S + DRAIN_S


def test_a_users_own_triton_image_gets_no_python_hook() -> None:
    body = isvc({"source": "ConfigMap", "name": "own", "configMap": {"name": "own-repo"}})
    dep = build_deployment(parse_isvc(body), 1, {}, ["own__config.pbtxt"])
    assert "lifecycle" not in container(dep)


def test_a_configmap_model_repository_is_read_through_its_data_link() -> None:
    # Seen on the real kubelet node: a ConfigMap volume's root also holds the kubelet's `..data` link and
    # `..<timestamp>` directory; Triton scanned /models, took them for models and exited ("failed to load model
    # '..data'"), so the pod crash-looped. The repository is the `..data` link, which holds only the files.
    for body, repo_files, keys in ((isvc(), {"multimodal/config.pbtxt": ""}, None),
                                   (isvc({"source": "ConfigMap", "name": "own", "configMap": {"name": "own-repo"}}),
                                    {}, ["own__config.pbtxt"])):
        dep = build_deployment(parse_isvc(body), 1, repo_files, keys)
        assert "--model-repository=/models/..data" in container(dep)["args"]
        assert container(dep)["volumeMounts"][0]["mountPath"] == "/models"
