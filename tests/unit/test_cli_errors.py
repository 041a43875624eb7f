"""Bad input to a ``modalscale`` command: exit 2 and one line on stderr naming the flag (or variable) and the fix,
never a traceback (user report item 10). ``main()`` in-process for the table, one real process per command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from modalscale.cli import SUBCOMMANDS, SUMMARIES, build_parser, main


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture()
def traces(tmp_path: Path) -> Path:
    (tmp_path / "header.csv").write_text("time,requests\n0,1\n")
    (tmp_path / "row.csv").write_text("arrival_s,image_count,image_width,image_height,text_tokens\n"
                                      "0.5,0,0,0,zwölf\n")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "noreq.csv").write_text("arrival_s,image_count,image_width,image_height,text_tokens\n")
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00arrival_s\n")
    header = "arrival_s,image_count,image_width,image_height,text_tokens\n"
    (tmp_path / "nan.csv").write_text(header + "0,0,0,0,5\nnan,0,0,0,5\n")
    (tmp_path / "inf.csv").write_text(header + "inf,0,0,0,5\n")
    (tmp_path / "unix.csv").write_text(header + "1765000000,0,0,0,5\n1765000002,0,0,0,5\n")
    (tmp_path / "negative.csv").write_text(header + "0,0,0,0,-5\n")
    return tmp_path


SIMULATE_CASES = [
    (["--trace", "{d}/nonexistent.csv"], "--trace", "no such file"),
    (["--trace", "{d}"], "--trace", "is a directory"),
    (["--trace", "{d}/header.csv"], "--trace", "header"),
    (["--trace", "{d}/row.csv"], "--trace", "line 2"),
    (["--trace", "{d}/empty.csv"], "--trace", "empty"),
    (["--trace", "{d}/binary.csv"], "--trace", "text"),
    (["--trace", "{d}/noreq.csv"], "--trace", "no request"),
    (["--trace", "{d}/nan.csv"], "--trace", "line 3: column arrival_s='nan' is not a finite number"),
    (["--trace", "{d}/inf.csv"], "--trace", "line 2: column arrival_s='inf' is not a finite number"),
    (["--trace", "{d}/unix.csv"], "--trace", "subtract the first timestamp"),
    (["--trace", "{d}/negative.csv"], "--trace", "line 2: column text_tokens='-5' must be >= 0"),
    (["--policies", "foo"], "--policies", "predictive,utilization,concurrency,oracle"),
    (["--policies", "fixed"], "--policies", "--sweep"),
    (["--policies", ","], "--policies", "at least one"),
    (["--target-p95-ms", "-5"], "--target-p95-ms", "> 0"),
    (["--target-p95-ms", "nan"], "--target-p95-ms", "> 0"),
    (["--target-p95-ms", "inf"], "--target-p95-ms", "> 0"),
    (["--predictive-utilization-percent", "0"], "--predictive-utilization-percent", "(0, 100]"),
    (["--predictive-utilization-percent", "150"], "--predictive-utilization-percent", "(0, 100]"),
    (["--startup-delay-s", "-1"], "--startup-delay-s", ">= 0"),
    (["--startup-delay-p90-s", "1"], "--startup-delay-p90-s", "--startup-delay-s"),
    (["--startup-delays-s", "a,b"], "--startup-delays-s", "comma list"),
    (["--startup-delays-s", "5,-1"], "--startup-delays-s", ">= 0"),
    (["--image-fraction", "2"], "--image-fraction", "[0, 1]"),
    (["--seed", "-1"], "--seed", ">= 0"),
]


@pytest.mark.parametrize(("args", "flag", "says"), SIMULATE_CASES, ids=[" ".join(c[0]) for c in SIMULATE_CASES])
def test_simulate_bad_input_exits_2_with_one_line_naming_the_flag(
        capsys: pytest.CaptureFixture[str], traces: Path, args: list[str], flag: str, says: str) -> None:
    line = _one_line_error(capsys, ["simulate", *[a.format(d=traces) for a in args]])
    assert line.startswith(f"modalscale simulate: {flag}: "), line
    assert says in line, line


REPO = Path(__file__).resolve().parents[2]
FIXED = str(REPO / "crds" / "examples" / "inferenceservice-fixed.yaml")
EXAMPLES = str(REPO / "crds" / "examples")

# The other commands' bad input (a newcomer's check, stop 44: `load --rate-rps -1` never ended, `--rate-rps 0` and
# `cost diff` with a missing catalog or profile file ended in a traceback, `profile --from-csv` named no flag).
OTHER_CASES = [
    (["load", "--rate-rps", "-1", "--duration-s", "1"], "load", "--rate-rps", "> 0"),
    (["load", "--rate-rps", "0"], "load", "--rate-rps", "> 0"),
    (["load", "--rate-rps", "nan"], "load", "--rate-rps", "> 0"),
    (["load", "--duration-s", "-3"], "load", "--duration-s", "> 0"),
    (["load", "--duration-s", "inf"], "load", "--duration-s", "> 0"),
    (["load", "--time-scale", "0"], "load", "--time-scale", "> 0"),
    (["load", "--trace", "{d}/nonexistent.csv"], "load", "--trace", "no such file"),
    (["load", "--trace", "{d}/header.csv"], "load", "--trace", "header"),
    (["cost", "diff", FIXED, EXAMPLES, "--catalog", "{d}/nonexistent.yaml"], "cost diff", "--catalog",
     "no such file"),
    (["cost", "diff", FIXED, EXAMPLES, "--catalog", "{d}"], "cost diff", "--catalog", "directory"),
    (["cost", "diff", FIXED, EXAMPLES, "--trace", "{d}/ok.csv", "--profile", "{d}/nonexistent.skops"], "cost diff",
     "--profile", "no such file"),
    (["cost", "diff", FIXED, EXAMPLES, "--trace", "{d}/ok.csv", "--profile", "{d}/ok.csv"], "cost diff",
     "--profile", "modalscale profile"),
    (["cost", "diff", FIXED, EXAMPLES, "--trace", "{d}/nonexistent.csv", "--profile", "{d}/ok.csv"], "cost diff",
     "--trace", "no such file"),
    (["profile", "--from-csv", "{d}/nonexistent.csv"], "profile", "--from-csv", "no such file"),
    (["profile", "--from-csv", "{d}/header.csv"], "profile", "--from-csv", ""),
    # A runtime flag's bad value was reported under the CRD field it sets (spec.runtime.maxBatchSize), not the flag.
    (["runtime", "render", "--max-batch-size", "-3", "--out", "{d}/repo"], "runtime render", "--max-batch-size",
     "[0, 256]"),
    (["runtime", "render", "--instance-count", "0", "--out", "{d}/repo"], "runtime render", "--instance-count",
     "[1, 16]"),
    (["runtime", "render", "--cpu-cores", "-1", "--out", "{d}/repo"], "runtime render", "--cpu-cores", "[0, 1024]"),
    (["runtime", "render", "--preset", "naive", "--preferred-batch-sizes", "4", "--out", "{d}/repo"],
     "runtime render", "--preferred-batch-sizes", "maxBatchSize"),
    (["runtime", "render", "--max-batch-size", "4", "--preferred-batch-sizes", "8", "--out", "{d}/repo"],
     "runtime render", "--preferred-batch-sizes", "maxBatchSize (4)"),
    (["runtime", "render", "--stage", "front", "--out", "{d}/repo"], "runtime render", "--image-encoder-url",
     "required for stage front"),
    (["runtime", "serve", "--max-queue-delay-us", "-1"], "runtime serve", "--max-queue-delay-us", "[0, 1000000]"),
]


@pytest.mark.parametrize(("args", "command", "flag", "says"), OTHER_CASES,
                         ids=[" ".join(Path(a).name for a in c[0]) for c in OTHER_CASES])
def test_other_commands_bad_input_exits_2_with_one_line_naming_the_flag(
        capsys: pytest.CaptureFixture[str], traces: Path, args: list[str], command: str, flag: str,
        says: str) -> None:
    (traces / "ok.csv").write_text("arrival_s,image_count,image_width,image_height,text_tokens\n"
                                   "0.5,0,0,0,12\n1.5,1,640,480,0\n")
    line = _one_line_error(capsys, [a.format(d=traces) for a in args])
    assert line.startswith(f"modalscale {command}: {flag}: "), line
    assert says in line, line


def test_cost_export_without_a_kubeconfig_exits_2_naming_kubeconfig(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    line = _one_line_error(capsys, ["cost", "export"])
    assert line.startswith("modalscale cost export: KUBECONFIG: "), line
    assert "--kubeconfig" in line


def test_cost_export_with_a_missing_kubeconfig_file_exits_2(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    line = _one_line_error(capsys, ["cost", "export", "--kubeconfig", str(tmp_path / "none")])
    assert line.startswith("modalscale cost export: --kubeconfig: "), line


def test_cost_export_with_an_unreachable_apiserver_says_so_in_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
""")
    code = main(["cost", "export", "--kubeconfig", str(kubeconfig)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "cannot reach the API server http://127.0.0.1:9" in err


def test_cost_export_to_a_missing_folder_exits_2_naming_output(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    line = _one_line_error(capsys, ["cost", "export", "--output", str(tmp_path / "no" / "x.csv")])
    assert line.startswith("modalscale cost export: --output: "), line


@pytest.mark.parametrize("argv", [["simulate", "--trace", "/nonexistent/trace.csv"],
                                  ["cost", "export", "--kubeconfig", "/nonexistent/kubeconfig"],
                                  ["load", "--rate-rps", "-1", "--duration-s", "1"]])  # it never ended
def test_a_real_process_exits_2_without_a_traceback(argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.run([sys.executable, "-m", "modalscale.cli", *argv], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_top_level_help_gives_each_command_the_summary_its_module_registers(
        capsys: pytest.CaptureFixture[str]) -> None:
    def helps(parser: object) -> dict[str, str]:
        sub = next(a for a in parser._actions if a.dest == "command")  # type: ignore[attr-defined]
        return {a.dest: a.help for a in sub._choices_actions}

    top = helps(build_parser([]))
    assert top == SUMMARIES and set(SUMMARIES) == set(SUBCOMMANDS)
    for name in SUBCOMMANDS:
        assert helps(build_parser([name]))[name] == SUMMARIES[name], name


@pytest.mark.parametrize("via", ["flag", "variable"])
def test_cost_export_with_a_kubeconfig_that_is_not_yaml_exits_2_naming_the_file(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, via: str) -> None:
    # Before: a yaml ScannerError/ParserError traceback.
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nclusters:\n- name: c\n  cluster: {server: https://h\n")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    if via == "flag":
        line = _one_line_error(capsys, ["cost", "export", "--kubeconfig", str(bad)])
        assert line.startswith(f"modalscale cost export: --kubeconfig: {bad} is not a kubeconfig the client can read "
                               "(not valid YAML: "), line
    else:
        monkeypatch.setenv("KUBECONFIG", str(bad))
        line = _one_line_error(capsys, ["cost", "export"])
        assert line.startswith(f"modalscale cost export: KUBECONFIG: {bad}: not a usable kubeconfig "
                               "(not valid YAML: "), line
    assert "line 5, column 1" in line, line


@pytest.mark.parametrize(("args", "says"), [
    (["--rate", "0"], "modalscale demo: --rate: 0 must be > 0 and finite; e.g. 3"),
    (["--rate", "nan"], "modalscale demo: --rate: nan must be > 0 and finite; e.g. 3"),
    (["--duration", "10"], "modalscale demo: --duration: 10 must be >= 30 (seconds) and finite; e.g. 300"),
    (["--duration", "inf"], "modalscale demo: --duration: inf must be >= 30 (seconds) and finite; e.g. 300"),
    (["--trace", "/nonexistent/t.csv"], "modalscale demo: --trace: /nonexistent/t.csv: no such file"),
    (["--duration", "40"], "modalscale demo: --duration 40 s is too short"),
], ids=["rate-0", "rate-nan", "duration-10", "duration-inf", "trace", "shift"])
def test_demo_bad_input_names_the_flag_after_the_command(capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch, args: list[str],
                                                         says: str) -> None:
    # Before: "--duration must be >= 30 s and --rate > 0" without the command and without saying which was wrong;
    # nan and inf were taken (and the demo started).
    import modalscale.demo.run

    def must_not_start(*_a: object, **_k: object) -> int:
        raise AssertionError("the demo started")

    monkeypatch.setattr(modalscale.demo.run, "run_demo", must_not_start)
    line = _one_line_error(capsys, ["demo", *args])
    assert line.startswith(says), line
