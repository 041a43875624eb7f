"""The operator process never imports torch, even where torch is installed.

Why: torch is the runtime's dependency, not the operator's. It used to arrive through the service-time regressor's
artifact code (skops.io lists scikit-learn's estimators by importing every sklearn sub-package, among them
sklearn.externals.array_api_compat.torch), costing the operator seconds of start-up and hundreds of MB of memory
before it watched anything. Checked in a fresh interpreter, since this test process may have imported torch already.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from modalscale.autoscaler.features import features_from_mapping
from modalscale.autoscaler.profile_data import generate_profile
from modalscale.autoscaler.regressor import ServiceTimeRegressor, dumps_model

REPO = Path(__file__).resolve().parents[2]

@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Both kinds of service-time model artifact the operator may be handed (additive and boosted)."""
    profile = generate_profile(300, random_state=3)
    x, y = features_from_mapping(profile), profile["service_ms"]
    out = []
    for kind, extra in (("additive", {}), ("boosted", {"max_iter": 5})):
        path = tmp_path_factory.mktemp("artifacts") / f"{kind}.skops"
        path.write_bytes(dumps_model(ServiceTimeRegressor(kind=kind, **extra).fit(x, y)))
        out.append(path)
    return out


def test_torch_is_installed_so_the_guard_below_can_fail() -> None:
    assert importlib.util.find_spec("torch") is not None


def test_operator_modules_and_a_loaded_service_time_model_import_no_torch(operator_process: dict[str, Any]) -> None:
    assert len(operator_process["loaded"]) == 2 and all(math.isfinite(v) for v in operator_process["loaded"])
    assert operator_process["torch"] == [], "the operator imported torch; find the path with python -X importtime"


def test_the_regressor_module_still_lets_torch_users_import_sklearns_torch_shim() -> None:
    # The guard in modalscale.autoscaler.regressor blocks the shim only while skops.io is imported.
    code = ("import modalscale.autoscaler.regressor, sys; "
            "import sklearn.externals.array_api_compat.torch as t; print(t.__name__, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["sklearn.externals.array_api_compat.torch", "True"]


# ---------------------------------------------------------------------------------------------- lazy model stack

LAZY_LIBRARIES = ("sklearn", "scipy", "skops", "pandas", "torch")
"""Libraries the idle operator must not hold (about 110 MB of RSS for sklearn + SciPy + skops, measured with
``benchmarks/operator_scale.py --import-breakdown``): the service-time model's stack is imported when the first
artifact is decoded; pandas is an optional extra of prometheus-api-client >= 0.7 that its query path never uses."""

OPERATOR_PROCESS = r"""
import base64, json, sys
from pathlib import Path

LAZY = set(sys.argv[1].split(","))

def loaded():
    return sorted({m.split(".")[0] for m in sys.modules} & LAZY)

# What `modalscale operator` imports and builds before kopf runs (src/modalscale/cli.py, operator/cli.py:run).
import modalscale.cli
modalscale.cli.build_parser(["operator"])
import kopf
from prometheus_client import start_http_server
from modalscale.operator.deps import build_deps
from modalscale.operator.handlers import register
from modalscale.operator.settings import Settings

settings = Settings()
deps = build_deps(settings)
register(kopf.OperatorRegistry(), settings)       # every handler module, as at start-up
at_start = loaded()

# The first service that needs a prediction: its artifact decoded, a prediction, the queueing model's p95.
import numpy as np
from modalscale.autoscaler.features import FEATURES
from modalscale.autoscaler.queueing import response_quantile_ms
from modalscale.operator.autoscale.model import decode_service_time_model

def predict(path):
    cm = {"binaryData": {"model.skops": base64.b64encode(Path(path).read_bytes()).decode()}}
    model, status = decode_service_time_model(cm, "service-time-model", "model.skops")
    assert status.loaded, status
    return float(model.predict(np.ones((1, len(FEATURES))))[0])     # the model is usable, not just read

service_ms = predict(sys.argv[2])
after_first_model = loaded()
p95_ms = response_quantile_ms(500.0 / service_ms, service_ms, 1.0, 2)  # 0.5 erlangs on 2 slots
predicted = [service_ms] + [predict(path) for path in sys.argv[3:]]   # every kind of artifact
print(json.dumps({"at_start": at_start, "after_first_model": after_first_model, "p95_ms": p95_ms,
                  "loaded": predicted,
                  "torch": sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))}))
"""
"""The operator process as it starts (``modalscale operator`` up to kopf's run: settings, deps, every handler
module registered), then decoding both kinds of artifact: one process serves every test below (each start of an
interpreter importing the operator and the model's stack took 5-8 s of CPU on a shared 2-core machine)."""


@pytest.fixture(scope="module")
def operator_process(artifacts: list[Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What :data:`OPERATOR_PROCESS` reports, run once for the module in a fresh interpreter."""
    kubeconfig = tmp_path_factory.mktemp("kubeconfig") / "kubeconfig"  # build_deps reads one; nothing connects
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MODALSCALE_", "KUBERNETES_SERVICE"))}
    env["KUBECONFIG"] = str(kubeconfig)
    proc = subprocess.run([sys.executable, "-c", OPERATOR_PROCESS, ",".join(LAZY_LIBRARIES), *map(str, artifacts)],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_the_operator_starts_without_the_service_time_models_stack_and_loads_it_with_the_first_model(
        operator_process: dict[str, Any]) -> None:
    result = operator_process
    assert result["at_start"] == [], (
        f"the operator imported {result['at_start']} at start-up; find the path with python -X importtime")
    # The same check sees the stack once a model is in use, so it looks at the right module names.
    assert result["after_first_model"] == ["scipy", "sklearn", "skops"]
    assert math.isfinite(result["p95_ms"]) and result["p95_ms"] > 0
