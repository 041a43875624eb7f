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
``pip wheel --no-deps`` fetches those pins (PyPI or pip's cache) into ``images/wheels/<key>/`` once.

Cache: an image is rebuilt only when the content hash of its inputs changes (Dockerfile, build arguments, the
files copied into it, the base key and the wheel pins); a second run with no change only hashes the inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from modalscale.devenv.binaries import build_lock, cache_dir

Log = Callable[[str], None]

REPO = Path(__file__).resolve().parents[3]
"""The repository root (the build context's source): ``src/modalscale/devenv`` -> three levels up."""

DEBIAN_SUITE = "bookworm"
"""Debian release of the base rootfs (Python 3.11, the same minor as the project's .venv)."""
DEBIAN_MIRROR = "http://deb.debian.org/debian"
"""Mirror debootstrap installs from."""
BASE_PACKAGES = ("python3", "python3-venv", "libpython3.11", "ca-certificates")
"""Packages added to debootstrap's minbase: the interpreter, venv + ensurepip, the shared libpython that
Triton's Python-backend stub links against, and CA certificates."""
RECIPE_VERSION = "1"
"""Bump when the build procedure changes in a way the hashed inputs do not show (invalidates every cache)."""
CONTEXT_PATHS = ("pyproject.toml", "README.md", "src", "operator", "autoscaler", "costmodel", "runtime")
"""What the Dockerfiles COPY (their .dockerignore files list the same); the build context is a copy of these."""
RUNTIME_CPU_REPOSITORY = "modalscale/runtime-cpu"
"""Repository of the CPU runtime image; its tag is the project version (pyproject.toml)."""
CPU_EXCLUDED_DISTRIBUTIONS = re.compile(r"^triton$")
"""Canonical distribution names left out of CPU images: the OpenAI Triton compiler (about 1 GB; torch uses it
only to compile GPU kernels and imports it lazily). The CUDA libraries (nvidia-*, through cuda-toolkit) stay:
PyPI's torch wheel is a CUDA build whose import loads cudart, cuBLAS, cuFFT, cuSPARSE, NCCL, ... even on CPU."""
BUILD_REQUIREMENTS = ("setuptools", "wheel")
"""Build backend of modalscale itself (pyproject [build-system]); pip builds the package offline from these."""


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
                                       "BASE_IMAGE", ("runtime",), cpu_only=True),
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


def _run(cmd: Sequence[str], log: Log, cwd: Path | None = None, env: dict[str, str] | None = None,
         quiet: bool = False) -> str:
    """Run ``cmd``; return its stdout. Raises ImageBuildError with the output tail on a non-zero exit."""
    if not quiet:
        log("$ " + " ".join(cmd))
    proc = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stdout[-3000:] + "\n" + proc.stderr[-4000:]).strip()
        raise ImageBuildError(f"{' '.join(cmd[:4])} ... exited {proc.returncode}:\n{tail}")
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


def _context_files(repo: Path) -> list[Path]:
    """Files and symlinks of :data:`CONTEXT_PATHS`, sorted, without bytecode caches."""
    out: list[Path] = []
    for top in CONTEXT_PATHS:
        path = repo / top
        if path.is_file() or path.is_symlink():
            out.append(path)
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info"))
            here = Path(dirpath)
            for d in dirnames:  # symlinked directories (src/modalscale/operator -> ../../operator) are entries
                if (here / d).is_symlink():
                    out.append(here / d)
            out += [here / f for f in sorted(filenames) if not f.endswith((".pyc", ".pyo"))]
    return sorted(out)


def context_digest(repo: Path = REPO) -> str:
    """sha256 over the relative path and the content (or symlink target) of every build-context file."""
    parts: list[bytes] = []
    for path in _context_files(repo):
        parts.append(str(path.relative_to(repo)).encode())
        parts.append(b"L" + os.readlink(path).encode() if path.is_symlink() else b"F" + path.read_bytes())
    return _digest(parts)


def stage_context(repo: Path, dest: Path) -> Path:
    """Copy :data:`CONTEXT_PATHS` (symlinks kept, bytecode left out) into ``dest``; returns ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for path in _context_files(repo):
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


def build_requirement_pins() -> dict[str, str]:
    """Installed versions of :data:`BUILD_REQUIREMENTS` (empty version: not installed, latest is fetched)."""
    from importlib import metadata

    out = {}
    for name in BUILD_REQUIREMENTS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = ""
    return out


def wheelhouse_key(pins: dict[str, str]) -> str:
    return _digest([f"{k}=={v}".encode() for k, v in sorted(pins.items())] + [RECIPE_VERSION.encode()])[:16]


def ensure_wheelhouse(pins: dict[str, str], log: Log, root: Path | None = None) -> Path:
    """A directory with one wheel per pin, the build requirements and ``requirements.txt`` (the pins).

    ``pip wheel --no-deps`` downloads each pinned wheel (from pip's cache when there) or builds it from its
    sdist. Made once per set of pins under ``images/wheels/<key>/``.

    Raises:
        ImageBuildError: pip failed (message with its output tail).
    """
    root = root or images_dir()
    build = build_requirement_pins()
    key = wheelhouse_key({**pins, **{f"build:{k}": v for k, v in build.items()}})
    house = root / "wheels" / key
    if (house / ".complete").is_file():
        return house
    tmp = house.with_name(key + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    requirements = [f"{k}=={v}" for k, v in pins.items()]
    (tmp / "requirements.txt").write_text("\n".join(requirements) + "\n")
    wanted = requirements + [f"{k}=={v}" if v else k for k, v in build.items()]
    started = time.monotonic()
    log(f"Fetching {len(wanted)} wheels into {house}")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp), *wanted], log,
         quiet=True)
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
def input_hash(defn: ImageDefinition, repo: Path, pins: dict[str, str]) -> str:
    """Content hash of everything an image is built from (16 hex digits)."""
    return _digest([RECIPE_VERSION.encode(), defn.name.encode(), defn.ref.encode(),
                    (repo / defn.dockerfile).read_bytes(), base_key().encode(),
                    json.dumps(pins, sort_keys=True).encode(),
                    json.dumps(build_requirement_pins(), sort_keys=True).encode(),
                    context_digest(repo).encode()])[:16]


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

    For running an image without a container engine (``runc`` with a bundle, or ``chroot``), e.g. in tests.

    Returns:
        The image config (``config`` of the OCI image config: User, Env, Entrypoint, Cmd, ...).
    Raises:
        ImageBuildError: A layer member would land outside ``rootfs``.
    """
    manifest, config = archive_manifest(archive)
    rootfs.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as outer:
        for layer in manifest["layers"]:
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
                    if base == ".wh..wh..opq":
                        target_dir = rootfs / parent
                        for child in target_dir.iterdir() if target_dir.is_dir() else []:
                            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
                        continue
                    if base.startswith(".wh."):
                        gone = rootfs / parent / base[len(".wh."):]
                        if gone.is_dir() and not gone.is_symlink():
                            shutil.rmtree(gone)
                        elif gone.exists() or gone.is_symlink():
                            gone.unlink()
                        continue
                    target = rootfs / name
                    if (target.exists() or target.is_symlink()) and not (member.isdir() and target.is_dir()):
                        shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
                    member.name = name
                    inner.extract(member, rootfs, set_attrs=True, numeric_owner=True, filter="fully_trusted")
    return dict(config.get("config") or {})


def build_image(defn: ImageDefinition, log: Log, repo: Path = REPO, force: bool = False) -> BuiltImage:
    """Build ``defn`` into ``images/<name>-<hash>.oci.tar`` unless that archive already exists.

    Returns:
        The archive, its size and the seconds the build took (``cached`` when nothing was built).
    Raises:
        ImageBuildError: A tool is missing or a step failed.
    """
    root = images_dir()
    pins = dependency_pins("modalscale", defn.extras, defn.cpu_only)
    digest = input_hash(defn, repo, pins)
    record = _record_path(root, defn.name, digest)
    if record.is_file() and not force:
        data = json.loads(record.read_text())
        if Path(data["archive"]).is_file():
            return BuiltImage(**{"unpacked_bytes": 0, **data, "cached": True})
    check_tools()
    with build_lock(root):  # one image build at a time: the buildah store and caches are shared
        started = time.monotonic()
        base = ensure_base(log, root)
        house = ensure_wheelhouse(pins, log, root)
        context = stage_context(repo, root / "context" / defn.name)
        shutil.copy2(repo / defn.dockerfile, context / defn.dockerfile)
        buildah = buildah_command(root)
        # Working containers of an interrupted build (the store is private and this build holds its lock).
        subprocess.run([*buildah, "rm", "--all"], capture_output=True, check=False)
        tag = f"localhost/{defn.ref}"
        log(f"Building {defn.ref} from {defn.dockerfile} (inputs {digest})")
        _run([*buildah, "bud", "--isolation", "chroot", "--pull=never", "--layers=false", "--identity-label=false",
              "-f", str(context / defn.dockerfile), "-t", tag,
              "--build-arg", f"{defn.base_argument}={base}",
              "--build-arg", "PIP_NO_INDEX=1", "--build-arg", "PIP_FIND_LINKS=/wheels",
              "--volume", f"{house}:/wheels:ro", str(context)], log)
        archive = root / f"{defn.name}-{digest}.oci.tar"
        tmp = archive.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        # gzip level 1: a few GB of layers compress several times faster than at the default level.
        _run([*buildah, "push", "--compression-format", "gzip", "--compression-level", "1", tag,
              f"oci-archive:{tmp}:{full_reference(defn.ref)}"], log)
        tmp.rename(archive)
        unpacked = _store_size_bytes(tag)
        # The archive is the product; the store keeps only the base (no dangling copies of big layers).
        subprocess.run([*buildah, "rmi", tag], capture_output=True, check=False)
        shutil.rmtree(context, ignore_errors=True)
        for old in root.glob(f"{defn.name}-*.oci.tar"):
            if old != archive:
                old.unlink()
                _record_path(root, defn.name, old.name[len(defn.name) + 1:].split(".")[0]).unlink(missing_ok=True)
        built = BuiltImage(name=defn.name, ref=defn.ref, full_ref=full_reference(defn.ref), archive=str(archive),
                           size_bytes=archive_size_bytes(archive), unpacked_bytes=unpacked, input_hash=digest,
                           build_s=round(time.monotonic() - started, 1), cached=False)
        record.write_text(json.dumps({k: v for k, v in asdict(built).items() if k != "cached"}, indent=2))
        return built


def build_images(names: Sequence[str] | None = None, log: Log = print, repo: Path = REPO,
                 force: bool = False) -> list[BuiltImage]:
    """Build (or find cached) the named images (default: all of :func:`image_definitions`), in order."""
    defs = image_definitions(repo)
    unknown = [n for n in names or () if n not in defs]
    if unknown:
        raise ImageBuildError(f"unknown image {', '.join(unknown)}; choose from {', '.join(defs)}")
    return [build_image(defs[n], log, repo, force) for n in (names or list(defs))]


# ---------------------------------------------------------------------------------------------- import
def archive_digest(archive: Path) -> str:
    """Digest of the image manifest in an OCI archive (what containerd records as the image's target)."""
    with tarfile.open(archive) as tar:
        fh = tar.extractfile("index.json")
        assert fh is not None
        return str(json.loads(fh.read())["manifests"][0]["digest"])


def imported_digest(workdir: Path, full_ref: str) -> str | None:
    """Target digest of ``full_ref`` in the real node's containerd (``k8s.io`` namespace), None if absent."""
    from modalscale.devenv.realnode import K8S_NAMESPACE, containerd_address

    proc = subprocess.run(["ctr", "--address", str(containerd_address(workdir)), "-n", K8S_NAMESPACE, "images",
                           "ls", f"name=={full_ref}"], capture_output=True, text=True, check=False)
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) < 2:
        return None
    fields = lines[1].split()
    return fields[2] if len(fields) > 2 and fields[0] == full_ref else None


def import_into_cluster(image: BuiltImage, workdir: Path | str | None = None, log: Log = print) -> float:
    """Load ``image`` into the real node of the local cluster at ``workdir`` under its full name.

    Skips the import when containerd already holds that name at the archive's manifest digest.

    Returns:
        Seconds spent (about 0 when it was already there).
    Raises:
        ImageBuildError: The cluster has no running real node, or the import failed.
    """
    from modalscale.devenv.cluster import default_workdir
    from modalscale.devenv.realnode import RealNodeError, containerd_address, import_image

    workdir = Path(getattr(workdir, "workdir", workdir) or default_workdir())
    if not containerd_address(workdir).exists():
        raise ImageBuildError(f"no real node runs in {workdir}: start one with `modalscale cluster up --real-node`")
    started = time.monotonic()
    archive = Path(image.archive)
    if imported_digest(workdir, image.full_ref) == archive_digest(archive):
        return time.monotonic() - started
    try:
        import_image(workdir, archive, [image.ref], log=log)
    except RealNodeError as exc:
        raise ImageBuildError(f"importing {image.full_ref}: {exc}") from exc
    return time.monotonic() - started
