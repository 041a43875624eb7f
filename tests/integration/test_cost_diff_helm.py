"""``modalscale cost diff`` on rendered Helm output: the real chart rendered by the pinned helm, plus the examples.

The operator chart renders no InferenceService of its own; a release that ships services renders them next to
the chart's objects (Deployment, ConfigMaps, RBAC ...). The diff must read that multi-document stream, skip
every object that is not an InferenceService, and price the services exactly as from the plain files.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from modalscale.cli import main
from modalscale.devenv.binaries import ensure_helm

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "crds" / "examples"
CHART = REPO / "charts" / "modalscale"
SPOT_A10G = {"gpuHour": {"nvidia-a10g": {"spot": {"usdPerUnitHour": "0.40", "source": "test", "asOf": "2026-12-01"}}}}


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("helm-home")
    saved = {k: os.environ.get(k) for k in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")}
    for k in saved:
        os.environ[k] = str(home / k.lower())
    yield str(ensure_helm(log=lambda _m: None))
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_rendered_chart_output_with_services_diffs_like_the_plain_manifests(helm: str, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    rendered = subprocess.run([helm, "template", "ms", str(CHART), "--namespace", "modalscale-system"],
                              capture_output=True, text=True, timeout=180, check=True).stdout
    chart_kinds = {d["kind"] for d in yaml.safe_load_all(rendered) if d}
    assert "Deployment" in chart_kinds and "InferenceService" not in chart_kinds
    # HEAD: the release as `helm template` would print it with the example services in the chart, vision-chat
    # raised to 12 replicas at most.
    services = [(EXAMPLES / n).read_text() for n in sorted(os.listdir(EXAMPLES)) if n.startswith("inferenceservice")]
    services = [s.replace("maxReplicas: 8", "maxReplicas: 12") for s in services]
    head = tmp_path / "rendered.yaml"
    head.write_text(rendered + "".join(f"\n---\n# Source: modalscale/templates/isvc-{i}.yaml\n{s}"
                                       for i, s in enumerate(services)))
    override = tmp_path / "spot.yaml"
    override.write_text(yaml.safe_dump(SPOT_A10G))
    assert main(["cost", "diff", str(EXAMPLES), str(head), "--format", "json", "--catalog", str(override)]) == 0
    out = json.loads(capsys.readouterr().out)
    changes = {s["name"]: s["change"] for s in out["services"]}
    assert changes.pop("vision-chat") == "changed" and {"captioner", "text-embedder"} <= changes.keys()
    assert set(changes.values()) == {"unchanged"}  # every other example, whatever examples exist
    # 4 more L4 replicas at most: 4 x 0.754276239 USD/h x 730 h = 2202.486617880 USD/month; min unchanged.
    assert out["total_monthly_delta_usd"] == {"min": "0.00", "expected": None, "max": "2202.49"}
