"""``kubectl-modalscale``'s kube access and errors: one line naming what is missing and the fix, exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from modalscale.kubectl.cli import BUDGET, ISVC, PluginError, _api_error, connect, main

REPO = Path(__file__).resolve().parents[3]


def kubeconfig(path: Path, server: str = "https://127.0.0.1:1") -> Path:
    """A kubeconfig with two contexts: ``a`` (current, namespace team-a) and ``b`` (no namespace)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}},
                     {"name": "b", "context": {"cluster": "c", "user": "u"}}]}), encoding="utf-8")
    return path


def test_the_namespace_is_the_flag_else_the_contexts_else_default(tmp_path: Path) -> None:
    kc = str(kubeconfig(tmp_path / "kc"))
    assert connect(kc, None, None).namespace == "team-a"
    assert connect(kc, "b", None).namespace == "default"
    assert connect(kc, "a", "ops").namespace == "ops"
    assert connect(None, None, None, env={"KUBECONFIG": kc}).namespace == "team-a"


def test_kubeconfig_paths_joined_by_colon_are_merged_as_kubectl_does(tmp_path: Path) -> None:
    kc = kubeconfig(tmp_path / "kc")
    assert connect(None, "b", None, env={"KUBECONFIG": f"{tmp_path / 'absent'}:{kc}"}).host == "https://127.0.0.1:1"


def test_a_missing_kubeconfig_or_context_is_one_line_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match=r"--kubeconfig .*/nope: no such file; give the kubeconfig"):
        connect(str(tmp_path / "nope"), None, None)
    with pytest.raises(PluginError, match=r"context 'zz' is in it \(kubectl config get-contexts\)"):
        connect(str(kubeconfig(tmp_path / "kc")), "zz", None)


def test_an_unreachable_api_server_exits_1_with_one_line_and_no_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["why", "vc", "--kubeconfig", str(kubeconfig(tmp_path / "kc"))]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kubectl modalscale why: cannot reach the API server https://127.0.0.1:1: ")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_missing_object_names_it_and_how_to_list_them() -> None:
    body = json.dumps({"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
                       "message": 'inferenceservices.modalscale.io "foo" not found',
                       "details": {"name": "foo", "group": "modalscale.io", "kind": "inferenceservices"}})
    exc = ApiException(status=404, reason="Not Found")
    exc.body = body
    assert str(_api_error(exc, ISVC, "default", "foo", "https://h")) == (
        "InferenceService default/foo not found; kubectl get msvc -n default lists them")


def test_a_missing_crd_names_the_crd_and_how_to_install_it() -> None:
    exc = ApiException(status=404, reason="Not Found")
    exc.body = "404 page not found\n"  # what the apiserver answers for a resource type it does not serve
    msg = str(_api_error(exc, BUDGET, "default", "daily", "https://h"))
    assert msg.startswith("the BudgetPolicy CRD (budgetpolicies.modalscale.io) is not installed on https://h; ")
    assert "helm install modalscale-crds charts/modalscale-crds" in msg


def test_forbidden_names_the_permission_needed() -> None:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps({"kind": "Status", "message": 'budgetpolicies.modalscale.io is forbidden: User "x"'})
    assert "needs get/list on budgetpolicies.modalscale.io in namespace ml" in str(
        _api_error(exc, BUDGET, "ml", None, "https://h"))


def test_cost_diff_is_modalscale_cost_diff_with_the_same_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    examples = str(REPO / "crds" / "examples")
    assert main(["cost", "diff", examples, examples, "--format", "json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    from modalscale.cli import main as modalscale_main

    assert modalscale_main(["cost", "diff", examples, examples, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == ours


def test_bad_usage_exits_2() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["why"])
    assert exc.value.code == 2


def test_the_module_runs_as_a_program() -> None:
    out = subprocess.run([sys.executable, "-m", "modalscale.kubectl.cli", "--help"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.startswith("usage: kubectl modalscale") and "why" in out and "budget" in out


@pytest.mark.parametrize("last", ["-3", "0", "x"])
def test_why_last_must_be_a_count(last: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a new-user audit (6 Dec 2026): ``--last -3`` printed nothing of the history and exited 0."""
    with pytest.raises(SystemExit) as done:
        main(["why", "vc", "--last", last])
    assert done.value.code == 2 and "argument --last" in capsys.readouterr().err


BROKEN_YAML = "apiVersion: v1\nclusters:\n- name: c\n  cluster: {server: https://h\n"  # an unclosed flow mapping


def test_a_kubeconfig_that_is_not_yaml_is_one_line_naming_the_file_and_the_yaml_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: a yaml ParserError traceback from the kubernetes loader.
    bad = tmp_path / "kc"
    bad.write_text(BROKEN_YAML)
    assert main(["why", "foo", "--kubeconfig", str(bad)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"kubectl modalscale why: --kubeconfig {bad}: cannot use it (not valid YAML: "), err
    assert "line 5, column 1" in err, err
    with pytest.raises(PluginError, match=rf"KUBECONFIG={bad}: cannot use it \(not valid YAML: .*line 5"):
        connect(None, None, None, env={"KUBECONFIG": str(bad)})


def test_an_error_keeps_its_own_quotes_and_loses_only_a_keyerrors(tmp_path: Path) -> None:
    # Before: "cannot use it ([Errno 21] Is a directory: '/tmp/x); ..." (the closing quote stripped).
    with pytest.raises(PluginError) as info:
        connect(None, None, None, env={"KUBECONFIG": str(tmp_path)})
    assert f"cannot use it ([Errno 21] Is a directory: '{tmp_path}'); check the file" in str(info.value)
    from modalscale.kubectl.cli import _first_line

    assert _first_line(KeyError("current-context")) == "current-context"  # what the strip was for
    assert _first_line(ValueError("'a' is not 'b'")) == "'a' is not 'b'"
    assert _first_line(ValueError("")) == "ValueError"
