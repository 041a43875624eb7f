"""The demo's disk check (modalscale.devenv.diskcheck): what a cold run writes, by filesystem, against free space."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from modalscale.devenv.diskcheck import GB, Part, cold_parts, main, shortfall

SRC = Path(__file__).resolve().parents[2] / "src"


def _warm(repo: Path, cache: Path) -> None:
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").touch()
    for name in ("etcd", "kubernetes", "kubernetes-node", "kwok", "prometheus"):
        (cache / "bin" / name).mkdir(parents=True)
    (cache / "images").mkdir()
    (cache / "images" / "runtime-cpu-0123.oci.tar").touch()
    (cache / "images" / "operator-4567.oci.tar").touch()
    (cache / "node" / "containerd-root").mkdir(parents=True)


def test_a_fresh_machine_needs_every_part_and_a_warm_one_nothing(tmp_path: Path) -> None:
    repo, home, cache = tmp_path / "repo", tmp_path / "home", tmp_path / "cache"
    cold = cold_parts(repo, home, cache)
    assert sum(p.bytes_needed for p in cold) == 38 * GB
    assert {p.where for p in cold} == {repo, home, cache}
    _warm(repo, cache)
    assert cold_parts(repo, home, cache) == []


def test_a_filesystem_short_of_its_parts_is_named_with_what_goes_there() -> None:
    parts = [Part("a", Path("/big"), 10 * GB), Part("b", Path("/small"), 5 * GB), Part("c", Path("/small"), 4 * GB)]
    free = {Path("/big"): 13 * GB, Path("/small"): 10 * GB}
    dev = {Path("/big"): 1, Path("/small"): 2}
    (line,) = shortfall(parts, free.__getitem__, dev.__getitem__)
    assert line == ("needs about 11 GB free (b ~5 GB in /small, c ~4 GB in /small, 2 GB to spare) and 10.0 GB are "
                    "free there")
    assert shortfall(parts, lambda p: 12 * GB, dev.__getitem__) == []  # 10 + 2 on one, 9 + 2 on the other
    assert shortfall([], lambda p: 0, dev.__getitem__) == []


def test_skipped_by_its_variable_and_importable_with_the_standard_library_alone() -> None:
    assert main({"MODALSCALE_SKIP_DISK_CHECK": "1"}) == 0
    code = "import sys; sys.path.insert(0, sys.argv[1]); import modalscale.devenv.diskcheck"
    subprocess.run([sys.executable, "-S", "-c", code, str(SRC)], check=True)
