"""``modalscale cluster up`` creates KWOK Spot nodes by default (``--spot-nodes``, default 1).

The nodes themselves (label and taint ``karpenter.sh/capacity-type=spot``, pods placed and priced there) are
tested on the real control plane in tests/integration/operator/test_budget_spot.py; this checks only that the
command hands the count to ``LocalCluster.up`` (a recording stand-in for the cluster: starting one is that test's
job)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from modalscale.devenv import cluster_cli


class RecordingCluster:
    calls: list[dict[str, Any]] = []
    real_node_count = 1  # what cluster.json records

    def __init__(self, workdir: Path | None, log: Any = None) -> None:
        self.kubeconfig = Path("/nonexistent/kubeconfig")

    def up(self, **kwargs: Any) -> None:
        RecordingCluster.calls.append(kwargs)

    def real_node_status(self) -> dict[str, Any]:
        return {"enabled": False, "reason": "test"}


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cluster_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["cluster", *argv])


@pytest.mark.parametrize("argv, spot", [(("up",), 1), (("up", "--spot-nodes", "3"), 3),
                                        (("up", "--spot-nodes", "0"), 0)],
                         ids=["default", "three", "none"])
def test_cluster_up_passes_the_spot_node_count(monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...],
                                               spot: int) -> None:
    monkeypatch.setattr(cluster_cli, "LocalCluster", RecordingCluster)
    RecordingCluster.calls = []
    assert cluster_cli._up(parse(*argv)) == 0
    (call,) = RecordingCluster.calls
    assert call["spot_nodes"] == spot and call["nodes"] == 2


def test_a_negative_spot_node_count_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_cli, "LocalCluster", RecordingCluster)
    RecordingCluster.calls = []
    assert cluster_cli._up(parse("up", "--spot-nodes", "-1")) == 2 and RecordingCluster.calls == []


def test_cluster_up_passes_real_nodes_and_their_labels_and_refuses_bad_ones(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cluster_cli, "LocalCluster", RecordingCluster)
    RecordingCluster.calls = []
    assert cluster_cli._up(parse("up")) == 0
    # No real-node flag: the cluster keeps its nodes and their labels (LocalCluster.up reads its record).
    assert RecordingCluster.calls[-1]["real_nodes"] is None and RecordingCluster.calls[-1]["real_node_labels"] is None
    assert cluster_cli._up(parse("up", "--real-nodes", "2")) == 0
    assert RecordingCluster.calls[-1]["real_nodes"] == 2 and RecordingCluster.calls[-1]["real_node_labels"] == {}
    assert cluster_cli._up(parse("up", "--real-nodes", "2", "--spot-real-node", "1",
                                 "--real-node-gpu", "1=nvidia-l4")) == 0
    call = RecordingCluster.calls[-1]
    assert call["real_nodes"] == 2
    assert call["real_node_labels"] == {1: {"karpenter.sh/capacity-type": "spot",
                                            "nvidia.com/gpu.product": "nvidia-l4"}}
    RecordingCluster.calls = []
    assert cluster_cli._up(parse("up", "--real-nodes", "9")) == 2
    assert cluster_cli._up(parse("up", "--spot-real-node", "1")) == 2
    assert RecordingCluster.calls == []
    err = capsys.readouterr().err
    assert "--real-nodes must be within 1..8, got 9" in err
    assert "--spot-real-node 1: real nodes are numbered 0..0 (--real-nodes 1)" in err


def test_the_summary_names_every_real_node() -> None:
    assert cluster_cli.real_node_summary({"enabled": True}) == "real node: real-node-0"
    assert cluster_cli.real_node_summary({"enabled": True, "nodes": {"real-node-1": {}}}) == \
        "real nodes: real-node-0, real-node-1"


def test_label_flags_alone_apply_to_the_recorded_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``up --spot-real-node 1`` on a cluster that runs 2 real nodes: node 1 is Spot, the count stays (None)."""

    class TwoNodes(RecordingCluster):
        real_node_count = 2

    monkeypatch.setattr(cluster_cli, "LocalCluster", TwoNodes)
    RecordingCluster.calls = []
    assert cluster_cli._up(parse("up", "--spot-real-node", "1")) == 0
    (call,) = RecordingCluster.calls
    assert call["real_nodes"] is None and call["real_node_labels"] == {1: {"karpenter.sh/capacity-type": "spot"}}
    assert cluster_cli._up(parse("up", "--real-nodes", "1", "--spot-real-node", "1")) == 2


@pytest.mark.parametrize(("argv", "says"), [
    (("up", "--no-real-node", "--gpu-type", "bad type"),
     "--gpu-type 'bad type': not a valid node label value (letters, digits, '-', '_', '.', at most 63, starting and "
     "ending with a letter or digit), e.g. nvidia-l4"),
    (("up", "--gpu-type", ""), "--gpu-type '': not a valid node label value"),
    (("up", "--gpu-type", "x" * 64), f"--gpu-type '{'x' * 64}': not a valid node label value"),
    (("up", "--gpus-per-node", "0"), "--gpus-per-node 0: must be >= 1"),
    (("up", "--gpus-per-node", "-2"), "--gpus-per-node -2: must be >= 1"),
    (("up", "--nodes", "-1"), "--nodes -1: must be >= 0"),
], ids=["space", "empty", "too-long", "zero-gpus", "negative-gpus", "negative-nodes"])
def test_bad_node_flags_are_refused_before_anything_starts(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str) -> None:
    # Before: --gpu-type "bad type" started etcd, the apiserver, ... and then died with a 422 traceback creating
    # the node, leaving the control plane running.
    monkeypatch.setattr(cluster_cli, "LocalCluster", RecordingCluster)
    RecordingCluster.calls = []
    assert cluster_cli._up(parse(*argv)) == 2
    assert RecordingCluster.calls == []
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"modalscale cluster up: {says}" or line.startswith(f"modalscale cluster up: {says}"), line


def test_node_flags_not_given_keep_the_existing_nodes_and_given_ones_are_passed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_cli, "LocalCluster", RecordingCluster)
    RecordingCluster.calls = []
    assert cluster_cli._up(parse("up")) == 0
    assert RecordingCluster.calls[-1]["gpu_type"] is None and RecordingCluster.calls[-1]["gpus_per_node"] is None
    assert cluster_cli._up(parse("up", "--gpu-type", "nvidia-h100-80gb", "--gpus-per-node", "4")) == 0
    assert RecordingCluster.calls[-1]["gpu_type"] == "nvidia-h100-80gb"
    assert RecordingCluster.calls[-1]["gpus_per_node"] == 4


@pytest.mark.parametrize(("labels", "gpus", "gpu_type", "gpus_per_node", "says"), [
    ({"nvidia.com/gpu.product": "nvidia-l4"}, "8", "nvidia-h100-80gb", None,
     ["nvidia.com/gpu.product=nvidia-l4, not --gpu-type nvidia-h100-80gb"]),
    ({"nvidia.com/gpu.product": "nvidia-l4"}, "8", None, 4, ["8 GPUs, not --gpus-per-node 4"]),
    ({"nvidia.com/gpu.product": "nvidia-l4"}, "8", "nvidia-l4", 8, []),
    ({"nvidia.com/gpu.product": "nvidia-l4"}, "8", None, None, []),
], ids=["type", "count", "same", "not-given"])
def test_an_existing_fake_node_that_differs_from_the_flags_is_named(
        labels: dict[str, str], gpus: str, gpu_type: str | None, gpus_per_node: int | None, says: list[str]) -> None:
    from modalscale.devenv.cluster import fake_node_differences

    assert fake_node_differences(labels, {"nvidia.com/gpu": gpus}, gpu_type, gpus_per_node) == says
