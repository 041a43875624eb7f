"""Which ``MODALSCALE_*`` names the operator accepts: its own settings, plus the names other modalscale commands
read (docs/operations.md tells users to export some of them), which it ignores; anything else is a typo and stops it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from modalscale.operator.settings import OTHER_COMMANDS_ENV, SETTINGS_ENV, ConfigError, Settings

ROOT = Path(__file__).resolve().parents[3]
CODE = ("src", "operator", "autoscaler", "costmodel", "runtime", "scripts", "benchmarks", "tests/conftest.py")


def _names_read_in_the_repo() -> set[str]:
    names: set[str] = set()
    for top in CODE:
        base = ROOT / top
        files = [base] if base.is_file() else [*base.rglob("*.py"), *base.rglob("*.sh")]
        for f in files:
            if "__pycache__" not in f.parts:
                names |= set(re.findall(r"MODALSCALE_[A-Z0-9_]*[A-Z0-9]", f.read_text(encoding="utf-8")))
    return names


@pytest.mark.parametrize("name", ["MODALSCALE_REAL_NODE", "MODALSCALE_DEMO_REUSE_IMAGE", "MODALSCALE_CACHE_DIR",
                                  "MODALSCALE_TEST_KEEP_CLUSTER", "MODALSCALE_EXTRAS"])
def test_a_variable_of_another_modalscale_command_is_ignored_not_an_error(name: str) -> None:
    settings = Settings.from_env({name: "1"})
    assert settings == Settings()


def test_every_modalscale_variable_read_in_the_repo_is_an_operator_setting_or_another_commands() -> None:
    read = _names_read_in_the_repo()
    assert {"MODALSCALE_REAL_NODE", "MODALSCALE_DEMO_REUSE_IMAGE", "MODALSCALE_NAMESPACES"} <= read
    assert sorted(read - SETTINGS_ENV - set(OTHER_COMMANDS_ENV)) == []
    assert not SETTINGS_ENV & set(OTHER_COMMANDS_ENV)


def test_a_typo_is_still_an_error_naming_it_and_the_likely_setting() -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"MODALSCALE_PROMETHEUS_ULR": "http://p:9090", "MODALSCALE_REAL_NODE": "0"})
    text = str(err.value)
    assert "MODALSCALE_PROMETHEUS_ULR: unknown setting; did you mean MODALSCALE_PROMETHEUS_URL?" in text
    assert "MODALSCALE_REAL_NODE:" not in text
    assert "MODALSCALE_REAL_NODE" in text  # listed among the names the operator ignores


def test_modalscale_operator_starts_past_its_settings_with_readme_exports_and_stops_on_a_typo() -> None:
    """The CLI as a user runs it: documented exports are no error; a typo exits 2 with one line per variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODALSCALE_")}
    env |= {"MODALSCALE_REAL_NODE": "0", "MODALSCALE_DEMO_REUSE_IMAGE": "1", "MODALSCALE_NAMESPCES": "a"}
    proc = subprocess.run([sys.executable, "-m", "modalscale.cli", "operator"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln.strip() for ln in proc.stderr.strip().splitlines()]
    assert lines[0] == "modalscale operator: invalid operator settings:"
    assert [ln.split(":")[0] for ln in lines[1:-1]] == ["MODALSCALE_NAMESPCES"]
    assert "did you mean MODALSCALE_NAMESPACES?" in lines[1]
    assert lines[-1].startswith("(the operator reads ")  # the known names once, after every unknown one


def test_the_operator_knows_every_gateway_setting_as_another_commands() -> None:
    from modalscale.gateway.settings import SETTINGS_ENV as GATEWAY_SETTINGS_ENV

    assert sorted(GATEWAY_SETTINGS_ENV - set(OTHER_COMMANDS_ENV)) == []


def test_the_budget_status_heartbeat_floor_is_read_with_a_60_s_default_and_bad_values_name_the_fix() -> None:
    from modalscale.operator.budget.plan import HEARTBEAT_MIN_S

    assert Settings.from_env({}).budget_status_heartbeat_s == HEARTBEAT_MIN_S == 60
    assert Settings.from_env({"MODALSCALE_BUDGET_STATUS_HEARTBEAT_SECONDS": "10"}).budget_status_heartbeat_s == 10
    name = "MODALSCALE_BUDGET_STATUS_HEARTBEAT_SECONDS"
    for raw, message in (("0", f"{name}='0': out of range; use a value in [1, 3600]"),
                         ("1.5", f"{name}='1.5': not a whole number; use e.g. 60")):
        with pytest.raises(ConfigError) as err:
            Settings.from_env({"MODALSCALE_BUDGET_STATUS_HEARTBEAT_SECONDS": raw})
        assert message in str(err.value)


def test_one_port_for_metrics_and_health_is_refused_naming_both() -> None:
    """Found by a new-user audit (6 Dec 2026): accepted, and the second server failed inside kopf."""
    with pytest.raises(ConfigError, match="MODALSCALE_METRICS_PORT and MODALSCALE_HEALTH_PORT are both 8080"):
        Settings.from_env({"MODALSCALE_METRICS_PORT": "8080"})
    assert Settings.from_env({"MODALSCALE_METRICS_PORT": "0", "MODALSCALE_HEALTH_PORT": "0"}).metrics_port == 0


@pytest.mark.parametrize("case", ["no-kubeconfig", "health-port-taken", "metrics-port-taken"])
def test_start_up_without_a_cluster_or_with_a_port_taken_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    """Found by a new-user audit (6 Dec 2026): a 34-line ConfigException traceback (exit 1); an OSError traceback
    for a taken metrics port; a taken health port left the operator running without /healthz."""
    import socket

    env = {k: v for k, v in os.environ.items() if not k.startswith("MODALSCALE_")}
    env |= {"MODALSCALE_STANDALONE": "true", "KUBECONFIG": str(tmp_path / "none"),
            "KUBERNETES_SERVICE_HOST": "", "HOME": str(tmp_path)}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        if case != "no-kubeconfig":
            (tmp_path / "kubeconfig").write_text(
                "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                "current-context: x\n")
            env["KUBECONFIG"] = str(tmp_path / "kubeconfig")
            env["MODALSCALE_HEALTH_PORT" if case == "health-port-taken" else "MODALSCALE_METRICS_PORT"] = str(port)
        proc = subprocess.run([sys.executable, "-m", "modalscale.cli", "operator"], env=env, capture_output=True,
                              text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if case == "no-kubeconfig":
        assert proc.stderr.startswith("modalscale operator: no cluster to connect to: ") and "KUBECONFIG" in proc.stderr
    else:
        assert f"port {port} is in use" in proc.stderr


def test_the_gateway_image_pull_secrets_are_read_as_names_and_a_bad_one_names_the_fix() -> None:
    assert Settings.from_env({}).gateway_image_pull_secrets == ()
    read = Settings.from_env({"MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS": "regcred, mirror.creds,"})
    assert read.gateway_image_pull_secrets == ("regcred", "mirror.creds")
    with pytest.raises(ConfigError, match="MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS: 'Reg_Cred' is not a Secret name"):
        Settings.from_env({"MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS": "Reg_Cred"})


def test_the_known_names_are_listed_once_whatever_the_number_of_unknown_ones() -> None:
    """A Service's link variables were 8 unknown names at once (a new-user trial), and each line repeated the ~60
    known names: 8 screens of log for one fault."""
    env = {f"MODALSCALE_METRICS_PORT_9090_TCP{s}": "x" for s in ("", "_ADDR", "_PORT", "_PROTO")}
    with pytest.raises(ConfigError) as err:
        Settings.from_env(env)
    text = str(err.value)
    assert text.count("the operator reads") == 1 and text.count(": unknown setting") == 4
