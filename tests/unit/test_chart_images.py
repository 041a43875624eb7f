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


@pytest.mark.parametrize("name", ["Dockerfile.operator", "Dockerfile.runtime"])
def test_every_copy_source_exists(name: str) -> None:
    for word, args in instructions(name):
        if word == "COPY" and "--from" not in args:
            for src in args.split()[:-1]:
                assert (REPO / src).exists(), f"{name}: COPY source {src} missing"


@pytest.mark.parametrize("name", ["Dockerfile.operator", "Dockerfile.runtime"])
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
