"""intraOpThreads x instanceCount beyond a CPU replica's cores: a Warning Event once per spec generation, no refusal."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from modalscale.api import conditions as R
from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import write_isvc_status
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, cpu_oversubscription, plan_isvc

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
FILES = {"multimodal/config.pbtxt": 'name: "multimodal"\n'}


def isvc(cpu: str, instances: int, threads: int, gpus: int = 0, generation: int = 1) -> dict[str, Any]:
    resources: dict[str, Any] = {"cpu": cpu, "memory": "2Gi"}
    if gpus:
        resources["gpu"] = {"count": gpus, "type": "nvidia-l4"}
    return {"metadata": {"name": "vc", "namespace": "ml", "uid": "u", "generation": generation},
            "spec": {"resources": resources, "runtime": {"instanceCount": instances, "intraOpThreads": threads},
                     "scaling": {"mode": "Fixed", "replicas": 1}, "gateway": {"enabled": False}}}


@pytest.mark.parametrize(("cpu", "instances", "threads", "gpus", "warned"), [
    ("2", 16, 64, 0, True),       # the newcomer's case: 1024 threads on 2 cores
    ("2", 2, 1, 0, False),        # 2 threads on 2 cores
    ("2", 3, 1, 0, True),         # 3 on 2
    ("500m", 1, 1, 0, False),     # one thread on half a core: ceil(0.5) = 1 core
    ("500m", 2, 1, 0, True),
    ("1500m", 2, 1, 0, False),    # ceil(1.5) = 2
    ("2", 16, 64, 1, False),      # a GPU replica has no CPU limit: not checked
], ids=["16x64-on-2", "2x1-on-2", "3x1-on-2", "1x1-on-500m", "2x1-on-500m", "2x1-on-1500m", "gpu"])
def test_threads_beyond_the_replicas_cores_are_named_with_the_fix(cpu: str, instances: int, threads: int, gpus: int,
                                                                  warned: bool) -> None:
    message = cpu_oversubscription(parse_isvc(isvc(cpu, instances, threads, gpus)))
    assert (message is not None) == warned
    if message:
        assert f"{instances} x {threads} = {instances * threads} threads on {cpu} CPU" in message
        assert "spec.runtime.intraOpThreads" in message and "raise spec.resources.cpu" in message


def test_the_warning_is_an_event_once_per_spec_generation_and_the_service_is_still_created() -> None:
    body = isvc("2", 16, 64)
    first = plan_isvc(parse_isvc(body), IsvcObserved(), FILES, PlanConfig(), NOW)
    warnings = [e for e in first.events if e[1] == R.CPU_OVERSUBSCRIBED]
    assert [e[0] for e in warnings] == ["Warning"] and "1024 threads" in warnings[0][2]
    assert {w.kind for w in first.writes} == {"ConfigMap", "Deployment", "PodDisruptionBudget", "Service"}  # no refusal
    assert R.CPU_OVERSUBSCRIBED not in {c["reason"] for c in write_isvc_status(first.status)["conditions"]}
    # The next pass of the same generation (status written) posts nothing again; a new generation does.
    again = plan_isvc(parse_isvc(body), IsvcObserved(status=first.status), FILES, PlanConfig(), NOW)
    assert [e for e in again.events if e[1] == R.CPU_OVERSUBSCRIBED] == []
    changed = plan_isvc(parse_isvc(isvc("2", 8, 64, generation=2)), IsvcObserved(status=first.status), FILES,
                        PlanConfig(), NOW)
    assert [e[1] for e in changed.events if e[1] == R.CPU_OVERSUBSCRIBED] == [R.CPU_OVERSUBSCRIBED]
    fitting = plan_isvc(parse_isvc(isvc("2", 2, 1, generation=3)), IsvcObserved(status=first.status), FILES,
                        PlanConfig(), NOW)
    assert [e for e in fitting.events if e[1] == R.CPU_OVERSUBSCRIBED] == []
