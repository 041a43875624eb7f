"""Build the project's container images here, with no daemon and no registry, and load them into the local node.

Nothing is pulled from Docker Hub or NGC (they are not reachable from these machines): every image starts from
a Debian bookworm root filesystem made by ``debootstrap`` (Debian's Python 3.11) and gets its Python packages
from a local wheelhouse. The builder is ``buildah`` from Debian: it runs the project's own Dockerfiles
(``Dockerfile.operator``, ``Dockerfile.runtime-cpu``) unchanged, as root, without a daemon, with ``chroot``
isolation (no nested container runtime needed). Each image is saved as an OCI archive.

* **base** ``modalscale/debian-python:bookworm-<key>``: ``debootstrap --variant=minbase`` with
  :data:`BASE_PACKAGES`, committed into a private buildah store under ``~/.cache/modalscale/images/storage``.
* **operator** ``modalscale/operator:<chart appVersion>`` (the Helm chart's default image): Dockerfile.operator
  with ``PYTHON_IMAGE`` = the base; no torch (checked at build time and by a test).
* **runtime-cpu** ``modalscale/runtime-cpu:<project version>``: Dockerfile.runtime-cpu, Triton from the
  ``nvidia-pytriton`` wheel, torch from PyPI without the OpenAI Triton compiler (see the Dockerfile).

Wheels: the dependency closure of ``modalscale`` (plus extras) is read from the installed distributions of the
running interpreter (the project's ``.venv``), so the images carry exactly the versions the tests ran with;
``pip wheel --no-deps`` fetches those pins (PyPI or pip's cache) into ``images/wheels/<key>/`` once. The build
requirements of modalscale itself (``pip install .`` in the code stage, build isolation on) are pyproject.toml's
``[build-system] requires``, resolved with their dependencies by ``pip wheel``: never the setuptools the running
environment happens to have (a plain ``python3.11 -m venv`` bundles setuptools 65.5, which cannot build it).

Layers and cache: each Dockerfile has two stages, ``deps`` (the venv with the pinned dependency closure, no
project code) and the code stage ``FROM ${DEPS_IMAGE}``. The deps stage is built alone into
``localhost/modalscale/<name>-deps:<deps hash>`` and kept in the private store; the code stage is built on it. The
deps hash covers the deps stage's instructions, its build arguments (the base image, named by its key), the
wheel pins and the files the stage copies; the image's hash covers the deps hash, the code stage's instructions
and build arguments and the files its ``COPY`` lines name (see :func:`image_inputs`). Nothing else counts:
README.md, tests/, benchmarks/ or a comment in a Dockerfile rebuild nothing; a code edit rebuilds only the code
layer; a second run with no change only hashes the inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from modalscale.devenv import checkout
from modalscale.devenv.binaries import build_lock, cache_dir

Log = Callable[[str], None]

REPO = checkout.ROOT
"""The repository root (the build context's source): ``src/modalscale/devenv`` -> three levels up; not a checkout
in an installed wheel (``modalscale images`` checks with :func:`modalscale.devenv.checkout.source_root` first)."""
IMAGE_NAMES = ("operator", "runtime-cpu")
"""The images ``modalscale images build`` makes, by short name: the keys of :func:`image_definitions`."""

DEBIAN_SUITE = "bookworm"
"""Debian release of the base rootfs (Python 3.11, the same minor as the project's .venv)."""
DEBIAN_MIRROR = "http://deb.debian.org/debian"
"""Mirror debootstrap installs from."""
BASE_PACKAGES = ("python3", "python3-venv", "libpython3.11", "ca-certificates")
"""Packages added to debootstrap's minbase: the interpreter, venv + ensurepip, the shared libpython that
Triton's Python-backend stub links against, and CA certificates."""
RECIPE_VERSION = "1"
"""Bump when the build procedure changes in a way the hashed inputs do not show (invalidates every cache)."""
DEPS_STAGE = "deps"
"""Name of the dependencies stage every image Dockerfile here has (no project code in it)."""
DEPS_ARGUMENT = "DEPS_IMAGE"
"""Build argument the code stage is built ``FROM``: the deps stage by default, the cached deps image here."""
RUNTIME_CPU_REPOSITORY = "modalscale/runtime-cpu"
"""Repository of the CPU runtime image; its tag is the project version (pyproject.toml)."""
CPU_EXCLUDED_DISTRIBUTIONS = re.compile(r"^triton$")
"""Canonical distribution names left out of CPU images: the OpenAI Triton compiler (about 1 GB; torch uses it
only to compile GPU kernels and imports it lazily). The CUDA libraries (nvidia-*, through cuda-toolkit) stay:
PyPI's torch wheel is a CUDA build whose import loads cudart, cuBLAS, cuFFT, cuSPARSE, NCCL, ... even on CPU."""


class ImageBuildError(RuntimeError):
    """A tool is missing or a build step failed; the message names the piece, the fix or the output tail."""


@dataclass(frozen=True)
class ImageDefinition:
    """One image built from a Dockerfile of this repository."""

    name: str
    """Short name: ``operator`` or ``runtime-cpu``."""
    dockerfile: str
    """Dockerfile path relative to the repository."""
    ref: str
    """Image reference as users write it (``modalscale/operator:0.1.0``)."""
    base_argument: str
    """Build argument that receives the base image."""
    extras: tuple[str, ...]
    """Extras of modalscale whose dependencies go into the wheelhouse."""
    cpu_only: bool
    """Leave :data:`CPU_EXCLUDED_DISTRIBUTIONS` out of the wheelhouse."""


@dataclass(frozen=True)
class BuiltImage:
    """An image built (or found in the cache) as an OCI archive."""

    name: str
    ref: str
    full_ref: str
    """The name the CRI looks up (``docker.io/modalscale/operator:0.1.0``)."""
    archive: str
    """Path of the OCI archive (uncompressed layers)."""
    size_bytes: int
    """Sum of the image's layer sizes as stored in the archive (gzip), base included."""
    unpacked_bytes: int
    """Size of the image unpacked (buildah's figure for the image, base included); 0 when unknown."""
    input_hash: str
    build_s: float
    """Seconds the build took when it was made (0 for a base found in the store)."""
    cached: bool
    """True when this call found it in the cache and built nothing."""
    deps_hash: str = ""
    """Input hash of its dependencies image (``localhost/modalscale/<name>-deps:<deps_hash>``)."""
    deps_cached: bool = False
    """True when the build found its dependencies image in the store (only the code layer was built)."""
    deps_build_s: float = 0.0
    """Seconds the dependencies image took (0 when it was cached)."""
    code_build_s: float = 0.0
    """Seconds the code stage took."""
    push_s: float = 0.0
    """Seconds ``buildah push`` took to write the archive (compressing every layer)."""
    layer_sizes: list[int] = field(default_factory=list)
    """Size of each layer in the archive (gzip), base first: base, deps, code."""
    reused_bytes: int = -1
    """Bytes of layers identical (same digest) to the previous build's archive, which an import over that
    build does not write again; -1 when there was no previous archive."""


def full_reference(ref: str) -> str:
    """The fully qualified name the CRI normalizes ``ref`` to (``modalscale/x:1`` -> ``docker.io/modalscale/x:1``).

    Follows the Docker reference rules: a first component with a ``.`` or ``:`` or equal to ``localhost`` is a
    registry; a single-component name lives under ``library/``.
    """
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return ref
    if not rest:
        return f"docker.io/library/{ref}"
    return f"docker.io/{ref}"


def operator_reference(repo: Path = REPO) -> str:
    """The chart's default operator image: ``image.repository`` of values.yaml and ``appVersion`` of Chart.yaml
    (templates/deployment.yaml uses ``image.tag`` or else the appVersion)."""
    chart = repo / "charts" / "modalscale"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    app_version = str(yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"])
    return f"{values['image']['repository']}:{values['image'].get('tag') or app_version}"


def project_version(repo: Path = REPO) -> str:
    """``project.version`` of pyproject.toml."""
    return str(tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"])


def runtime_cpu_reference(repo: Path = REPO) -> str:
    """The CPU runtime image's stable reference: ``modalscale/runtime-cpu:<project version>``."""
    return f"{RUNTIME_CPU_REPOSITORY}:{project_version(repo)}"


def image_definitions(repo: Path = REPO) -> dict[str, ImageDefinition]:
    """The images ``modalscale images build`` makes, by short name."""
    return {
        "operator": ImageDefinition("operator", "Dockerfile.operator", operator_reference(repo), "PYTHON_IMAGE",
                                    (), cpu_only=True),
        "runtime-cpu": ImageDefinition("runtime-cpu", "Dockerfile.runtime-cpu", runtime_cpu_reference(repo),
                                       "BASE_IMAGE", ("runtime", "openvino"), cpu_only=True),
    }


def images_dir() -> Path:
    """Root of the image cache: ``<cache_dir>/images`` (``~/.cache/modalscale/images``)."""
    return cache_dir() / "images"


# ---------------------------------------------------------------------------------------------- tools
def missing_tools() -> list[str]:
    """What this machine lacks to build images: a list of human-readable pieces (empty when all is there)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (debootstrap and buildah's chroot isolation need it)")
    for tool, package in (("debootstrap", "debootstrap"), ("buildah", "buildah")):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (Debian package {package})")
    return missing


def check_tools() -> None:
    """Raise :class:`ImageBuildError` naming each missing piece and the fix."""
    missing = missing_tools()
    if missing:
        raise ImageBuildError("cannot build images: missing " + "; ".join(missing)
                              + ". Run scripts/env.sh's ensure_system_packages as root, or "
                              "`apt-get install debootstrap buildah umoci`.")


def _command_name(cmd: Sequence[str]) -> str:
    """The program and its subcommand, past the global ``--option value`` pairs: ``buildah bud``, ``debootstrap
    bookworm``."""
    i = 1
    while i < len(cmd) and cmd[i].startswith("--"):
        i += 1 if "=" in cmd[i] else 2
    return " ".join([Path(cmd[0]).name, *cmd[i:i + 1]])


def _run(cmd: Sequence[str], log: Log, cwd: Path | None = None, env: dict[str, str] | None = None,
         quiet: bool = False) -> str:
    """Run ``cmd``; return its stdout.

    Raises:
        ImageBuildError: A non-zero exit. Its first line names the command and gives the last line the command
            wrote on stderr (else stdout), e.g. ``buildah commit exited 125: Error: ... no space left on device``:
            the line a test summary and CI's tail show (before, the first line held only the store's paths and
            the reason was cut off); the output's tail follows.
    """
    if not quiet:
        log("$ " + " ".join(cmd))
    proc = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stdout[-3000:] + "\n" + proc.stderr[-4000:]).strip()
        last = next((line.strip() for text in (proc.stderr, proc.stdout) for line in reversed(text.splitlines())
                     if line.strip()), "no output")
        raise ImageBuildError(f"{_command_name(cmd)} exited {proc.returncode}: {last}\n{tail}")
    return proc.stdout


def buildah_command(root: Path | None = None) -> list[str]:
    """``buildah`` with the project's private store (never the machine's default one)."""
    root = root or images_dir()
    return ["buildah", "--root", str(root / "storage" / "root"), "--runroot", str(root / "storage" / "run"),
            "--storage-driver", "overlay"]


def _store_size_bytes(name: str) -> int:
    """Unpacked size of image ``name`` in the private store (``buildah images --json``), 0 when unknown."""
    proc = subprocess.run([*buildah_command(), "images", "--json", name], capture_output=True, text=True, check=False)
    try:
        size = str(json.loads(proc.stdout)[0]["size"])  # e.g. "183 MB" (decimal units)
    except (ValueError, KeyError, IndexError, TypeError):
        return 0
    match = re.fullmatch(r"([0-9.]+)\s*([kKMGT]?B)", size.strip())
    if not match:
        return 0
    scale = {"B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}[match.group(2)]
    return int(float(match.group(1)) * scale)


def _image_exists(name: str) -> bool:
    proc = subprocess.run([*buildah_command(), "inspect", "--type", "image", name], capture_output=True, check=False)
    return proc.returncode == 0


# ---------------------------------------------------------------------------------------------- hashing
def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def base_key() -> str:
    """Content key of the base rootfs: suite, mirror, packages and recipe version (16 hex digits)."""
    return _digest([DEBIAN_SUITE.encode(), DEBIAN_MIRROR.encode(), " ".join(BASE_PACKAGES).encode(),
                    RECIPE_VERSION.encode()])[:16]


def base_reference() -> str:
    """Name of the base image in the private buildah store."""
    return f"localhost/modalscale/debian-python:{DEBIAN_SUITE}-{base_key()}"


# ---------------------------------------------------------------------------------------------- Dockerfiles
@dataclass(frozen=True)
class DockerfileStage:
    """One ``FROM`` stage of a Dockerfile."""

    name: str
    """The stage's ``AS`` name ("" when it has none)."""
    base: str
    """The ``FROM`` argument as written (``${BASE_IMAGE}``)."""
    text: str
    """The stage's lines, from its ``FROM`` up to the next ``FROM``, comments included."""
    sources: tuple[str, ...]
    """Build-context paths its ``COPY``/``ADD`` instructions name (``--from`` copies left out), in order."""


@dataclass(frozen=True)
class SplitDockerfile:
    """A Dockerfile of two stages: ``deps`` (the dependencies, no project code) and the code stage
    ``FROM ${DEPS_IMAGE}`` on top of it. Each half is built as a Dockerfile of its own: the preamble (the global
    ``ARG`` lines and comments before the first ``FROM``) followed by the stage."""

    path: str
    preamble: str
    deps: DockerfileStage
    code: DockerfileStage

    def deps_dockerfile(self) -> str:
        return self.preamble + self.deps.text

    def code_dockerfile(self) -> str:
        return self.preamble + self.code.text


def _logical_instructions(lines: Sequence[str]) -> list[tuple[int, str, str]]:
    """``(first line index, INSTRUCTION, arguments)`` of each instruction, continuation lines joined."""
    out: list[tuple[int, str, str]] = []
    current, first = "", -1
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if first < 0:
            first = i
        current += " " + stripped.removesuffix("\\").strip()
        if not stripped.endswith("\\"):
            word, _, rest = current.strip().partition(" ")
            out.append((first, word.upper(), rest.strip()))
            current, first = "", -1
    return out


def copy_sources(instruction: str, args: str, where: str) -> list[str]:
    """Build-context sources of one ``COPY``/``ADD`` (``[]`` for ``COPY --from=...``).

    Args:
        instruction: ``COPY`` or ``ADD``.
        args: Its arguments, shell form (``--chown=1:1 a b dest/``) or JSON form (``["a", "dest/"]``).
        where: ``<Dockerfile>: <instruction>`` for error messages.
    Raises:
        ImageBuildError: A source is a URL, a glob or leaves the build context (the input hash could not cover
            it: name the files plainly).
    """
    import shlex

    words = shlex.split(args)
    flags = [w for w in words if w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        return []
    rest = " ".join(w for w in words if not w.startswith("--")) if not args.lstrip().startswith("[") else None
    items = json.loads(args[args.index("["):]) if rest is None else shlex.split(rest)
    if len(items) < 2:
        raise ImageBuildError(f"{where}: {instruction} needs a source and a destination")
    sources = [str(s) for s in items[:-1]]
    for src in sources:
        if "://" in src or any(c in src for c in "*?[") or ".." in Path(src).parts or src.startswith("/"):
            raise ImageBuildError(f"{where}: {instruction} source {src!r} is a URL, a glob or outside the build "
                                  "context; the image's input hash covers only plain paths in the repository, so "
                                  "name the files or folders plainly")
    return sources


def parse_dockerfile(text: str, path: str = "Dockerfile") -> list[tuple[str, DockerfileStage]]:
    """Split a Dockerfile into its preamble and stages: ``[("", preamble-as-stage), (name, stage), ...]``.

    The first element is a pseudo stage holding the text before the first ``FROM`` (its base is "").
    Raises:
        ImageBuildError: The file has no ``FROM``, or a ``COPY``/``ADD`` source cannot be hashed.
    """
    lines = text.splitlines(keepends=True)
    instructions = _logical_instructions(lines)
    starts = [i for i, word, _ in instructions if word == "FROM"]
    if not starts:
        raise ImageBuildError(f"{path}: no FROM instruction")
    bounds = [0, *starts, len(lines)]
    stages: list[tuple[str, DockerfileStage]] = []
    for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        body = [(word, args) for i, word, args in instructions if lo <= i < hi]
        base = name = ""
        if k > 0:  # a stage (k = 0 is the preamble)
            words = body[0][1].split()
            base = words[0]
            if len(words) == 3 and words[1].upper() == "AS":
                name = words[2]
        sources = tuple(s for word, args in body if word in ("COPY", "ADD")
                        for s in copy_sources(word, args, f"{path}: {word} {args[:60]}"))
        stages.append((name, DockerfileStage(name, base, "".join(lines[lo:hi]), sources)))
    return stages


def split_dockerfile(path: str, repo: Path = REPO) -> SplitDockerfile:
    """Read ``repo/path`` as a :class:`SplitDockerfile`.

    Raises:
        ImageBuildError: The file is not ``<preamble> FROM ... AS deps ... FROM ${DEPS_IMAGE} ...`` (the message
            says what to change), or a source cannot be hashed.
    """
    stages = parse_dockerfile((repo / path).read_text(), path)
    (_, preamble), body = stages[0], stages[1:]
    if preamble.sources or len(body) != 2 or body[0][0] != DEPS_STAGE or body[1][1].base != f"${{{DEPS_ARGUMENT}}}":
        found = ", ".join(f"FROM {s.base}" + (f" AS {n}" if n else "") for n, s in body)
        raise ImageBuildError(f"{path}: expected two stages, `FROM <base> AS {DEPS_STAGE}` (dependencies only) and "
                              f"`FROM ${{{DEPS_ARGUMENT}}}` (the code, with `ARG {DEPS_ARGUMENT}={DEPS_STAGE}` "
                              f"before the first FROM); found {found}")
    if f"ARG {DEPS_ARGUMENT}=" not in preamble.text:
        raise ImageBuildError(f"{path}: add `ARG {DEPS_ARGUMENT}={DEPS_STAGE}` before the first FROM")
    return SplitDockerfile(path, preamble.text, body[0][1], body[1][1])


def _context_files(repo: Path, sources: Iterable[str]) -> list[Path]:
    """Files and symlinks under ``sources`` (paths relative to ``repo``), sorted, without bytecode caches.

    Raises:
        ImageBuildError: A source does not exist.
    """
    out: list[Path] = []
    for top in dict.fromkeys(s.rstrip("/") or "." for s in sources):
        path = repo / top
        if path.is_file() or path.is_symlink():
            out.append(path)
            continue
        if not path.is_dir():
            raise ImageBuildError(f"{top} is copied into an image but does not exist in {repo}")
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info"))
            here = Path(dirpath)
            for d in dirnames:  # symlinked directories (src/modalscale/operator -> ../../operator) are entries
                if (here / d).is_symlink():
                    out.append(here / d)
            out += [here / f for f in sorted(filenames) if not f.endswith((".pyc", ".pyo"))]
    return sorted(set(out))


def context_digest(repo: Path, sources: Iterable[str]) -> str:
    """sha256 over the relative path and the content (or symlink target) of every file under ``sources``
    (the ``COPY``/``ADD`` sources of a stage), bytecode caches left out as the .dockerignore files do."""
    parts: list[bytes] = []
    for path in _context_files(repo, sources):
        parts.append(str(path.relative_to(repo)).encode())
        parts.append(b"L" + os.readlink(path).encode() if path.is_symlink() else b"F" + path.read_bytes())
    return _digest(parts)


def all_copy_sources(repo: Path = REPO) -> list[str]:
    """Every build-context path a Dockerfile of :func:`image_definitions` copies, in first-seen order."""
    out: dict[str, None] = {}
    for defn in image_definitions(repo).values():
        split = split_dockerfile(defn.dockerfile, repo)
        out.update(dict.fromkeys(split.deps.sources + split.code.sources))
    return list(out)


def stage_context(repo: Path, dest: Path, sources: Iterable[str] | None = None) -> Path:
    """Copy ``sources`` (default: :func:`all_copy_sources`; symlinks kept, bytecode left out) into ``dest``."""
    files = _context_files(repo, all_copy_sources(repo) if sources is None else sources)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for path in files:
        target = dest / path.relative_to(repo)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            target.symlink_to(os.readlink(path))
        else:
            shutil.copy2(path, target)
    return dest


# ---------------------------------------------------------------------------------------------- wheels
def dependency_pins(root: str = "modalscale", extras: Sequence[str] = (), cpu_only: bool = True) -> dict[str, str]:
    """Exact versions of ``root[extras]``'s dependency closure as installed in the running interpreter.

    Args:
        root: Distribution whose requirements are followed (itself left out of the result).
        extras: Extras of ``root`` whose requirements are included (markers evaluated per extra).
        cpu_only: Leave out :data:`CPU_EXCLUDED_DISTRIBUTIONS` (and what only they require).
    Returns:
        Canonical distribution name -> installed version, sorted by name.
    Raises:
        ImageBuildError: A required distribution is not installed (the .venv lacks an extra: run
            scripts/env.sh's ensure_venv).
    """
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    queue: list[tuple[str, tuple[str, ...]]] = [(root, tuple(extras))]
    seen: set[tuple[str, tuple[str, ...]]] = set()
    while queue:
        name, wanted = queue.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise ImageBuildError(f"{name} is required by modalscale{list(extras) or ''} but not installed in "
                                  f"{sys.prefix}; run scripts/env.sh's ensure_venv") from None
        if canonicalize_name(name) != canonicalize_name(root):
            pins[canonicalize_name(dist.metadata["Name"])] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in (*wanted, "")):
                continue
            dep = canonicalize_name(req.name)
            if cpu_only and CPU_EXCLUDED_DISTRIBUTIONS.match(dep):
                continue
            queue.append((dep, tuple(sorted(req.extras))))
    return dict(sorted(pins.items()))


def build_requirements(repo: Path = REPO) -> list[str]:
    """The PEP 518 build requirements of modalscale: ``[build-system] requires`` of ``repo``'s pyproject.toml.

    Returns:
        The requirement strings as written (``["setuptools>=77", "wheel"]``), in file order.
    Raises:
        ImageBuildError: pyproject.toml has no ``[build-system] requires`` list of strings.
    """
    path = repo / "pyproject.toml"
    requires = tomllib.loads(path.read_text()).get("build-system", {}).get("requires")
    if not isinstance(requires, list) or not requires or not all(isinstance(r, str) for r in requires):
        raise ImageBuildError(f"{path}: [build-system] requires must be a non-empty list of requirement strings "
                              f"(got {requires!r}); the image's offline `pip install .` builds from it")
    return list(requires)


def wheelhouse_key(pins: dict[str, str]) -> str:
    return _digest([f"{k}=={v}".encode() for k, v in sorted(pins.items())] + [RECIPE_VERSION.encode()])[:16]


def _wheelhouse_dir(pins: dict[str, str], root: Path, build: Sequence[str]) -> Path:
    """Where :func:`ensure_wheelhouse` keeps the wheelhouse of ``pins`` and the build requirements ``build``
    (:func:`build_requirements`)."""
    return root / "wheels" / wheelhouse_key({**pins, **{f"build:{r}": "" for r in build}})


def ensure_wheelhouse(pins: dict[str, str], log: Log, root: Path | None = None, repo: Path = REPO) -> Path:
    """A directory with one wheel per pin, the build requirements and ``requirements.txt`` (the pins).

    ``pip wheel --no-deps`` downloads each pinned wheel (from pip's cache when there) or builds it from its
    sdist. The build requirements (:func:`build_requirements`, from ``repo``'s pyproject.toml) are resolved by
    ``pip wheel`` with their dependencies (``wheel`` needs ``packaging``), newest satisfying version, whatever the
    running environment has installed. Made once per set of pins and build requirements under
    ``images/wheels/<key>/``.

    Args:
        pins: Canonical distribution name -> exact version (:func:`dependency_pins`); may be empty.
        root: The images cache directory (default :func:`images_dir`).
        repo: The repository whose pyproject.toml names the build requirements.
    Raises:
        ImageBuildError: pip failed (message with its output tail), or pyproject.toml has no build requirements.
    """
    root = root or images_dir()
    build = build_requirements(repo)
    house = _wheelhouse_dir(pins, root, build)
    key = house.name
    if (house / ".complete").is_file():
        return house
    tmp = house.with_name(key + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    requirements = [f"{k}=={v}" for k, v in pins.items()]
    (tmp / "requirements.txt").write_text("\n".join(requirements) + "\n")
    started = time.monotonic()
    log(f"Fetching {len(requirements)} pinned wheels and the build requirements {', '.join(build)} into {house}")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--wheel-dir",
                 str(tmp)]
    if requirements:
        _run([*pip_wheel, "--no-deps", *requirements], log, quiet=True)
    _run([*pip_wheel, *build], log, quiet=True)
    size = sum(p.stat().st_size for p in tmp.glob("*.whl"))
    log(f"Wheelhouse ready: {len(list(tmp.glob('*.whl')))} wheels, {size / 1e6:.0f} MB, "
        f"{time.monotonic() - started:.1f} s")
    (tmp / ".complete").write_text("")
    shutil.rmtree(house, ignore_errors=True)
    tmp.rename(house)
    return house


# ---------------------------------------------------------------------------------------------- base
def ensure_base(log: Log, root: Path | None = None) -> str:
    """The Debian bookworm + Python 3.11 base image in the private store (debootstrap on first use).

    Returns:
        Its name (:func:`base_reference`).
    Raises:
        ImageBuildError: debootstrap or buildah failed.
    """
    root = root or images_dir()
    ref = base_reference()
    if _image_exists(ref):
        return ref
    started = time.monotonic()
    work = root / "base-build"
    shutil.rmtree(work, ignore_errors=True)
    rootfs = work / "rootfs"
    work.mkdir(parents=True)
    log(f"Building the base rootfs: debootstrap {DEBIAN_SUITE} minbase + {', '.join(BASE_PACKAGES)}")
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", DEBIAN_SUITE, str(rootfs),
          DEBIAN_MIRROR], log)
    for junk in ("var/lib/apt/lists", "var/cache/apt", "var/log", "tmp", "dev"):
        shutil.rmtree(rootfs / junk, ignore_errors=True)
        (rootfs / junk).mkdir(parents=True, exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    archive = work / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        for entry in sorted(rootfs.iterdir()):
            tar.add(entry, arcname=entry.name)
    buildah = buildah_command(root)
    container = _run([*buildah, "from", "scratch"], log).strip()
    try:
        _run([*buildah, "add", container, str(archive), "/"], log)
        _run([*buildah, "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              "--env", "LANG=C.UTF-8", "--cmd", "/bin/bash", "--label",
              f"org.opencontainers.image.description=Debian {DEBIAN_SUITE} minbase + {' '.join(BASE_PACKAGES)}",
              container], log)
        _run([*buildah, "commit", "--rm", container, ref], log)
    except ImageBuildError:
        subprocess.run([*buildah, "rm", container], capture_output=True, check=False)
        raise
    shutil.rmtree(work, ignore_errors=True)
    log(f"Base image {ref} built in {time.monotonic() - started:.1f} s")
    return ref


# ---------------------------------------------------------------------------------------------- images
WHEELS_MOUNT = "/wheels"
"""Where the wheelhouse is mounted (read-only) during both stages' builds."""


def _pip_offline_args() -> dict[str, str]:
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": WHEELS_MOUNT}


def deps_repository(defn: ImageDefinition) -> str:
    """Repository of ``defn``'s dependencies image in the private store (tagged by its deps hash)."""
    return f"localhost/modalscale/{defn.name}-deps"


@dataclass(frozen=True)
class ImageInputs:
    """The two input hashes of an image (16 hex digits each) and what they were taken over."""

    split: SplitDockerfile
    deps_hash: str
    """Over the deps stage's instructions, its build arguments (the base image's name, which carries the base's
    key), the wheel pins mounted at /wheels and the files the deps stage copies."""
    deps_ref: str
    """``localhost/modalscale/<name>-deps:<deps_hash>``."""
    deps_args: dict[str, str]
    code_hash: str
    """Over the deps hash, the code stage's instructions, its build arguments, the image's name and the files the
    code stage copies: the image's cache key."""
    code_args: dict[str, str]


def _instructions_digest(text: str) -> bytes:
    """The instructions of a Dockerfile text (continuations joined, comments and blank lines left out)."""
    return json.dumps([[w, a] for _, w, a in _logical_instructions(text.splitlines())]).encode()


def image_inputs(defn: ImageDefinition, repo: Path, pins: dict[str, str]) -> ImageInputs:
    """Hash what each half of ``defn`` is built from, and only that (a README, tests/ or benchmarks/ edit changes
    neither hash; a comment in a Dockerfile neither; a file a ``COPY`` names changes the hash of its stage).

    Raises:
        ImageBuildError: The Dockerfile is not split into deps and code stages, or a copied path is missing.
    """
    split = split_dockerfile(defn.dockerfile, repo)
    deps_args = {defn.base_argument: base_reference(), **_pip_offline_args()}
    deps_hash = _digest([RECIPE_VERSION.encode(), b"deps", defn.name.encode(),
                         _instructions_digest(split.deps_dockerfile()),
                         json.dumps(deps_args, sort_keys=True).encode(),
                         json.dumps(pins, sort_keys=True).encode(),
                         context_digest(repo, split.deps.sources).encode()])[:16]
    deps_ref = f"{deps_repository(defn)}:{deps_hash}"
    code_args = {DEPS_ARGUMENT: deps_ref, **_pip_offline_args()}
    code_hash = _digest([RECIPE_VERSION.encode(), b"code", defn.name.encode(), defn.ref.encode(), deps_hash.encode(),
                         _instructions_digest(split.code_dockerfile()),
                         json.dumps(code_args, sort_keys=True).encode(),
                         context_digest(repo, split.code.sources).encode()])[:16]
    return ImageInputs(split, deps_hash, deps_ref, deps_args, code_hash, code_args)


def input_hash(defn: ImageDefinition, repo: Path, pins: dict[str, str]) -> str:
    """The image's cache key: :attr:`ImageInputs.code_hash` (16 hex digits)."""
    return image_inputs(defn, repo, pins).code_hash


def _record_path(root: Path, name: str, digest: str) -> Path:
    return root / f"{name}-{digest}.json"


def archive_manifest(archive: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(manifest, config) of the single image in an OCI archive."""
    with tarfile.open(archive) as tar:
        def blob(digest: str) -> dict[str, Any]:
            algo, _, hexd = digest.partition(":")
            fh = tar.extractfile(f"blobs/{algo}/{hexd}")
            assert fh is not None
            return json.loads(fh.read())

        index_fh = tar.extractfile("index.json")
        assert index_fh is not None
        index = json.loads(index_fh.read())
        manifest = blob(index["manifests"][0]["digest"])
        return manifest, blob(manifest["config"]["digest"])


def archive_size_bytes(archive: Path) -> int:
    """Sum of the layer sizes of the image in ``archive`` (as stored: buildah gzips them)."""
    manifest, _ = archive_manifest(archive)
    return sum(int(layer["size"]) for layer in manifest["layers"])


def archive_paths(archive: Path) -> set[str]:
    """Every path in the image's layers (relative, without a leading ``./`` or ``/``)."""
    manifest, _ = archive_manifest(archive)
    paths: set[str] = set()
    with tarfile.open(archive) as outer:
        for layer in manifest["layers"]:
            algo, _, hexd = layer["digest"].partition(":")
            fh = outer.extractfile(f"blobs/{algo}/{hexd}")
            assert fh is not None
            with tarfile.open(fileobj=fh, mode="r|*") as inner:
                for member in inner:
                    paths.add(member.name.removeprefix("./").lstrip("/"))
    return paths


def unpack_archive(archive: Path, rootfs: Path) -> dict[str, Any]:
    """Unpack the image in an OCI archive into ``rootfs`` (layers in order, OCI whiteouts applied).

    For running an image without a container engine (``runc`` with a bundle, or ``chroot``), e.g. in tests;
    :func:`modalscale.devenv.image_rootfs.mounted_rootfs` gives the same tree without unpacking the unchanged
    layers again.

    Returns:
        The image config (``config`` of the OCI image config: User, Env, Entrypoint, Cmd, ...).
    Raises:
        ImageBuildError: A layer member would land outside ``rootfs``.
    """
    manifest, config = archive_manifest(archive)
    unpack_layers(archive, manifest["layers"], rootfs)
    return dict(config.get("config") or {})


def unpack_layers(archive: Path, layers: Sequence[dict[str, Any]], rootfs: Path,
                  overlay_below: Path | None = None) -> None:
    """Unpack ``layers`` (manifest entries) of the OCI archive into ``rootfs``, in order.

    Args:
        overlay_below: The tree of the earlier layers, for ``rootfs`` to be an overlay's upper layer above it:
            OCI whiteouts are then written as overlayfs does (``.wh.<name>`` as a 0/0 character device where that
            tree has ``<name>``, ``.wh..wh..opq`` as the ``trusted.overlay.opaque`` attribute on its directory), a
            directory the layer does not list but needs is made with that tree's mode and owner (overlayfs shows the
            upper one's), and a hard link to a file only in that tree links to a copy of it (copy-up). Without it
            whiteouts are applied (what they name is removed).
    Raises:
        ImageBuildError: A layer member would land outside ``rootfs``.
    """
    rootfs.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as outer:
        for layer in layers:
            algo, _, hexd = layer["digest"].partition(":")
            fh = outer.extractfile(f"blobs/{algo}/{hexd}")
            assert fh is not None
            with tarfile.open(fileobj=fh, mode="r|*") as inner:
                for member in inner:
                    name = member.name.removeprefix("./").lstrip("/")
                    if not name or name == ".":
                        continue
                    if ".." in Path(name).parts:
                        raise ImageBuildError(f"{archive}: layer member {member.name!r} escapes the rootfs")
                    parent, base = os.path.split(name)
                    if base.startswith(".wh."):
                        _whiteout(rootfs, parent, base, overlay_below)
                        continue
                    if overlay_below is not None:
                        _upper_parents(rootfs, parent, overlay_below)
                        if member.islnk():
                            _copy_up(rootfs, member.linkname.removeprefix("./").lstrip("/"), overlay_below)
                    target = rootfs / name
                    if (target.exists() or target.is_symlink()) and not (member.isdir() and target.is_dir()):
                        shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
                    member.name = name
                    inner.extract(member, rootfs, set_attrs=True, numeric_owner=True, filter="fully_trusted")


def _upper_parents(rootfs: Path, parent: str, below: Path) -> None:
    """Make the missing directories of ``rootfs/parent``, each with the mode and owner of the same directory in
    ``below`` where it is one there (else as ``mkdir`` makes it)."""
    path = rootfs
    for part in Path(parent).parts:
        path = path / part
        if os.path.lexists(path):
            continue
        path.mkdir()
        try:
            st = (below / path.relative_to(rootfs)).lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            os.chown(path, st.st_uid, st.st_gid)
            os.chmod(path, stat.S_IMODE(st.st_mode))


def _copy_up(rootfs: Path, link: str, below: Path) -> None:
    """Copy ``below/link`` to ``rootfs/link`` (contents, mode, owner) unless ``rootfs`` has it: a hard link of the
    upper layer cannot link across the overlay's layers."""
    source, copy = below / link, rootfs / link
    if os.path.lexists(copy) or not os.path.lexists(source):
        return
    _upper_parents(rootfs, os.path.dirname(link), below)
    shutil.copy2(source, copy, follow_symlinks=False)
    st = source.lstat()
    os.lchown(copy, st.st_uid, st.st_gid)


def _whiteout(rootfs: Path, parent: str, base: str, below: Path | None) -> None:
    """The OCI whiteout ``base`` (``.wh.<name>``, or ``.wh..wh..opq`` for the whole directory) in ``rootfs/parent``
    (as an overlay's upper layer over ``below``, when given: see :func:`unpack_layers`)."""
    directory = rootfs / parent
    if base == ".wh..wh..opq":
        if below is not None:
            if os.path.lexists(directory) or (below / parent).is_dir():
                _upper_parents(rootfs, parent, below)
                os.setxattr(directory, "trusted.overlay.opaque", b"y")
            return
        for child in directory.iterdir() if directory.is_dir() else []:
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        return
    gone = directory / base[len(".wh."):]
    if gone.is_dir() and not gone.is_symlink():
        shutil.rmtree(gone)
    elif gone.exists() or gone.is_symlink():
        gone.unlink()
    if below is not None and os.path.lexists(below / parent / base[len(".wh."):]):
        _upper_parents(rootfs, parent, below)
        os.mknod(gone, 0o600 | stat.S_IFCHR, os.makedev(0, 0))


def _bud(buildah: list[str], root: Path, label: str, dockerfile_text: str, sources: Sequence[str], tag: str,
         args: dict[str, str], house: Path, repo: Path, log: Log) -> None:
    """``buildah bud`` of one Dockerfile text in a context holding only ``sources``, squashed into one new layer
    on top of its ``FROM`` image, with the wheelhouse at :data:`WHEELS_MOUNT`; tagged ``tag``."""
    context = stage_context(repo, root / "context" / label, sources)
    dockerfile = root / "context" / f"{label}.Dockerfile"
    dockerfile.write_text(dockerfile_text)
    build_args = [a for k, v in args.items() for a in ("--build-arg", f"{k}={v}")]
    try:
        _run([*buildah, "bud", "--isolation", "chroot", "--pull=never", "--layers=false", "--identity-label=false",
              "-f", str(dockerfile), "-t", tag, *build_args, "--volume", f"{house}:{WHEELS_MOUNT}:ro", str(context)],
             log)
    finally:
        shutil.rmtree(context, ignore_errors=True)
        dockerfile.unlink(missing_ok=True)


def _store_names(prefix: str) -> list[str]:
    """Names in the private store that start with ``prefix``."""
    proc = subprocess.run([*buildah_command(), "images", "--json"], capture_output=True, text=True, check=False)
    try:
        images = json.loads(proc.stdout or "[]")
    except ValueError:
        return []
    return [n for image in images for n in image.get("names") or [] if n.startswith(prefix)]


def archive_layers(archive: Path) -> list[tuple[str, int]]:
    """``(digest, size)`` of each layer of the image in ``archive``, base first."""
    manifest, _ = archive_manifest(archive)
    return [(str(layer["digest"]), int(layer["size"])) for layer in manifest["layers"]]


def build_image(defn: ImageDefinition, log: Log, repo: Path = REPO, force: bool = False) -> BuiltImage:
    """Build ``defn`` into ``images/<name>-<hash>.oci.tar`` unless that archive already exists.

    Two builds, each squashed into one layer: the Dockerfile's deps stage into the dependencies image
    ``localhost/modalscale/<name>-deps:<deps hash>`` (kept in the private store, built only when its inputs
    change), then the code stage ``FROM`` that image. The archive holds three layers (base, deps, code);
    ``buildah push`` compresses each the same way every time, so an unchanged deps layer keeps its digest and
    an import into a containerd that holds the previous build only writes the new code layer.

    Args:
        force: Rebuild the deps image and the image even when their inputs did not change.
    Returns:
        The archive, its size and the seconds each step took (``cached`` when nothing was built).
    Raises:
        ImageBuildError: A tool is missing, the Dockerfile is not split into deps/code stages, or a step failed.
    """
    root = images_dir()
    pins = dependency_pins("modalscale", defn.extras, defn.cpu_only)
    inputs = image_inputs(defn, repo, pins)
    digest = inputs.code_hash
    record = _record_path(root, defn.name, digest)

    def cached() -> BuiltImage | None:
        if record.is_file() and not force:
            data = json.loads(record.read_text())
            if Path(data["archive"]).is_file():
                return BuiltImage(**{"unpacked_bytes": 0, **data, "cached": True})
        return None

    if (hit := cached()) is not None:
        return hit
    check_tools()
    def waiting() -> None:
        log(f"Waiting for another process's image build to finish (the build lock of {root})")

    with build_lock(root, waiting):  # one image build at a time: the buildah store and caches are shared
        if (hit := cached()) is not None:  # built by another process while this one waited for the lock
            return hit
        started = time.monotonic()
        base = ensure_base(log, root)
        house = ensure_wheelhouse(pins, log, root, repo)
        buildah = buildah_command(root)
        # Working containers and untagged images of an interrupted build (the store is private, this build
        # holds its lock).
        subprocess.run([*buildah, "rm", "--all"], capture_output=True, check=False)
        subprocess.run([*buildah, "rmi", "--prune"], capture_output=True, check=False)
        deps_started = time.monotonic()
        deps_cached = _image_exists(inputs.deps_ref) and not force
        if not deps_cached:
            subprocess.run([*buildah, "rmi", inputs.deps_ref], capture_output=True, check=False)
            log(f"Building {inputs.deps_ref}: the {DEPS_STAGE} stage of {defn.dockerfile} on {base}")
            _bud(buildah, root, f"{defn.name}-deps", inputs.split.deps_dockerfile(), inputs.split.deps.sources,
                 inputs.deps_ref, inputs.deps_args, house, repo, log)
            for stale in _store_names(deps_repository(defn) + ":"):
                if stale != inputs.deps_ref:  # one deps image per name: older ones are only disk
                    subprocess.run([*buildah, "rmi", stale], capture_output=True, check=False)
        deps_s = round(time.monotonic() - deps_started, 1)
        log(f"Dependencies image {inputs.deps_ref} " + ("found in the store" if deps_cached else
                                                        f"built in {deps_s:.1f} s"))
        tag = f"localhost/{defn.ref}"
        code_started = time.monotonic()
        log(f"Building {defn.ref} from the code stage of {defn.dockerfile} (inputs {digest})")
        _bud(buildah, root, defn.name, inputs.split.code_dockerfile(), inputs.split.code.sources, tag,
             inputs.code_args, house, repo, log)
        code_s = round(time.monotonic() - code_started, 1)
        archive = root / f"{defn.name}-{digest}.oci.tar"
        tmp = archive.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        push_started = time.monotonic()
        # gzip level 1: a few GB of layers compress several times faster than at the default level.
        _run([*buildah, "push", "--compression-format", "gzip", "--compression-level", "1", tag,
              f"oci-archive:{tmp}:{full_reference(defn.ref)}"], log)
        tmp.rename(archive)
        push_s = round(time.monotonic() - push_started, 1)
        unpacked = _store_size_bytes(tag)
        # The archive is the product; the store keeps the base and the deps images (the code layer goes).
        subprocess.run([*buildah, "rmi", tag], capture_output=True, check=False)
        layers = archive_layers(archive)
        reused = -1
        for old in sorted(root.glob(f"{defn.name}-*.oci.tar"), key=lambda p: p.stat().st_mtime, reverse=True):
            if old == archive:
                continue
            if reused < 0:  # the newest previous build: what an import over it would not have to write again
                try:
                    previous = set(archive_layers(old))
                    reused = sum(size for layer, size in layers if (layer, size) in previous)
                except (OSError, KeyError, ValueError, tarfile.TarError):
                    reused = -1
            old.unlink()
            _record_path(root, defn.name, old.name[len(defn.name) + 1:].split(".")[0]).unlink(missing_ok=True)
        built = BuiltImage(name=defn.name, ref=defn.ref, full_ref=full_reference(defn.ref), archive=str(archive),
                           size_bytes=sum(size for _, size in layers), unpacked_bytes=unpacked, input_hash=digest,
                           build_s=round(time.monotonic() - started, 1), cached=False, deps_hash=inputs.deps_hash,
                           deps_cached=deps_cached, deps_build_s=0.0 if deps_cached else deps_s, code_build_s=code_s,
                           push_s=push_s, layer_sizes=[size for _, size in layers], reused_bytes=reused)
        log(f"{defn.ref}: deps {'cached' if deps_cached else f'{deps_s:.1f} s'}, code layer {code_s:.1f} s, push "
            f"{push_s:.1f} s; layers (gzip) " + " + ".join(f"{s / 1e6:.1f}" for s in built.layer_sizes) + " MB"
            + (f"; {reused / 1e6:.0f} MB of them identical to the previous archive" if reused >= 0 else ""))
        record.write_text(json.dumps({k: v for k, v in asdict(built).items() if k != "cached"}, indent=2))
        return built


def dependencies_cached(names: Sequence[str] | None = None, repo: Path = REPO) -> bool:
    """Whether building the named images (default: all of :func:`image_definitions`) would build no more than their
    code layers (seconds to about two minutes): each one's archive is cached, or its base image, its wheelhouse and
    its dependencies image are. False means a cold build (up to about 10 minutes), e.g. for ``scripts/test.sh`` to
    wait for the build before tests that would otherwise wait for it inside their time limit.

    Raises:
        ImageBuildError: An unknown name, or a Dockerfile that is not split into deps and code stages.
    """
    root, build = images_dir(), build_requirements(repo)
    for defn in _definitions(names, repo):
        pins = dependency_pins("modalscale", defn.extras, defn.cpu_only)
        inputs = image_inputs(defn, repo, pins)
        record = _record_path(root, defn.name, inputs.code_hash)
        if record.is_file() and Path(json.loads(record.read_text())["archive"]).is_file():
            continue
        if not (_wheelhouse_dir(pins, root, build) / ".complete").is_file():
            return False
        if not (_image_exists(base_reference()) and _image_exists(inputs.deps_ref)):
            return False
    return True


def build_images(names: Sequence[str] | None = None, log: Log = print, repo: Path = REPO,
                 force: bool = False) -> list[BuiltImage]:
    """Build (or find cached) the named images (default: all of :func:`image_definitions`), in order."""
    return [build_image(defn, log, repo, force) for defn in _definitions(names, repo)]


def _definitions(names: Sequence[str] | None, repo: Path) -> list[ImageDefinition]:
    """The named images' definitions in order (default: all of :func:`image_definitions`).

    Raises:
        ImageBuildError: An unknown name (the message lists the known ones).
    """
    defs = image_definitions(repo)
    unknown = [n for n in names or () if n not in defs]
    if unknown:
        raise ImageBuildError(f"unknown image {', '.join(unknown)}; choose from {', '.join(defs)}")
    return [defs[n] for n in (names or list(defs))]


# ---------------------------------------------------------------------------------------------- import
def archive_digest(archive: Path) -> str:
    """Digest of the image manifest in an OCI archive (what containerd records as the image's target).

    The archive's ``index.json`` may be named ``./index.json`` (``tar cf x.tar -C layout .``, how the real node's
    pause and busybox archives are made)."""
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        fh = tar.extractfile("index.json" if "index.json" in names else "./index.json")
        assert fh is not None
        return str(json.loads(fh.read())["manifests"][0]["digest"])


def imported_digest(workdir: Path, full_ref: str, address: Path | None = None) -> str | None:
    """Target digest of ``full_ref`` in the real node's containerd (``k8s.io`` namespace), None if absent.

    Args:
        address: The containerd socket of another real node than node 0 (:func:`realnode.node_addresses`).
    """
    from modalscale.devenv.realnode import ctr_command

    proc = subprocess.run([*ctr_command(workdir, address), "images", "ls", f"name=={full_ref}"],
                          capture_output=True, text=True, check=False)
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) < 2:
        return None
    fields = lines[1].split()
    return fields[2] if len(fields) > 2 and fields[0] == full_ref else None


def import_into_cluster(image: BuiltImage, workdir: Path | str | None = None, log: Log = print) -> float:
    """Load ``image`` into every real node of the local cluster at ``workdir`` under its full name: node 0's
    containerd and each other node's own (``cluster up --real-nodes N``; a pod of it may land on any of them).

    Skips a node whose containerd already holds that name at the archive's manifest digest.

    Returns:
        Seconds spent on all nodes (about 0 when it was already everywhere).
    Raises:
        ImageBuildError: The cluster has no running real node, or an import failed (the message names the node's
            socket).
    """
    from modalscale.devenv.cluster import default_workdir
    from modalscale.devenv.realnode import RealNodeError, containerd_address, import_image, node_addresses

    workdir = Path(getattr(workdir, "workdir", workdir) or default_workdir())
    if not containerd_address(workdir).exists():
        raise ImageBuildError(f"no real node runs in {workdir}: start one with `modalscale cluster up --real-node`")
    started = time.monotonic()
    archive = Path(image.archive)
    digest = archive_digest(archive)
    for address in node_addresses(workdir):
        if imported_digest(workdir, image.full_ref, address) == digest:
            continue
        try:
            import_image(workdir, archive, [image.ref], log=log, address=address)
        except RealNodeError as exc:
            raise ImageBuildError(f"importing {image.full_ref} into the containerd at {address}: {exc}") from exc
    return time.monotonic() - started
