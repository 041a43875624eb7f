"""The wheelhouse of ``modalscale images build`` made from a plain Python 3.11 virtual environment (issue 23).

``python3.11 -m venv`` bundles setuptools 65.5; the wheelhouse once pinned the build requirements to whatever the
running environment had installed, so the operator image's offline ``pip install .`` failed with ``Could not
find a version that satisfies the requirement setuptools>=77``. Here the wheelhouse step runs from such a venv
(PyPI reachable; no buildah, no cluster) and the project is then built offline from the wheelhouse alone, with
build isolation, as the image's code stage builds it. Needs the network, so it is not in the fast tier.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from modalscale.devenv.images import stage_context

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(600)


def run(cmd: list[str], **kwargs: object) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{cmd[:4]} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return str(proc.stdout)


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv from this interpreter's base Python, no system site-packages, bundled pip and setuptools
    untouched; only PyYAML and packaging added (modalscale.devenv.images imports them)."""
    venv = tmp_path_factory.mktemp("plain") / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "pyyaml", "packaging"])
    return python


def installed_setuptools(python: Path) -> str:
    code = "from importlib import metadata; print(metadata.version('setuptools'))"
    return run([str(python), "-c", code]).strip()


def test_wheelhouse_from_a_plain_venv_carries_the_pyproject_build_requirements(
        plain_venv: Path, tmp_path: Path) -> None:
    requires = [Requirement(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]
                ["requires"]]
    setuptools_req = next(r for r in requires if r.name == "setuptools")
    # The precondition of the issue: the venv's own setuptools does not satisfy [build-system].requires.
    venv_setuptools = installed_setuptools(plain_venv)
    assert venv_setuptools not in setuptools_req.specifier, (venv_setuptools, str(setuptools_req))

    root = tmp_path / "images"
    code = ("import json, sys; from pathlib import Path; from modalscale.devenv.images import ensure_wheelhouse; "
            "print(json.dumps(str(ensure_wheelhouse({}, lambda m: print(m, file=sys.stderr), "
            "root=Path(sys.argv[1])))))")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("VIRTUAL_ENV", None)
    house = Path(json.loads(run([str(plain_venv), "-c", code, str(root)], env=env).strip().splitlines()[-1]))

    wheels = {}
    for path in house.glob("*.whl"):
        name, version, _, _ = parse_wheel_filename(path.name)
        wheels.setdefault(name, []).append(version)
    for req in requires:
        found = wheels.get(canonicalize_name(req.name), [])
        assert any(v in req.specifier for v in found), (str(req), found, sorted(wheels))
    assert installed_setuptools(plain_venv) == venv_setuptools  # the venv itself is left as it was

    # The image's code stage: `pip install .` offline from the wheelhouse, build isolation on (the default).
    context = stage_context(REPO, tmp_path / "context", ["pyproject.toml", "src/", "operator/", "autoscaler/",
                                                        "costmodel/", "runtime/"])
    (context / "README.md").touch()
    out = tmp_path / "dist"
    run([str(plain_venv), "-m", "pip", "wheel", "--no-deps", "--no-index", "--find-links", str(house),
         "--disable-pip-version-check", "--wheel-dir", str(out), str(context)], env=env)
    built = [parse_wheel_filename(p.name)[0] for p in out.glob("*.whl")]
    assert built == ["modalscale"], built
