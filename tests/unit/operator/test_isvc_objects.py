"""The Deployment's termination sequence: the BuiltIn runtime drains in a preStop hook before SIGTERM."""

from __future__ import annotations

from typing import Any

from modalscale.api.inferenceservice import parse_isvc
from modalscale.operator.isvc.objects import (
    DRAIN_S,
    PRESTOP_DRAIN_S,
    PRESTOP_QUIET_S,
    TERMINATION_GRACE_S,
    build_deployment,
)
from tests.factories import inference_service


def isvc(model: dict[str, Any] | None = None) -> dict[str, Any]:
    return inference_service("vc", "ml", uid="u-1", generation=1, resources={"cpu": "2", "memory": "8Gi"},
                             scaling={"mode": "Fixed", "replicas": 1}, **({} if model is None else {"model": model}))


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


def test_the_startup_probe_asks_every_second_over_http_for_up_to_five_minutes() -> None:
    """Its period is how late a started replica is seen Ready (the kubelet runs the readiness probe at once when the
    startup probe first passes): at 5 s, 42 starts from zero on the real node gave a replica's own time to Ready on
    5 s steps. An HTTP GET answered by Triton's own server, never the Python health check (a process a run)."""
    for body, files, keys in ((isvc(), {"multimodal/config.pbtxt": ""}, None),
                              (isvc({"source": "ConfigMap", "name": "own", "configMap": {"name": "own-repo"}}), {},
                               ["own__config.pbtxt"])):
        probe = container(build_deployment(parse_isvc(body), 1, files, keys))["startupProbe"]
        assert probe["httpGet"] == {"path": "/v2/health/live", "port": "http"} and "exec" not in probe
        assert probe["periodSeconds"] == 1 and probe["periodSeconds"] * probe["failureThreshold"] >= 300


def test_builtin_probes_see_a_dead_python_backend_stub_and_a_users_image_gets_http_probes() -> None:
    # Seen on a real tritonserver: a Python-backend stub killed (as the OOM killer does) left Triton answering 200
    # on /v2/models/<name>/ready while every request to that model failed, so the httpGet probes kept the replica
    # in the Service and never restarted it. The BuiltIn image's probes run modalscale.runtime.health.
    c = container(build_deployment(parse_isvc(isvc()), 1, {"multimodal/config.pbtxt": ""}))
    check = ["python3", "-m", "modalscale.runtime.health", "--http-port=8000"]
    assert c["readinessProbe"]["exec"]["command"] == [*check, "--model=multimodal"]
    assert c["livenessProbe"]["exec"]["command"] == check
    for probe in (c["readinessProbe"], c["livenessProbe"]):
        assert "httpGet" not in probe and probe["timeoutSeconds"] >= 5  # it runs inside the replica's CPU quota
    body = isvc({"source": "ConfigMap", "name": "own", "configMap": {"name": "own-repo"}})
    c = container(build_deployment(parse_isvc(body), 1, {}, ["own__config.pbtxt"]))
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/models/own/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert "exec" not in c["readinessProbe"] and "exec" not in c["livenessProbe"]
