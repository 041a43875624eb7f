"""constraints.txt, the versions scripts/env.sh installs (issue 23: a clean clone's .venv and the images' dependency
layers must not change with PyPI's day): one exact pin per distribution, covering every requirement pyproject.toml
names for the extras scripts/env.sh installs, agreeing with every exact pin pyproject.toml makes itself."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
INSTALLED_EXTRAS = ("test", "runtime", "openvino", "demo")


def _env_extras() -> tuple[str, ...]:
    match = re.search(r"^EXTRAS=\$\{MODALSCALE_EXTRAS:-([a-z,-]+)\}$", (REPO / "scripts/env.sh").read_text(), re.M)
    assert match, "scripts/env.sh no longer sets EXTRAS=${MODALSCALE_EXTRAS:-...}"
    return tuple(match.group(1).split(","))


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for n, line in enumerate((REPO / "constraints.txt").read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        req = Requirement(line)
        spec = list(req.specifier)
        assert len(spec) == 1 and spec[0].operator == "==", f"constraints.txt:{n}: {line!r} is not one exact pin"
        name = canonicalize_name(req.name)
        assert name not in pins, f"constraints.txt:{n}: {name} pinned twice"
        pins[name] = spec[0].version
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for extra in INSTALLED_EXTRAS:
        texts += project["optional-dependencies"][extra]
    return [Requirement(t) for t in texts]


def test_the_lock_is_for_the_extras_env_sh_installs() -> None:
    assert _env_extras() == INSTALLED_EXTRAS


def test_every_requirement_is_pinned_once_and_satisfied_by_its_pin() -> None:
    pins = _pins()
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} (pyproject.toml) has no pin in constraints.txt: run scripts/lock.sh <date>"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject.toml's {req}: run scripts/lock.sh <date>")


def test_the_project_itself_is_not_pinned() -> None:
    assert "modalscale" not in _pins()
