"""Cores available to the runtime (cgroup quota, else affinity) and the router sizing rule built on them."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from modalscale.api.errors import InvalidSpec
from modalscale.runtime import cli
from modalscale.runtime.cores import available_cores, cgroup_paths, cgroup_quota_cores, parse_cfs, parse_cpu_max
from modalscale.runtime.repo_config import (
    PRESETS,
    RuntimeConfig,
    build_repository,
    router_instances_for,
)


@pytest.mark.parametrize(("text", "cores"), [("50000 100000", 0.5), ("200000 100000", 2.0), ("max 100000", None),
                                             ("", None), ("garbage", None), ("0 100000", None)])
def test_cpu_max(text: str, cores: float | None) -> None:
    assert parse_cpu_max(text) == cores


def test_cfs_quota_minus_one_is_no_limit() -> None:
    assert parse_cfs("-1\n", "100000\n") is None
    assert parse_cfs("150000\n", "100000\n") == 1.5


def test_cgroup_paths_of_v2_v1_and_hybrid_hosts() -> None:
    assert cgroup_paths("0::/kubepods/pod1/c1\n") == ("/kubepods/pod1/c1", None)
    assert cgroup_paths("3:cpu,cpuacct:/docker/x\n2:memory:/docker/x\n") == (None, "/docker/x")
    assert cgroup_paths("1:cpu:/\n2:cpuacct:/\n0::/\n") == ("/", "/")  # this dev machine: hybrid


def _tree(tmp_path: Path, proc_cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc, sysfs = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(proc_cgroup)
    for rel, text in files.items():
        (sysfs / rel).parent.mkdir(parents=True, exist_ok=True)
        (sysfs / rel).write_text(text)
    return sysfs, proc


def test_a_500m_pod_on_cgroup_v2_has_half_a_core_and_the_tightest_ancestor_wins(tmp_path: Path) -> None:
    sysfs, proc = _tree(tmp_path, "0::/kubepods/burstable/pod1/c1\n", {
        "cpu.max": "max 100000\n",
        "kubepods/burstable/pod1/cpu.max": "50000 100000\n",
        "kubepods/burstable/pod1/c1/cpu.max": "max 100000\n",
        "kubepods/cpu.max": "400000 100000\n"})
    assert cgroup_quota_cores(sysfs, proc) == 0.5


def test_cgroup_v1_quota_and_no_quota(tmp_path: Path) -> None:
    sysfs, proc = _tree(tmp_path, "4:cpu,cpuacct:/docker/x\n", {
        "cpu/docker/x/cpu.cfs_quota_us": "150000\n", "cpu/docker/x/cpu.cfs_period_us": "100000\n"})
    assert cgroup_quota_cores(sysfs, proc) == 1.5
    sysfs, proc = _tree(tmp_path / "b", "0::/\n", {"cpu.max": "max 100000\n"})
    assert cgroup_quota_cores(sysfs, proc) is None


def test_available_cores_is_at_most_the_affinity() -> None:
    cores = available_cores()
    assert 0 < cores <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize(("max_batch_size", "cores", "routers"), [
    (8, 0.0, 16),    # cores unknown: the batch rule alone, as before
    (8, 2.0, 4),     # the 2-vCPU dev machine: 4 routers instead of 16
    (8, 0.5, 2),     # a 500m pod: the floor of 2
    (8, 1.5, 3),
    (8, 8.0, 16),
    (8, 64.0, 16),   # never more than 16
    (1, 64.0, 2),    # never more than the batch needs
    (4, 3.0, 6),
])
def test_router_instances_are_sized_from_the_cores(max_batch_size: int, cores: float, routers: int) -> None:
    assert router_instances_for(max_batch_size, cores) == routers
    cfg = RuntimeConfig(max_batch_size=max_batch_size, cpu_cores=cores)
    assert cfg.router_instances == routers
    router_config = build_repository(cfg)["multimodal/config.pbtxt"]
    assert f"count: {routers}\n    kind: KIND_CPU" in router_config


def test_cpu_cores_must_be_a_non_negative_number() -> None:
    for bad in (-1.0, True, "2", 2000.0):
        with pytest.raises(InvalidSpec, match="cpu_cores"):
            RuntimeConfig(cpu_cores=bad)  # type: ignore[arg-type]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="modalscale")
    cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["runtime", "serve", *argv])


def test_serve_sizes_the_default_for_this_machine_unless_told_the_cores() -> None:
    detected = cli.sized_for_this_machine(cli.config_from_args(_args("--preset", "default")))
    assert detected == PRESETS["default"].replace(cpu_cores=available_cores())
    told = cli.sized_for_this_machine(cli.config_from_args(_args("--preset", "default", "--cpu-cores", "0.5")))
    assert told.cpu_cores == 0.5 and told.router_instances == 2
