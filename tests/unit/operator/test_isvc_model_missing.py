"""A model deleted under running replicas (found by a new-user trial, 7 Dec 2026): after the model ConfigMap was
deleted and the Deployment restarted, the InferenceService said ``Ready=False ModelNotFound`` while the old replica
still served (its new pod waited in ContainerCreating on the missing volume). Ready now follows the Deployment's
ready replicas; ``Degraded`` says that new replicas cannot start."""

from __future__ import annotations

import datetime as dt
import logging
from types import SimpleNamespace
from typing import Any

from modalscale.api import conditions as R
from modalscale.api.isvc_status import IsvcStatus, write_isvc_status
from modalscale.operator.isvc.plan import ModelReferenceError
from modalscale.operator.isvc.reconcile import refuse
from tests.factories import inference_service

NOW = dt.datetime(2026, 12, 7, 18, 0, tzinfo=dt.UTC)
MISSING = ModelReferenceError("spec.model.configMap.name",
                              "ConfigMap captioner-model-repo not found in namespace ml; create it (keys are "
                              "repository paths with __ for /) or fix the name")
RESTARTED = {"metadata": {"name": "vc", "generation": 3}, "spec": {"replicas": 1},
             "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 1, "readyReplicas": 1,
                        "availableReplicas": 1, "unavailableReplicas": 1}}


class Writer:
    def __init__(self) -> None:
        self.status: IsvcStatus | None = None
        self.events: list[tuple[str, str]] = []

    def patch_isvc_status(self, ns: str, name: str, new: IsvcStatus, before: IsvcStatus) -> bool:
        self.status = new
        return write_isvc_status(new, before) != {}

    def event(self, raw: Any, type_: str, reason: str, message: str, logger: Any, queued: bool = True) -> None:
        self.events.append((type_, reason))


def refused(deployment: dict[str, Any] | None) -> tuple[dict[str, dict[str, Any]], Writer]:
    writer = Writer()
    counter = SimpleNamespace(labels=lambda **_: SimpleNamespace(inc=lambda: None))
    deps: Any = SimpleNamespace(writer=writer, metrics=SimpleNamespace(reconciles=counter))
    raw = inference_service("vc", "ml", uid="u-1", generation=3)
    refuse(deps, raw, MISSING, NOW, logging.getLogger("test"), stored=IsvcStatus(), deployment=deployment)
    assert writer.status is not None
    return {c["type"]: dict(c) for c in write_isvc_status(writer.status)["conditions"]}, writer


def test_a_missing_model_under_a_ready_old_replica_keeps_ready_and_says_new_replicas_cannot_start() -> None:
    conditions, writer = refused(RESTARTED)
    ready, degraded = conditions[R.READY], conditions[R.DEGRADED]
    assert (ready["status"], ready["reason"]) == ("True", R.AVAILABLE)
    assert ready["message"].startswith("1/1 replicas ready, serving the model they loaded; new replicas cannot start")
    assert (degraded["status"], degraded["reason"]) == ("True", R.MODEL_NOT_FOUND)
    assert "ConfigMap captioner-model-repo not found" in degraded["message"]
    assert writer.events == [("Warning", R.MODEL_NOT_FOUND)]


def test_a_missing_model_with_no_ready_replica_is_not_ready() -> None:
    for deployment in (None, {**RESTARTED, "status": {**RESTARTED["status"], "readyReplicas": 0}}):
        conditions, _ = refused(deployment)
        assert (conditions[R.READY]["status"], conditions[R.READY]["reason"]) == ("False", R.MODEL_NOT_FOUND)
