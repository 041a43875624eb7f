"""Fixtures for operator tests: the real operator as a subprocess against the session control plane."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from modalscale.devenv.operator_process import OperatorProcess


@pytest.fixture(scope="session")
def start_operator(cluster: Any, crds_installed: list[str], tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[Callable[..., OperatorProcess]]:
    """Factory: start an operator; every one started is stopped at session end."""
    started: list[OperatorProcess] = []
    logs = tmp_path_factory.mktemp("operator-logs")

    def start(**extra_env: str) -> OperatorProcess:
        op = OperatorProcess(cluster.kubeconfig, logs / f"operator-{len(started)}.log", extra_env)
        started.append(op)
        op.wait_healthy()
        return op

    yield start
    for op in started:
        op.stop()


@pytest.fixture(scope="session")
def operator(start_operator: Callable[..., OperatorProcess]) -> OperatorProcess:
    """The session's main operator (all namespaces)."""
    return start_operator()


@pytest.fixture
def namespace(api: Any) -> Iterator[str]:
    """A fresh namespace per test (deleted afterwards, without waiting)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)
