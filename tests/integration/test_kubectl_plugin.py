"""``kubectl modalscale`` against a real apiserver: the installed ``kubectl-modalscale`` executable and kubectl's
own plugin discovery, on a KWOK-only control plane of its own (no real node, no operator).

The InferenceService and BudgetPolicy get the statuses the operator's planners write (tests/unit/kubectl/
statuses.py: ``recommend`` + ``plan_autoscale`` + ``plan_isvc``, and ``plan_policy`` twice an hour apart), patched
through the status subresource, so the apiserver validates them against the CRDs too. The plugin runs as a
subprocess with ``--kubeconfig``, as a user would run it; ``pip install`` of the package (scripts/env.sh) puts it
on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from modalscale.devenv.kube import wait_for
from tests.unit.kubectl.statuses import evaluated_policy, scaled_isvc

REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION = "modalscale.io", "v1alpha1"
NS = "ml"


def plugin() -> str:
    found = shutil.which("kubectl-modalscale")
    if found is None:
        pytest.fail("kubectl-modalscale is not on PATH: `pip install -e .` (scripts/env.sh) installs it from "
                    "[project.scripts]")
    return found


@pytest.fixture(scope="module")
def plugin_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A control plane of its own (the test deletes a CRD), with a service and a policy whose status is set."""
    from modalscale.devenv.cluster import running_cluster

    with running_cluster(tmp_path_factory.mktemp("kubectl-plugin"), nodes=0, crd_dir=REPO / "crds") as c:
        api = c.api_client()
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
        custom = client.CustomObjectsApi(api)
        isvc = scaled_isvc("vc", NS)
        policy = evaluated_policy(name="daily")
        for plural, body in (("inferenceservices", isvc), ("budgetpolicies", policy)):
            meta = {k: body["metadata"][k] for k in ("name", "namespace")}
            custom.create_namespaced_custom_object(GROUP, VERSION, NS, plural, {**body, "metadata": meta,
                                                                               "status": None})
            custom.patch_namespaced_custom_object_status(GROUP, VERSION, NS, plural, meta["name"],
                                                         {"status": body["status"]})
        yield c


def run(*args: str, kubectl: str | None = None, sub: str = "modalscale") -> subprocess.CompletedProcess[str]:
    """The plugin executable with ``args``; with ``kubectl``: ``kubectl SUB args`` with the plugin on PATH."""
    cmd = [kubectl, sub, *args] if kubectl else [plugin(), *args]
    env = {**os.environ, "PATH": f"{Path(plugin()).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)


def test_why_cost_and_budget_read_the_status_the_operator_writes(plugin_cluster: Any) -> None:
    kc = str(plugin_cluster.kubeconfig)
    why = run("why", "vc", "-n", NS, "--kubeconfig", kc)
    assert why.returncode == 0, why.stderr
    assert "Predictive ScaleDownIdle (valid)" in why.stdout and "5 -> 2     ScaleDownIdle" in why.stdout
    assert any(line.split() == ["arrival_rps", "10", "req/s"] for line in why.stdout.splitlines())

    cost = run("cost", "vc", "-n", NS, "--kubeconfig", kc, "-o", "json")
    assert cost.returncode == 0, cost.stderr
    report = json.loads(cost.stdout)
    assert report["costUSDPerHour"] == "3.0006" and report["policiesScope"] == "all namespaces"
    assert [(b["budgetPolicy"], b["spent"]) for b in report["budgets"]] == [("ml/daily", "1.200250478")]

    budget = run("budget", "daily", "-n", NS, "--kubeconfig", kc, "-o", "yaml")
    assert budget.returncode == 0, budget.stderr
    b = yaml.safe_load(budget.stdout)
    assert (b["spent"], b["state"], b["nextAction"]["percent"], b["nextAction"]["enforcesFromSpend"]) == (
        "1.20", "Warning", 100, "1.95")


def test_kubectl_finds_the_plugin_on_path(plugin_cluster: Any) -> None:
    from modalscale.devenv.binaries import KUBERNETES_VERSION, cache_dir

    kubectl = cache_dir() / "bin" / f"kubernetes-{KUBERNETES_VERSION}" / "kubectl"
    if not kubectl.is_file():
        pytest.skip(f"no kubectl binary at {kubectl} (built with the control plane; not built here)")
    listed = run("list", kubectl=str(kubectl), sub="plugin")
    assert plugin() in listed.stdout, listed.stdout + listed.stderr
    via = run("budget", "daily", "-n", NS, "--kubeconfig", str(plugin_cluster.kubeconfig), kubectl=str(kubectl))
    assert via.returncode == 0, via.stderr
    assert "Next action: at 100 % (spend 2.00 USD, 0.80 USD to go" in via.stdout


def test_a_missing_object_or_crd_is_one_line_and_exit_1(plugin_cluster: Any) -> None:
    kc = str(plugin_cluster.kubeconfig)
    missing = run("why", "nope", "-n", NS, "--kubeconfig", kc)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == ("kubectl modalscale why: InferenceService ml/nope not found; kubectl get msvc -n ml "
                              "lists them\n")
    client.ApiextensionsV1Api(plugin_cluster.api_client()).delete_custom_resource_definition(
        "budgetpolicies.modalscale.io")
    gone = wait_for(lambda: (r := run("budget", "daily", "-n", NS, "--kubeconfig", kc)).returncode == 1
                    and "CRD" in r.stderr and r, 60, "the BudgetPolicy CRD gone from the apiserver",
                    interval_s=1.0)
    assert gone.stderr.startswith("kubectl modalscale budget: the BudgetPolicy CRD (budgetpolicies.modalscale.io) "
                                  "is not installed on https://")
    assert len(gone.stderr.splitlines()) == 1 and "Traceback" not in gone.stderr
