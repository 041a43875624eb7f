"""What ``modalscale cluster up`` and ``cluster env`` print (pure formatting; starting a cluster is the
integration tests' job)."""

from __future__ import annotations

import argparse
import shlex
import subprocess
from pathlib import Path

import pytest

from modalscale.devenv import cluster_cli
from modalscale.devenv.binaries import HELM_VERSION, KUBERNETES_VERSION, tool_dirs


@pytest.mark.parametrize(("status", "line"), [
    ({"enabled": True, "reason": None}, "real node: real-node-0"),
    ({"enabled": False, "reason": "off (--no-real-node)"}, "real node: off (--no-real-node)"),
    ({"enabled": False, "reason": "off (MODALSCALE_REAL_NODE=0)"}, "real node: off (MODALSCALE_REAL_NODE=0)"),
    ({"enabled": False, "reason": "this machine lacks runc"}, "real node: none (this machine lacks runc)"),
], ids=["on", "flag", "variable", "missing"])
def test_cluster_up_says_once_why_there_is_no_real_node(status: dict[str, object], line: str) -> None:
    assert cluster_cli.real_node_summary(status) == line


def test_cluster_env_prints_exports_a_shell_can_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODALSCALE_CACHE_DIR", str(tmp_path / "cache dir"))
    parser = argparse.ArgumentParser()
    cluster_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["cluster", "--workdir", str(tmp_path / "c"), "env"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    dirs = tool_dirs()
    assert [d.name for d in dirs] == [f"kubernetes-{KUBERNETES_VERSION}", f"helm-{HELM_VERSION}-ldflags1"]
    for d in dirs:  # what `helm install ...` and `kubectl apply ...` in README find once evaluated
        d.mkdir(parents=True)
    (dirs[0] / "kubectl").write_text("#!/bin/sh\necho kubectl\n")
    (dirs[1] / "helm").write_text("#!/bin/sh\necho helm\n")
    for f in (dirs[0] / "kubectl", dirs[1] / "helm"):
        f.chmod(0o755)
    script = f"{out}\necho $KUBECONFIG; kubectl; helm"
    got = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"}).stdout.split("\n")
    assert got[:3] == [str(tmp_path / "c" / "kubeconfig"), "kubectl", "helm"]
    assert shlex.quote(str(dirs[1])) in out
