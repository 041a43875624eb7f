"""A kubeconfig that cannot be read as one stops ``modalscale operator`` with one line naming the file and what is
wrong, exit 2 as for no kubeconfig at all (found by a user trial: ``KUBECONFIG=README.md modalscale operator`` ended
in a 70-line yaml.scanner.ScannerError traceback, exit 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

CASES = {
    "not-yaml": ("{repo}/README.md", "{repo}/README.md: not valid YAML at line "),
    "unclosed": ("{tmp}/unclosed.yaml", "{tmp}/unclosed.yaml: not valid YAML at line 2, column 1: expected the node "
                                        "content, but found '<stream end>' (while parsing a flow node)"),
    "binary": ("{tmp}/binary.yaml", "{tmp}/binary.yaml: not UTF-8 text"),
    "a-list": ("{tmp}/list.yaml", "{tmp}/list.yaml: not a kubeconfig"),
    "a-directory": ("{tmp}", "{tmp}: Is a directory"),
}
"""case -> (KUBECONFIG, the start of the one line after ``modalscale operator: the kubeconfig ``)."""


@pytest.mark.parametrize("case", list(CASES))
def test_a_kubeconfig_that_does_not_load_is_one_line_naming_it_and_exit_2(case: str, tmp_path: Path) -> None:
    (tmp_path / "unclosed.yaml").write_text("a: [\n")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00abc")
    (tmp_path / "list.yaml").write_text("- a\n")
    path, words = (s.format(repo=REPO, tmp=tmp_path) for s in CASES[case])
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODALSCALE_")}
    env |= {"MODALSCALE_STANDALONE": "true", "KUBECONFIG": path, "KUBERNETES_SERVICE_HOST": "",
            "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "modalscale.cli", "operator"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"modalscale operator: the kubeconfig {words}"), proc.stderr
    assert proc.stderr.strip().endswith("; fix it, or set KUBECONFIG to a readable kubeconfig"), proc.stderr
