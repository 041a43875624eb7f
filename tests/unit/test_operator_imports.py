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
import subprocess
import sys
from pathlib import Path

import pytest

from modalscale.autoscaler.features import features_from_mapping
from modalscale.autoscaler.profile_data import generate_profile
from modalscale.autoscaler.regressor import ServiceTimeRegressor, dumps_model

REPO = Path(__file__).resolve().parents[2]

OPERATOR_PROCESS = r"""
import base64, json, sys
from pathlib import Path

import numpy as np

import modalscale.cli
parser = modalscale.cli.build_parser(["operator"])           # what `modalscale operator` imports before it runs
import kopf
from modalscale.operator import handlers
from modalscale.operator.autoscale import handlers as autoscale_handlers
from modalscale.operator.budget import handlers as budget_handlers
from modalscale.autoscaler.features import FEATURES
from modalscale.operator.autoscale.model import decode_cost_model
from modalscale.operator.settings import Settings

handlers.register(kopf.OperatorRegistry(), Settings())       # every handler module, as at start-up
loaded = []
for path in sys.argv[1:]:
    cm = {"binaryData": {"model.skops": base64.b64encode(Path(path).read_bytes()).decode()}}
    model, status = decode_cost_model(cm, "cost-model", "model.skops")
    assert status.loaded, status
    loaded.append(float(model.predict(np.ones((1, len(FEATURES))))[0]))     # the model is usable, not just read
print(json.dumps({"torch": sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")),
                  "loaded": loaded}))
"""


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


def test_operator_modules_and_a_loaded_service_time_model_import_no_torch(artifacts: list[Path]) -> None:
    proc = subprocess.run([sys.executable, "-c", OPERATOR_PROCESS, *map(str, artifacts)], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(result["loaded"]) == 2 and all(math.isfinite(v) for v in result["loaded"])
    assert result["torch"] == [], "the operator imported torch; find the path with python -X importtime"


def test_the_regressor_module_still_lets_torch_users_import_sklearns_torch_shim() -> None:
    # The guard in modalscale.autoscaler.regressor blocks the shim only while skops.io is imported.
    code = ("import modalscale.autoscaler.regressor, sys; "
            "import sklearn.externals.array_api_compat.torch as t; print(t.__name__, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["sklearn.externals.array_api_compat.torch", "True"]
