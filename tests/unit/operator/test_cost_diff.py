"""``modalscale cost diff`` on the repository's real example manifests: prices by hand from the catalog figures.

Catalog figures used (costmodel/catalog.yaml, OnDemand): CPU core-hour 0.031611, memory GiB-hour 0.004237,
nvidia-l4 0.560040239, nvidia-a100-40gb 2.933908 USD per GPU-hour; Spot: CPU 0.006655, memory 0.000892, nvidia-l4
0.2688. The Fixed example runs Spot L4s. The packaged catalog deliberately has no Spot A10G price: a Spot A10G
service is priced by catalog override (as the operator's ``MODALSCALE_PRICING_CATALOG`` would), or is the error
that names the file and field.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from modalscale.cli import main
from modalscale.costmodel.catalog import load_catalog
from modalscale.costmodel.showback import ServiceWindow, TenantUsage
from modalscale.operator.cost_diff import (
    HOURS_PER_MONTH,
    CostDiffError,
    ManifestFile,
    ReplicaRange,
    diff,
    price_side,
    read_manifests,
    render,
    with_drivers,
)

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "crds" / "examples"
SPOT_A10G = {"gpuHour": {"nvidia-a10g": {"spot": {"usdPerUnitHour": "0.40", "source": "test", "asOf": "2026-12-01"}}}}
CATALOG = load_catalog(SPOT_A10G)
D = Decimal
# vision-chat: 4 CPU, 16Gi, 1 x nvidia-l4 -> 0.126444 + 0.067792 + 0.560040239 = 0.754276239 USD/h
L4_REPLICA = D("0.754276239")
# the same with 1 x nvidia-a100-40gb -> 0.126444 + 0.067792 + 2.933908 = 3.128144 USD/h
A100_REPLICA = D("3.128144")
# One request gateway pod, default spec.gateway.resources (100m CPU, 256Mi), on demand whatever the service's tier
# (as the budget ledger charges it): 0.1 x 0.031611 + 0.25 x 0.004237 = 0.00422035 USD/h. Every example runs the
# default 2 (gateway on): 2 x 0.00422035 x 730 = 6.161711 USD/month on each side, so deltas are as before.
GATEWAY_POD = D("0.00422035")
GATEWAYS_MONTHLY = 2 * GATEWAY_POD * 730


@pytest.fixture
def changed(tmp_path: Path) -> Path:
    """A copy of crds/examples where vision-chat moves from L4 to A100 40GB and maxReplicas 8 -> 12."""
    head = tmp_path / "head"
    shutil.copytree(EXAMPLES, head)
    path = head / "inferenceservice-predictive.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["resources"]["gpu"]["type"] = "nvidia-a100-40gb"
    doc["spec"]["scaling"]["maxReplicas"] = 12
    path.write_text(yaml.safe_dump(doc))
    return head


def test_a_real_change_is_priced_at_min_and_max_replicas_for_730_hours(changed: Path) -> None:
    base, skipped = price_side(read_manifests(str(EXAMPLES)), CATALOG)
    head, _ = price_side(read_manifests(str(changed)), CATALOG)
    assert sorted(base) == [("default", "captioner"), ("default", "doc-reader"), ("default", "multimodal-real"),
                            ("default", "text-embedder"), ("default", "vision-chat")]
    assert any("BudgetPolicy" in str(s) for s in skipped)  # other kinds are skipped, not errors
    result = diff(base, head)
    vc = next(s for s in result.services if s.name == "vision-chat")
    assert vc.change == "changed" and HOURS_PER_MONTH == 730
    assert vc.base is not None and vc.base.usd_per_replica_hour == L4_REPLICA
    assert vc.head is not None and vc.head.usd_per_replica_hour == A100_REPLICA
    # min: 1 replica; max: 8 -> 12 replicas; expected unknown (no trace/profile).
    assert vc.monthly_delta_usd.min == (A100_REPLICA - L4_REPLICA) * 730
    assert vc.monthly_delta_usd.max == (12 * A100_REPLICA - 8 * L4_REPLICA) * 730
    assert vc.monthly_delta_usd.expected is None
    assert {s.name: s.change for s in result.services} == {"captioner": "unchanged", "text-embedder": "unchanged",
                                                           "doc-reader": "unchanged", "multimodal-real": "unchanged",
                                                           "vision-chat": "changed"}
    total = result.total_monthly_delta_usd
    assert (total.min, total.expected, total.max) == (vc.monthly_delta_usd.min, None, vc.monthly_delta_usd.max)
    # Fixed mode knows its replicas: captioner runs 2 Spot L4 replicas (2 x 0.006655 + 8 x 0.000892 + 0.2688).
    cap = next(s for s in result.services if s.name == "captioner").head
    assert cap is not None and cap.replicas.expected == 2
    spot_l4 = 2 * D("0.006655") + 8 * D("0.000892") + D("0.2688")
    assert cap.monthly_usd.expected == 2 * spot_l4 * 730 + GATEWAYS_MONTHLY


def test_json_has_the_total_delta_object_and_the_services_list(changed: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    override = tmp_path / "spot.yaml"
    override.write_text(yaml.safe_dump(SPOT_A10G))
    rc = main(["cost", "diff", str(EXAMPLES), str(changed), "--format", "json", "--catalog", str(override)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    max_delta = (12 * A100_REPLICA - 8 * L4_REPLICA) * 730  # 22997.568204240 -> 22997.57 shown
    assert out["total_monthly_delta_usd"] == {"min": f"{(A100_REPLICA - L4_REPLICA) * 730:.2f}", "expected": None,
                                              "max": f"{max_delta:.2f}"}
    assert out["hours_per_month"] == 730 and out["currency"] == "USD"
    assert [(s["name"], s["change"]) for s in out["services"]] == [
        ("captioner", "unchanged"), ("doc-reader", "unchanged"), ("multimodal-real", "unchanged"),
        ("text-embedder", "unchanged"), ("vision-chat", "changed")]
    vc = out["services"][4]
    assert vc["base"]["gpu"] == "1 x nvidia-l4" and vc["head"]["gpu"] == "1 x nvidia-a100-40gb"
    assert vc["head"]["replicas"] == {"min": 1, "expected": None, "max": 12}
    assert vc["base"]["file"].endswith("inferenceservice-predictive.yaml")


@pytest.mark.parametrize(("fail_above", "rc"), [("22997.56", 1), ("22997.57", 0)], ids=["exceeded", "within"])
def test_fail_above_exits_1_when_the_max_delta_exceeds_it(changed: Path, tmp_path: Path, fail_above: str, rc: int,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    override = tmp_path / "spot.yaml"
    override.write_text(yaml.safe_dump(SPOT_A10G))
    # max delta = (12 x 3.128144 - 8 x 0.754276239) x 730 = 22997.568204240 USD
    assert main(["cost", "diff", str(EXAMPLES), str(changed), "--catalog", str(override),
                 "--fail-above", fail_above]) == rc
    out = capsys.readouterr()
    assert "vision-chat" in out.out and "730 h/month" in out.out
    assert ("exceeds --fail-above" in out.err) == (rc == 1)


def test_markdown_is_a_table_with_a_total_row(changed: Path) -> None:
    result = diff(price_side(read_manifests(str(EXAMPLES)), CATALOG)[0], price_side(read_manifests(str(changed)),
                                                                                    CATALOG)[0], "main", "pr")
    text = render(result, "markdown")
    assert text.startswith("### modalscale cost diff: `main` -> `pr`")
    assert "| default/vision-chat | changed | 1/?/12 |" in text and "| Total |" in text
    assert "730 h/month" in text


def test_an_unknown_gpu_type_is_an_error_naming_the_file_and_field_never_zero(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load((EXAMPLES / "inferenceservice-predictive.yaml").read_text())
    doc["spec"]["resources"]["gpu"]["type"] = "nvidia-h200-typo"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(CostDiffError, match=r"bad\.yaml: InferenceService default/vision-chat: "
                                            r"spec\.resources\.gpu\.type: .*nvidia-h200-typo"):
        price_side(read_manifests(str(bad)), CATALOG)
    assert main(["cost", "diff", str(EXAMPLES / "inferenceservice-predictive.yaml"), str(bad)]) == 2
    assert "spec.resources.gpu.type" in capsys.readouterr().err


def test_the_packaged_catalog_has_no_spot_a10g_so_a_spot_a10g_service_is_an_error_not_zero(tmp_path: Path) -> None:
    doc = yaml.safe_load((EXAMPLES / "inferenceservice-fixed.yaml").read_text())
    doc["spec"]["resources"]["gpu"]["type"] = "nvidia-a10g"
    (tmp_path / "spot-a10g.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(CostDiffError, match=r"spot-a10g\.yaml: InferenceService default/captioner: "
                                            r"spec\.pricing\.tier: .*no Spot price"):
        price_side(read_manifests(str(tmp_path / "spot-a10g.yaml")), load_catalog())
    assert price_side(read_manifests(str(tmp_path / "spot-a10g.yaml")), CATALOG)[0]  # priced with the override


def test_added_and_removed_services_and_rendered_multi_document_input() -> None:
    text = (EXAMPLES / "inferenceservice-predictive.yaml").read_text()
    rendered = ("---\n# Source: chart/templates/configmap.yaml\napiVersion: v1\nkind: ConfigMap\n"
                "metadata: {name: x}\n---\n" + text.replace("name: vision-chat", "name: vision-chat-2")
                + "\n---\napiVersion: v1\nkind: List\nitems:\n- " + "\n  ".join(
                    yaml.safe_dump(yaml.safe_load(text)).splitlines()))
    head, skipped = price_side([ManifestFile("rendered.yaml", rendered)], CATALOG)
    assert sorted(k[1] for k in head) == ["vision-chat", "vision-chat-2"]
    assert [str(s) for s in skipped] == ["rendered.yaml: ConfigMap x"]
    base, _ = price_side(read_manifests(str(EXAMPLES / "inferenceservice-cpu-utilization.yaml")), CATALOG)
    result = diff(base, head)
    assert {s.name: s.change for s in result.services} == {"text-embedder": "removed", "vision-chat": "added",
                                                           "vision-chat-2": "added"}
    # text-embedder (2 CPU, 8Gi defaults, 1..3 replicas) removed: -3 x (0.063222 + 0.033896) x 730 at max; each
    # service's 2 gateway pods with it (two added, one removed).
    assert result.total_monthly_delta_usd.max == (2 * 8 * L4_REPLICA * 730 - 3 * (D("0.063222") + D("0.033896")) * 730
                                                  + GATEWAYS_MONTHLY)


def test_a_manifest_that_is_not_utf8_is_an_error_naming_the_file_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `helm template . > head.yaml` in Windows PowerShell 5 writes UTF-16 with a byte-order mark.
    text = (EXAMPLES / "inferenceservice-predictive.yaml").read_text()
    folder = tmp_path / "head"
    folder.mkdir()
    (folder / "rendered.yaml").write_bytes(text.encode("utf-16"))
    for source in (folder / "rendered.yaml", folder):
        with pytest.raises(CostDiffError, match=r"rendered\.yaml: not UTF-8 text"):
            read_manifests(str(source))
    assert main(["cost", "diff", str(EXAMPLES / "inferenceservice-predictive.yaml"), str(folder)]) == 2
    err = capsys.readouterr().err
    assert "rendered.yaml: not UTF-8 text" in err and "Traceback" not in err


def test_a_staged_services_image_encoder_pool_is_priced_at_its_own_min_and_max_replicas(tmp_path: Path) -> None:
    # The pool's pods cost what the ledger charges them (its own resources, here spec.resources', at the service's
    # tier): adding spec.stages.imageEncoder (1..4 L4 replicas) to vision-chat was "unchanged", +0.00.
    doc = yaml.safe_load((EXAMPLES / "inferenceservice-predictive.yaml").read_text())
    doc["spec"]["stages"] = {"imageEncoder": {"minReplicas": 1, "maxReplicas": 4}}
    (tmp_path / "staged.yaml").write_text(yaml.safe_dump(doc))
    base, _ = price_side(read_manifests(str(EXAMPLES / "inferenceservice-predictive.yaml")), CATALOG)
    head, _ = price_side(read_manifests(str(tmp_path / "staged.yaml")), CATALOG)
    (vc,) = diff(base, head).services
    assert vc.change == "changed"
    assert (vc.monthly_delta_usd.min, vc.monthly_delta_usd.max) == (L4_REPLICA * 730, 4 * L4_REPLICA * 730)
    assert vc.head is not None and vc.head.to_json()["imageEncoderPool"] == {
        "gpu": "1 x nvidia-l4", "usdPerReplicaHour": "0.754276239", "replicas": {"min": 1, "expected": None, "max": 4}}
    assert vc.base is not None and "imageEncoderPool" not in vc.base.to_json()


def test_a_service_defined_twice_on_one_side_is_an_error() -> None:
    text = (EXAMPLES / "inferenceservice-predictive.yaml").read_text()
    with pytest.raises(CostDiffError, match="default/vision-chat is also defined in a.yaml"):
        price_side([ManifestFile("a.yaml", text), ManifestFile("b.yaml", text)], CATALOG)


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs the git checkout")
def test_a_bare_ref_reads_the_files_that_hold_an_inferenceservice_not_templates_that_mention_one() -> None:
    # charts/modalscale/templates/podmonitor.yaml (a Helm template, not YAML) names InferenceServices in a comment:
    # `modalscale cost diff main HEAD` on this repository stopped there ("not valid YAML", exit 2).
    head_commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    files = read_manifests(head_commit, REPO)
    assert not any("/templates/" in f.origin for f in files)
    priced, _ = price_side(files, CATALOG)
    assert {("default", "vision-chat"), ("default", "captioner")} <= set(priced)


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs the git checkout")
def test_git_refs_read_the_same_files_from_a_subdirectory_of_the_repository() -> None:
    # REF:PATH is git's (PATH from the top of the tree), whatever folder the command runs in (--repo defaults to .):
    # run from crds/, `git ls-tree` listed names relative to it and `git show REF:NAME` did not find them.
    head_commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    for source in (f"{head_commit}:crds/examples", head_commit):
        at_top = {f.origin for f in read_manifests(source, REPO)}
        assert f"{head_commit}:crds/examples/inferenceservice-predictive.yaml" in at_top
        assert {f.origin for f in read_manifests(source, REPO / "crds")} == at_top


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs the git checkout")
def test_git_refs_read_this_repositorys_own_layout(changed: Path) -> None:
    head_commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    files = read_manifests(f"{head_commit}:crds/examples", REPO)
    assert {Path(f.origin.split(":", 1)[1]).name for f in files} >= {"inferenceservice-predictive.yaml",
                                                                     "inferenceservice-fixed.yaml"}
    base, _ = price_side(files, CATALOG)
    head, _ = price_side(read_manifests(str(changed)), CATALOG)
    assert [s.name for s in diff(base, head).services if s.change != "unchanged"] == ["vision-chat"]
    with pytest.raises(CostDiffError, match="not a file, a folder or a git ref"):
        read_manifests("no-such-ref-or-path", REPO)


def test_expected_replicas_come_from_the_simulator_when_a_trace_and_a_profile_are_given(changed: Path,
                                                                                        tmp_path: Path) -> None:
    from modalscale.autoscaler.regressor import save_model
    from modalscale.autoscaler.simulate import SimulationConfig, train_default_model
    from modalscale.autoscaler.traces import TraceSpec, generate_trace, write_trace_csv
    from modalscale.operator.cost_diff import simulator_expected

    save_model(train_default_model(SimulationConfig()), tmp_path / "model.skops")
    write_trace_csv(generate_trace(TraceSpec(duration_s=900, mean_rate_rps=4, random_state=3)), tmp_path / "t.csv")
    expected = simulator_expected(tmp_path / "t.csv", tmp_path / "model.skops")
    base, _ = price_side(read_manifests(str(EXAMPLES)), CATALOG, expected)
    head, _ = price_side(read_manifests(str(changed)), CATALOG, expected)
    result = diff(base, head)
    vc = next(s for s in result.services if s.name == "vision-chat")
    assert vc.base is not None and vc.head is not None
    for side, price in ((vc.base, L4_REPLICA), (vc.head, A100_REPLICA)):
        r = side.replicas
        assert r.expected is not None and r.min <= r.expected <= r.max
        assert side.monthly_usd.expected == r.expected * price * 730 + GATEWAYS_MONTHLY
    assert vc.monthly_delta_usd.expected == vc.head.monthly_usd.expected - vc.base.monthly_usd.expected
    # text-embedder (Utilization, minReplicas 1) is simulated too; the total's expected is known.
    assert result.total_monthly_delta_usd.expected == sum(s.monthly_delta_usd.expected for s in result.services)


def test_the_diff_names_the_top_tenants_and_modalities_behind_each_services_spend_now(changed: Path) -> None:
    result = diff(price_side(read_manifests(str(EXAMPLES)), CATALOG)[0], price_side(read_manifests(str(changed)),
                                                                                    CATALOG)[0], "main", "pr")
    vc = ("default", "vision-chat")
    usage = [TenantUsage(t, m, s, 10) for t, m, s in (("acme", "image", 1600), ("globex", "text", 900),
                                                       ("initech", "image", 400), ("umbrella", "text", 200))]
    windows = {vc: ServiceWindow(*vc, D("36"), 3600), ("default", "captioner"): ServiceWindow(
        "default", "captioner", D("1"), 3600)}  # captioner: spend but no request, nothing said about tenants
    named = with_drivers(result, windows, {vc: usage}, "showback over the last 1h")
    assert set(named.drivers) == {vc}
    text = render(named, "table")
    assert ("default/vision-chat: top tenants acme 16.00 USD (44 %), globex 9.00 USD (25 %), initech 4.00 USD "
            "(11 %), other 2.00 USD (6 %); idle 5.00 USD (14 %); top modalities image 20.00 USD (56 %), "
            "text 11.00 USD (31 %)") in text
    assert "Who spends on them now (showback over the last 1h):" in text and "umbrella" not in text
    assert "- default/vision-chat: top tenants acme" in render(named, "markdown")
    services = {s["name"]: s for s in json.loads(render(named, "json"))["services"]}
    assert services["vision-chat"]["spend_drivers"]["tenants"][0] == {"name": "acme", "usd": "16.000000000"}
    assert "spend_drivers" not in services["captioner"]
    # Without showback figures the diff says nothing about tenants.
    for fmt in ("table", "markdown", "json"):
        assert "tenant" not in render(result, fmt)


def test_an_unreachable_prometheus_leaves_the_diff_as_is_and_names_no_tenant(
        changed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    override = tmp_path / "spot.yaml"
    override.write_text(yaml.safe_dump(SPOT_A10G))
    rc = main(["cost", "diff", str(EXAMPLES), str(changed), "--catalog", str(override),
               "--prometheus-url", "http://user:secret@127.0.0.1:9"])
    out = capsys.readouterr()
    assert rc == 0 and "vision-chat" in out.out and "tenant" not in out.out
    assert "tenants not named" in out.err and "did not answer" in out.err and "secret" not in out.err
    assert main(["cost", "diff", str(EXAMPLES), str(changed), "--catalog", str(override),
                 "--prometheus-url", "http://127.0.0.1:9", "--since", "soon"]) == 2
    assert "--since" in capsys.readouterr().err


def test_the_simulator_runs_each_service_with_its_own_window_and_step(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # An object written under the earlier CRD carries 300 s and 4 where a new one leaves them unset (60 s, 32):
    # the two are different policies and must not share a cached figure.
    import modalscale.autoscaler.simulate as simulate
    from modalscale.api.inferenceservice import parse_spec
    from modalscale.autoscaler.regressor import save_model
    from modalscale.autoscaler.traces import TraceSpec, generate_trace, write_trace_csv
    from modalscale.operator.cost_diff import simulator_expected

    save_model(simulate.train_default_model(simulate.SimulationConfig(profile_requests=300)), tmp_path / "m.skops")
    write_trace_csv(generate_trace(TraceSpec(duration_s=120, mean_rate_rps=1, random_state=3)), tmp_path / "t.csv")
    seen: list[tuple[float | None, int]] = []

    def run(trace: Any, config: Any, model: Any) -> dict[str, Any]:
        seen.append((config.predictive_scale_down_stabilization_s, config.max_step_replicas))
        return {"predictive": {"mean_replicas": 1.0}}

    monkeypatch.setattr(simulate, "run_simulation", run)
    expected = simulator_expected(tmp_path / "t.csv", tmp_path / "m.skops")
    unset = parse_spec({"scaling": {"mode": "Predictive"}})
    stored = parse_spec({"scaling": {"mode": "Predictive", "targetUtilizationPercent": 90,
                                     "scaleDownStabilizationSeconds": 300, "maxStepReplicas": 4}})
    for spec in (unset, stored, unset):
        expected(spec)  # type: ignore[arg-type]
    assert seen == [(60.0, 32), (300.0, 4)]


@pytest.mark.parametrize(("metadata", "says"), [
    ("x", "f.yaml: InferenceService: metadata: must be an object"),
    ({"name": "svc", "generation": "abc"}, "f.yaml: InferenceService default/svc: metadata.generation: must"),
    ({"name": "svc", "labels": [1, 2]}, "f.yaml: InferenceService default/svc: metadata.labels: must be a map"),
])
def test_a_manifest_with_bad_metadata_is_refused_naming_metadata_not_spec_resources(metadata: Any, says: str) -> None:
    """Found by an adversarial probe (6 Dec 2026): these read as ``spec.resources: invalid literal for int()`` or
    raised ``AttributeError`` / ``TypeError``."""
    from modalscale.costmodel.catalog import load_catalog
    from modalscale.operator.cost_diff import CostDiffError, price_service

    body = {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService", "metadata": metadata, "spec": {}}
    with pytest.raises(CostDiffError) as info:
        price_service("f.yaml", body, load_catalog())
    assert str(info.value).startswith(says), info.value


@pytest.mark.parametrize(("gateway", "pods", "pod_price"), [
    ({"enabled": False}, 0, GATEWAY_POD),
    ({"replicas": 5}, 5, GATEWAY_POD),
    ({"resources": {"cpu": "2", "memory": "4Gi"}}, 2, 2 * D("0.031611") + 4 * D("0.004237")),
], ids=["turned-off", "more-pods", "bigger-pods"])
def test_the_gateway_pods_are_priced_on_demand_as_the_ledger_charges_them(
        gateway: dict[str, Any], pods: int, pod_price: Decimal) -> None:
    # The ledger charges each gateway pod (modalscale.io/gateway) at its CPU and memory requests, on demand: turning
    # the gateway off or changing its replicas or resources was "unchanged", +0.00, whatever it saved or cost.
    doc = yaml.safe_load((EXAMPLES / "inferenceservice-fixed.yaml").read_text())  # Spot captioner, gateway default
    base, _ = price_side([ManifestFile("base.yaml", yaml.safe_dump(doc))], CATALOG)
    doc["spec"]["gateway"] = gateway
    head, _ = price_side([ManifestFile("head.yaml", yaml.safe_dump(doc))], CATALOG)
    (cap,) = diff(base, head).services
    assert cap.change == "changed"
    delta = (pods * pod_price - 2 * GATEWAY_POD) * 730
    assert cap.monthly_delta_usd == ReplicaRange(delta, delta, delta)
    assert cap.base is not None and cap.head is not None
    base_gw, head_gw = cap.base.to_json()["gateway"], cap.head.to_json()["gateway"]
    assert (base_gw["pods"], D(base_gw["usdPerPodHour"]), base_gw["pricingTier"]) == (2, GATEWAY_POD, "OnDemand")
    if pods == 0:
        assert head_gw is None
    else:
        assert (head_gw["pods"], D(head_gw["usdPerPodHour"]), head_gw["pricingTier"]) == (pods, pod_price, "OnDemand")


# An 8 x H100 service (max 2 replicas) under a typo: kubectl would refuse it, but a CI gate must not pass it silently.
_H100 = ("metadata: {name: big-llm, namespace: ml}\n"
         "spec:\n  model: {uri: 'hf://x/y'}\n  resources: {gpu: {type: nvidia-h100-80gb, count: 8}}\n"
         "  scaling: {minReplicas: 1, maxReplicas: 2}\n")
_LOOKALIKES = {
    "group-typo.yaml": "apiVersion: modalscale/v1alpha1\nkind: InferenceService\n" + _H100,
    "case-typo.yaml": "apiVersion: modalscale.io/v1alpha1\nkind: Inferenceservice\n" + _H100,
    "kind-typo.yaml": "apiVersion: modalscale.io/v1alpha1\nkind: InferenceServce\n" + _H100,
}
_ORDINARY = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\n"
             "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: conf}\n---\n"
             "apiVersion: modalscale.io/v1alpha1\nkind: BudgetPolicy\nmetadata: {name: team}\n")


def test_documents_that_look_meant_as_inferenceservices_are_listed_as_not_priced_not_dropped() -> None:
    files = [ManifestFile(n, t) for n, t in _LOOKALIKES.items()] + [ManifestFile("other.yaml", _ORDINARY)]
    priced, skipped = price_side(files, CATALOG)
    assert priced == {}
    result = diff({}, priced, skipped=skipped)
    unpriced = {s.origin: s for s in result.not_priced}
    assert sorted(unpriced) == sorted(_LOOKALIKES)  # the Deployment, ConfigMap and BudgetPolicy are not suspects
    assert "apiVersion modalscale/v1alpha1 is not modalscale.io/v1alpha1" in unpriced["group-typo.yaml"].why
    assert "kind Inferenceservice is not InferenceService" in unpriced["case-typo.yaml"].why
    assert "kind InferenceServce is not InferenceService" in unpriced["kind-typo.yaml"].why
    assert {str(s) for s in skipped} >= {"other.yaml: Deployment web", "other.yaml: ConfigMap conf"}


def test_cost_diff_shows_a_typod_service_in_the_table_the_json_and_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: the typo'd 8 x H100 service appeared nowhere, rc 0.
    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir()
    head.mkdir()
    (head / "svc.yaml").write_text(_LOOKALIKES["group-typo.yaml"] + "---\n" + _ORDINARY)
    assert main(["cost", "diff", str(base), str(head)]) == 0
    out = capsys.readouterr()
    for text in (out.out, out.err):
        assert "svc.yaml: InferenceService ml/big-llm" in text and "modalscale/v1alpha1" in text
        assert "Deployment" not in text and "ConfigMap" not in text
    assert "Not priced" in out.out
    assert main(["cost", "diff", str(base), str(head), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["not_priced"] == [{"file": str(head / "svc.yaml"), "kind": "InferenceService",
                                  "apiVersion": "modalscale/v1alpha1", "name": "ml/big-llm",
                                  "why": "apiVersion modalscale/v1alpha1 is not modalscale.io/v1alpha1"}]
    assert main(["cost", "diff", str(base), str(head), "--format", "markdown"]) == 0
    assert "ml/big-llm" in capsys.readouterr().out


def test_a_folder_side_skips_helm_templates_and_files_that_hold_no_inferenceservice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `modalscale cost diff HEAD .` stopped at charts/modalscale/templates/configmap-dashboard.yaml: "not valid YAML",
    # rc 2, while a bare REF side reads only the files that can hold an InferenceService.
    side = tmp_path / "side"
    (side / "chart" / "templates").mkdir(parents=True)
    (side / "chart" / "Chart.yaml").write_text("apiVersion: v2\nname: chart\nversion: 0.1.0\n")
    (side / "chart" / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\ndata:\n  {{- toYaml .Values.x | nindent 2 }}\n")
    (side / "chart" / "templates" / "isvc.yaml").write_text(
        "apiVersion: modalscale.io/v1alpha1\nkind: InferenceService\nmetadata:\n  name: {{ .Release.Name }}\n"
        "{{- with .Values.spec }}\nspec: {{ toYaml . }}\n{{- end }}\n")
    (side / ".venv").mkdir()
    (side / ".venv" / "broken.yaml").write_text("kind: InferenceService\n: [\n")
    (side / "notes.yml").write_text("a: [unclosed\n")  # not a manifest: nothing in it is a kind
    shutil.copy(EXAMPLES / "inferenceservice-predictive.yaml", side / "svc.yaml")
    (side / "typo.yaml").write_text(_LOOKALIKES["case-typo.yaml"])
    priced, skipped = price_side(read_manifests(str(side)), CATALOG)
    assert set(priced) == {("default", "vision-chat")}
    unpriced = {s.origin: s.why for s in diff({}, priced, skipped=skipped).not_priced}
    assert unpriced.keys() == {str(side / "typo.yaml"), str(side / "chart" / "templates" / "isvc.yaml")}
    assert "Helm template" in str(unpriced[str(side / "chart" / "templates" / "isvc.yaml")])
    # A file that can hold one and is not YAML is still an error (it is not a template).
    (side / "bad.yaml").write_text("kind: InferenceService\nmetadata: {name: [\n")
    with pytest.raises(CostDiffError, match=r"bad\.yaml: not valid YAML"):
        price_side(read_manifests(str(side)), CATALOG)
    # This repository's own charts/ (templates) against crds/examples.
    assert main(["cost", "diff", str(REPO / "charts"), str(EXAMPLES), "--catalog", str(_spot(tmp_path))]) == 0
    assert "not valid YAML" not in capsys.readouterr().err


def _spot(tmp_path: Path) -> Path:
    override = tmp_path / "spot.yaml"
    override.write_text(yaml.safe_dump(SPOT_A10G))
    return override


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs the git checkout")
def test_cost_diff_of_head_against_the_working_tree_reads_this_repository(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["cost", "diff", "HEAD", str(REPO), "--repo", str(REPO), "--catalog", str(_spot(tmp_path))])
    err = capsys.readouterr().err
    assert rc == 0, err


def _unpriced_sides(tmp_path: Path, where: str) -> tuple[Path, Path]:
    """BASE and HEAD folders whose only difference is one document cost diff cannot price: the typo'd 8 x H100
    service added in HEAD, or a chart's Helm template that can hold an InferenceService in BASE."""
    base, head = tmp_path / "base", tmp_path / "head"
    for side in (base, head):
        side.mkdir()
        shutil.copy(EXAMPLES / "inferenceservice-predictive.yaml", side / "svc.yaml")
    if where == "head-typo":
        (head / "typo.yaml").write_text(_LOOKALIKES["kind-typo.yaml"])
    else:
        (base / "chart" / "templates").mkdir(parents=True)
        (base / "chart" / "Chart.yaml").write_text("apiVersion: v2\nname: chart\nversion: 0.1.0\n")
        (base / "chart" / "templates" / "isvc.yaml").write_text(
            "apiVersion: modalscale.io/v1alpha1\nkind: InferenceService\nmetadata:\n  name: {{ .Release.Name }}\n")
    return base, head


_UNPRICED = {"head-typo": ("head/typo.yaml: InferenceServce ml/big-llm not priced",
                           "kind InferenceServce is not InferenceService"),
             "base-helm-template": ("base/chart/templates/isvc.yaml: (Helm template) not priced",
                                    "render it (helm template CHART > FILE)")}


@pytest.mark.parametrize("where", list(_UNPRICED), ids=list(_UNPRICED))
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_fail_above_does_not_pass_a_change_it_could_not_price_unless_told_to(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, fmt: str) -> None:
    # Before: the priced delta (+0.00) was under the limit, so the gate exited 0 while the typo'd 8 x H100 service
    # (or the unrendered template) went unchecked: a check that could not fail.
    base, head = _unpriced_sides(tmp_path, where)
    what, why = _UNPRICED[where]
    args = ["cost", "diff", str(base), str(head), "--format", fmt, "--fail-above", "100"]
    assert main(args) == 2
    out = capsys.readouterr()
    error = [line for line in out.err.splitlines() if what in line]
    assert len(error) == 1 and why in error[0] and error[0].startswith("modalscale cost diff: --fail-above: ")
    assert "warning" not in out.err
    assert "--allow-not-priced" in out.err and "not known" in out.err  # the fix, and why the gate cannot pass
    if fmt == "json":  # the report is still printed, and still says what is not priced
        assert [why in s["why"] for s in json.loads(out.out)["not_priced"]] == [True]
    else:
        assert "Not priced" in out.out and what.split(" not priced")[0] in out.out
    # Accepted explicitly: warned as before, and the gate decides on what it priced.
    assert main([*args, "--allow-not-priced"]) == 0
    out = capsys.readouterr()
    assert f"modalscale cost diff: warning: {tmp_path}/{what}" in out.err and why in out.err
    assert main([*args, "--allow-not-priced", "--fail-above", "-1"]) == 1  # the last --fail-above counts
    assert "exceeds --fail-above" in capsys.readouterr().err
    # Without --fail-above it is a report only, as before.
    assert main(args[:-2]) == 0
    assert "warning" in capsys.readouterr().err


_KSERVE = """apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: sklearn-iris
  namespace: ml
spec:
  predictor:
    model:
      modelFormat: {name: sklearn}
      storageUri: gs://kfserving-examples/models/sklearn/1.0/model
"""


def test_fail_above_passes_a_change_that_leaves_a_document_it_cannot_price_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review, 7 Dec 2026: KServe's own InferenceService (kind InferenceService, apiVersion serving.kserve.io), the
    same in BASE and HEAD, made every run of the gate exit 2, counted twice ("2 document(s)") and told the user to
    change its apiVersion to modalscale.io. A document the change leaves alone adds nothing to the delta: a
    warning, said once. Edited in HEAD it is part of the change again, and the gate cannot pass."""
    base, head = _unpriced_sides(tmp_path, "head-typo")
    (head / "typo.yaml").unlink()
    for side in (base, head):
        (side / "kserve.yaml").write_text(_KSERVE)
    args = ["cost", "diff", str(base), str(head), "--fail-above", "100"]
    assert main(args) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "sklearn-iris" in line]
    assert len(lines) == 1 and lines[0].startswith("modalscale cost diff: warning: ")
    assert "not part of the change" in lines[0]
    assert "apiVersion serving.kserve.io/v1beta1 is not modalscale.io/v1alpha1" in lines[0]

    (head / "kserve.yaml").write_text(_KSERVE.replace("sklearn/1.0", "sklearn/2.0"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert [line.split(": ")[1] for line in err.splitlines() if "sklearn-iris" in line] == ["--fail-above"] * 2
    assert "2 document(s) of the change" in err  # the old text and the new, each a side of the edit
    assert "another project's (e.g. KServe's serving.kserve.io), give --allow-not-priced" in err
    assert main([*args, "--allow-not-priced"]) == 0


def test_changed_not_priced_pairs_documents_by_what_they_say_not_where_they_are() -> None:
    from modalscale.operator.cost_diff import Skipped, changed_not_priced

    same_base = Skipped("main:a.yaml", "InferenceService ml/x", "InferenceService", "serving.kserve.io/v1beta1",
                        "ml/x", "why", '{"a": 1}')
    same_head = Skipped("a.yaml", *[getattr(same_base, f) for f in ("what", "kind", "api_version", "name", "why",
                                                                    "content")])
    edited = Skipped("a.yaml", "InferenceService ml/x", "InferenceService", "serving.kserve.io/v1beta1", "ml/x",
                     "why", '{"a": 2}')
    quiet = Skipped("b.yaml", "Deployment web")  # not priced and not meant as one: never part of the gate
    assert changed_not_priced([same_base], [same_head, quiet]) == ()
    assert changed_not_priced([same_base], [edited]) == (same_base, edited)
    assert changed_not_priced([same_base, same_base], [same_head]) == (same_base,)  # written twice, once left
