"""The operator chart rendered by `helm template` (no cluster): objects the API server and the kubelet accept for
values a platform team sets (image digests, long release names). Uses the pinned helm cached under
~/.cache/modalscale/bin/ (or a `helm` on PATH); skipped when there is none (tests/integration/test_helm.py builds
it)."""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from modalscale.devenv.binaries import tool_dirs

CHART = Path(__file__).resolve().parents[2] / "charts" / "modalscale"

DIGEST = "sha256:" + "0123456789abcdef" * 4


def _helm() -> str | None:
    cached = tool_dirs()[1] / "helm"
    return str(cached) if cached.is_file() else shutil.which("helm")


HELM = _helm()
pytestmark = pytest.mark.skipif(HELM is None, reason="no helm binary (build it: modalscale cluster build)")


def helm_template(tmp_path: Path, values: dict[str, Any] | None = None, release: str = "ms",
                  namespace: str = "modalscale-system") -> subprocess.CompletedProcess[str]:
    """`helm template` of the chart with ``values``, as it exited."""
    assert HELM is not None
    cmd = [HELM, "template", release, str(CHART), "--namespace", namespace]
    if values:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        cmd += ["-f", str(path)]
    env = {**os.environ, **{k: str(tmp_path / k.lower()) for k in
                            ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")}}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def template(tmp_path: Path, values: dict[str, Any] | None = None, release: str = "ms",
             namespace: str = "modalscale-system") -> list[dict[str, Any]]:
    """The chart's objects rendered by `helm template` with ``values``."""
    proc = helm_template(tmp_path, values, release, namespace)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == "Deployment"]
    return found


def env_of(dep: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("tag", [DIGEST, "@" + DIGEST], ids=["sha256", "at-sha256"])
def test_a_digest_in_image_tag_pins_the_image_by_digest(tmp_path: Path, tag: str) -> None:
    # values.schema.json accepts image.tag "sha256:<hex>" and "@sha256:<hex>"; both must give repo@sha256:<hex>, not
    # repo:sha256:<hex> (InvalidImageName at the kubelet), for the operator and the gateway pods alike.
    dep = deployment(template(tmp_path, {"image": {"repository": "registry.example.com/ml/operator", "tag": tag}}))
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"registry.example.com/ml/operator@{DIGEST}"
    assert env_of(dep)["MODALSCALE_GATEWAY_IMAGE"] == image


def test_a_tag_or_none_still_gives_repo_colon_tag(tmp_path: Path) -> None:
    dep = deployment(template(tmp_path, {"image": {"tag": "0.1.0-rc1"}}))
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "modalscale/operator:0.1.0-rc1"
    dep = deployment(template(tmp_path))
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == f"modalscale/operator:{chart['appVersion']}"


EVERY_OPTIONAL_OBJECT = {
    "pricingCatalog": {"overrides": {"currency": "USD"}},
    "metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True},
                "prometheusRule": {"enabled": True}, "ruleFileConfigMap": {"enabled": True}},
}
"""Values that render every optional object next to the defaults' (dashboard and kube-state-metrics ConfigMaps)."""


@pytest.mark.parametrize("release,values", [
    ("a" * 53, {}),  # helm's longest release name: <release>-modalscale is cut to 63
    ("platform-inference-operator-production-eu-west-1", EVERY_OPTIONAL_OBJECT),  # 49 + 11 = 60: not cut
    ("platform-inference-operator-production-eu-west-1-b", EVERY_OPTIONAL_OBJECT),  # 51 + 11 = 62
    ("ms", {**EVERY_OPTIONAL_OBJECT, "fullnameOverride": "x" * 63}),
], ids=["53-defaults", "49-all", "51-all", "fullname-override-63-all"])
def test_every_object_keeps_its_own_name_with_a_long_release_name(tmp_path: Path, release: str,
                                                                  values: dict[str, Any]) -> None:
    # <fullname>-dashboard, -kube-state-metrics, -pricing, -showback-rules (ConfigMaps) and -inferenceservices,
    # -gateways, -image-encoders (PodMonitors) were each cut back to <fullname> once it neared 63 characters: two
    # objects of one kind with one name, which `helm install` cannot create.
    docs = template(tmp_path, values, release=release)
    names = collections.Counter((d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs)
    assert [k for k, n in names.items() if n > 1] == []
    assert [k for k in names if len(k[2]) > 63 or k[2].endswith("-")] == []
    deployment_spec = deployment(docs)["spec"]["template"]["spec"]
    pricing = [v["configMap"]["name"] for v in deployment_spec["volumes"] if v["name"] == "pricing-catalog"]
    if values.get("pricingCatalog"):
        assert pricing == [d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"
                           and "catalog.yaml" in d.get("data", {})]


@pytest.mark.parametrize("monitor,interval_s", [("podMonitor", 3), ("serviceMonitor", 5)])
def test_a_scrape_timeout_over_the_interval_is_refused_at_install(tmp_path: Path, monitor: str,
                                                                  interval_s: int) -> None:
    # Lowering only the interval (the podMonitor's comment asks for at most 7 s; its default timeout is 4 s, the
    # serviceMonitor's 10 s) rendered scrapeTimeout > interval, which the Prometheus Operator rejects: it skips the
    # monitor (event InvalidConfiguration), and the autoscaler then has no series to read.
    values = {"metrics": {monitor: {"enabled": True, "intervalSeconds": interval_s}}}
    proc = helm_template(tmp_path, values)
    assert proc.returncode != 0
    assert f"metrics.{monitor}.scrapeTimeoutSeconds" in proc.stderr and "intervalSeconds" in proc.stderr
    values["metrics"][monitor]["scrapeTimeoutSeconds"] = interval_s
    docs = template(tmp_path, values)
    kind = monitor[0].upper() + monitor[1:]
    endpoints = [e for d in docs if d["kind"] == kind
                 for e in d["spec"].get("podMetricsEndpoints", d["spec"].get("endpoints", []))]
    assert endpoints and {(e["interval"], e["scrapeTimeout"]) for e in endpoints} == {(f"{interval_s}s",) * 2}


L4 = {"source": "our contract", "asOf": "2026-01-01"}


@pytest.mark.parametrize("overrides,says", [
    ({"gpuHour": {"nvidia-l4": {"onDemand": {**L4, "usdPerUnitHour": 0.5}}}}, "usdPerUnitHour"),
    ({"gpuHours": {"nvidia-l4": {"onDemand": {**L4, "usdPerUnitHour": "0.50"}}}}, "gpuHours"),
    ({"gpuHour": {"nvidia-l4": {"ondemand": {**L4, "usdPerUnitHour": "0.50"}}}}, "ondemand"),
    ({"cpuCoreHour": {"onDemand": {**L4, "usdPerUnitHour": "0.03", "asof": "2026-01-01"}}}, "asof"),
], ids=["float-price", "misspelt-section", "misspelt-tier", "misspelt-field"])
def test_a_pricing_override_the_operator_refuses_is_refused_by_the_schema(tmp_path: Path, overrides: dict[str, Any],
                                                                          says: str) -> None:
    # costmodel.catalog refuses these at start-up (a float price; extra keys: extra="forbid"), so the new operator
    # pods crash-loop while `helm install/upgrade` reports success (on upgrade the old pods stay: maxUnavailable 0).
    proc = helm_template(tmp_path, {"pricingCatalog": {"overrides": overrides}})
    assert proc.returncode != 0 and "values don't meet the specifications of the schema" in proc.stderr
    assert says in proc.stderr


def test_pricing_overrides_the_operator_takes_pass_the_schema_and_load(tmp_path: Path) -> None:
    from modalscale.costmodel.catalog import load_catalog

    overrides = {
        "currency": "USD",
        "cpuCoreHour": {"spot": {**L4, "usdPerUnitHour": "0.01", "note": "our spot deal"}},
        "memoryGiBHour": {"onDemand": {**L4, "usdPerUnitHour": 0}},
        "gpuHour": {"nvidia-l4": {"onDemand": {**L4, "usdPerUnitHour": "0.50"}},
                    "nvidia-b200": {"aliases": ["B200"], "onDemand": {**L4, "usdPerUnitHour": "9.99"}},
                    "nvidia-t4": {"spot": {"note": "a partial figure is deep-merged"}}},
    }
    (cm,) = [d for d in template(tmp_path, {"pricingCatalog": {"overrides": overrides}})
             if d["kind"] == "ConfigMap" and "catalog.yaml" in d["data"]]
    catalog = load_catalog(yaml.safe_load(cm["data"]["catalog.yaml"]))
    assert str(catalog.gpu_hour["nvidia-l4"].on_demand.usd_per_unit_hour) == "0.50"


def test_the_image_pull_secrets_reach_the_gateway_pods_through_the_operators_setting(tmp_path: Path) -> None:
    """The gateway pods run the operator's image: the chart passes its ``imagePullSecrets`` names to the operator
    (``MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS``), which the operator's settings read back; none set, none passed."""
    from modalscale.operator.settings import Settings

    dep = deployment(template(tmp_path, {"imagePullSecrets": [{"name": "regcred"}, {"name": "mirror.creds"}]}))
    env = env_of(dep)
    assert env["MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS"] == "regcred,mirror.creds"
    assert dep["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror.creds"}]
    names = env["MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS"]
    settings = Settings.from_env({"MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS": names})
    assert settings.gateway_image_pull_secrets == ("regcred", "mirror.creds")
    assert "MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS" not in env_of(deployment(template(tmp_path)))


@pytest.mark.parametrize("name", ["a..b", "regcred.-x"])
def test_an_image_pull_secret_name_the_operator_refuses_fails_the_install(tmp_path: Path, name: str) -> None:
    # The schema took any mix of '.' and '-' inside a name; the operator's settings (and Kubernetes) refuse 'a..b',
    # so `helm install` succeeded and the new operator pods crash-looped on MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS.
    proc = helm_template(tmp_path, {"imagePullSecrets": [{"name": name}]})
    assert proc.returncode != 0 and "values don't meet the specifications of the schema" in proc.stderr
    assert "imagePullSecrets" in proc.stderr
