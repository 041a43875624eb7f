"""``modalscale operator -n NS`` is validated as ``MODALSCALE_NAMESPACES`` is: exit 2 and the same message shape,
naming the flag (found by a user trial: the flag replaced the validated settings unchecked)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from modalscale.cli import main
from modalscale.operator.settings import ConfigError, Settings


@pytest.fixture()
def no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No MODALSCALE_* settings and no cluster: an operator that got past its settings stops at the kubeconfig."""
    for name in [n for n in os.environ if n.startswith("MODALSCALE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MODALSCALE_STANDALONE", "true")


def _stderr_lines(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, list[str]]:
    code = main(argv)
    return code, [ln.strip() for ln in capsys.readouterr().err.strip().splitlines()]


@pytest.mark.usefixtures("no_cluster")
def test_a_bad_namespace_flag_is_refused_as_the_variable_is(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    flag_code, flag = _stderr_lines(capsys, ["operator", "-n", "default", "-n", "Bad NS"])
    monkeypatch.setenv("MODALSCALE_NAMESPACES", "default,Bad NS")
    var_code, var = _stderr_lines(capsys, ["operator"])
    assert (flag_code, var_code) == (2, 2), (flag, var)
    assert flag[0] == var[0] == "modalscale operator: invalid operator settings:"
    assert len(flag) == len(var) == 2
    assert var[1].startswith("MODALSCALE_NAMESPACES: 'Bad NS' is not a namespace name (")
    assert flag[1] == var[1].replace("MODALSCALE_NAMESPACES", "--namespace")


@pytest.mark.usefixtures("no_cluster")
def test_a_good_namespace_flag_gets_past_the_settings(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _stderr_lines(capsys, ["operator", "-n", "team-a"])
    assert code == 2 and len(lines) == 1 and lines[0].startswith("modalscale operator: no cluster to connect to"), lines


def test_the_flag_replaces_the_variable_and_its_errors_name_the_flag() -> None:
    env = {"MODALSCALE_NAMESPACES": "Bad NS"}
    assert Settings.from_env(env, namespaces=["team-a", "team-b"]).namespaces == ("team-a", "team-b")
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"MODALSCALE_NAMESPACES": "team-a"}, namespaces=["a,b"])
    assert "--namespace: 'a,b' is not a namespace name" in str(err.value)
    assert "MODALSCALE_NAMESPACES" not in str(err.value)
