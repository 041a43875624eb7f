"""Whether a control-plane component is alive: judged by our own child handle, never by a racy /proc read."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from modalscale.devenv import cluster as cluster_mod
from modalscale.devenv.cluster import ClusterError, LocalCluster


def make(tmp_path: Path) -> LocalCluster:
    c = LocalCluster(tmp_path, log=lambda _m: None)
    for d in ("logs", "pids"):
        (tmp_path / d).mkdir()
    return c


def test_a_just_started_component_with_an_unreadable_cmdline_is_not_reported_exited(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Right after execve /proc/<pid>/cmdline can read empty (CI saw "kube-apiserver exited" for a live one).
    monkeypatch.setattr(cluster_mod, "_cmdline", lambda pid, settle_s=1.0: [])
    c = make(tmp_path)
    c._start("kube-apiserver", [sys.executable, "-c", "import time; time.sleep(30)"])
    polls = []
    try:
        c._wait(lambda: polls.append(1) or len(polls) > 5, "kube-apiserver", timeout_s=10)
    finally:
        c._started["kube-apiserver"].kill()
        c._started["kube-apiserver"].wait()
    assert len(polls) == 6


def test_a_component_that_really_exits_is_reported_with_its_code_and_log(tmp_path: Path) -> None:
    c = make(tmp_path)
    c._start("kube-apiserver", [sys.executable, "-c", "print('bind: address already in use'); raise SystemExit(3)"])
    with pytest.raises(ClusterError, match=r"kube-apiserver exited with code 3[^\n]*\n.*address already in use"):
        c._wait(lambda: False, "kube-apiserver", timeout_s=10)


def test_cmdline_read_empty_just_after_exec_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = [b"", b"", b"/bin/etcd\0--name=node0\0"]
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.pop(0))
    assert cluster_mod._cmdline(1234) == ["/bin/etcd", "--name=node0", ""]
    assert reads == []
