"""An image's root filesystem for a container run without an engine (``runc`` with a bundle, ``chroot``), without
unpacking its unchanged layers again.

The project's images are a base, a dependencies and a code layer (:mod:`modalscale.devenv.images`); only the code
layer changes with the code. :func:`mounted_rootfs` keeps the layers below the last one unpacked once in
``~/.cache/modalscale/images/rootfs/lower-<key>`` (the key is their digests), unpacks the last layer (a few MB) into
the caller's directory with its whiteouts as overlayfs writes them, and mounts that as the upper layer of an overlay
on the cached tree: the tree :func:`~modalscale.devenv.images.unpack_archive` writes, in about a second once the lower
layers are cached. It stays writable (``runc`` makes a container's mount points in it before it turns the root
read-only); what is written lands in the caller's directory and goes with it, never in the cache.
Unpacking the runtime image's 2.9 GB dependencies layer took 44 s of an idle machine (26 s user, 16 s system) and
up to 155 s in a test lane, every run. Where overlayfs cannot be mounted (not root, no overlay support) the whole
image is unpacked as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from modalscale.devenv.images import archive_manifest, images_dir, unpack_archive, unpack_layers

Log = Callable[[str], None]

LOWER_PREFIX = "lower-"
"""Name prefix of a cached lower tree under :func:`rootfs_cache_dir`: ``lower-<image name>-<key>``."""
_ARCHIVE_NAME = re.compile(r"(?P<name>.+)-[0-9a-f]{16}\.oci\.tar")
"""``images/<name>-<hash>.oci.tar`` (:func:`modalscale.devenv.images.build_image`)."""


def rootfs_cache_dir() -> Path:
    """Where the lower trees are kept: ``<images dir>/rootfs``."""
    return images_dir() / "rootfs"


def lower_key(layers: list[dict[str, Any]]) -> str:
    """The cache key of a stack of layers (manifest entries): 16 hex digits of the SHA-256 of their digests, in
    order (pure)."""
    return hashlib.sha256("\n".join(str(layer["digest"]) for layer in layers).encode()).hexdigest()[:16]


@contextlib.contextmanager
def mounted_rootfs(archive: Path, work: Path, log: Log = print) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The image in ``archive`` as a root filesystem, ``(rootfs, image config)``, until the block ends.

    Args:
        archive: An OCI archive of one image (``images/<name>-<hash>.oci.tar``).
        work: An empty or missing directory of the caller's: the last layer (the overlay's upper layer, which
            takes what is written), the overlay's work directory and the mount point go there, and are removed at
            the end.
    Returns:
        The mounted tree and the image config (``config`` of the OCI image config: User, Env, Entrypoint, ...).
    Raises:
        ImageBuildError: A layer member would land outside the tree.
    """
    manifest, config = archive_manifest(archive)
    layers = list(manifest["layers"])
    rootfs, upper, scratch = work / "rootfs", work / "last-layer", work / "overlay-work"
    if len(layers) < 2:
        unpack_archive(archive, rootfs)
        yield rootfs, dict(config.get("config") or {})
        return
    lower = cached_lower(archive, layers[:-1], log)
    unpack_layers(archive, layers[-1:], upper, overlay_below=lower)
    rootfs.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                           f"lowerdir={lower},upperdir={upper},workdir={scratch}", str(rootfs)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        log(f"overlay mount refused ({proc.stderr.strip()}): unpacking the whole image into {rootfs}")
        shutil.rmtree(upper, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
        unpack_archive(archive, rootfs)
        yield rootfs, dict(config.get("config") or {})
        return
    try:
        yield rootfs, dict(config.get("config") or {})
    finally:
        if subprocess.run(["umount", str(rootfs)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(rootfs)], capture_output=True, check=False)
        shutil.rmtree(upper, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def cached_lower(archive: Path, layers: list[dict[str, Any]], log: Log = print) -> Path:
    """The tree of ``layers`` (the image's layers below its last one) unpacked under :func:`rootfs_cache_dir`,
    unpacked now if it is not there; the same image's other lower trees that no mount uses are removed then (each
    is GBs of disk; another image's stay).

    Built under an exclusive lock, in a temporary directory renamed into place when whole, so a process killed
    midway leaves no tree that looks complete.
    """
    root = rootfs_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    match = _ARCHIVE_NAME.fullmatch(archive.name)
    prefix = f"{LOWER_PREFIX}{match['name'] if match else archive.name.split('.')[0]}-"
    final = root / f"{prefix}{lower_key(layers)}"
    if final.is_dir():
        return final
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir():
            return final
        in_use = mounted_lowers()
        for old in root.iterdir():
            if old != final and old.name.startswith((prefix, f".tmp-{prefix}")) and old not in in_use:
                shutil.rmtree(old, ignore_errors=True)
        tmp = root / f".tmp-{final.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"unpacking the {len(layers)} lower layer(s) of {archive.name} into {final} (once per dependencies "
            f"change)")
        unpack_layers(archive, layers, tmp)
        tmp.rename(final)
    return final


def mounted_lowers(mounts: Path = Path("/proc/self/mounts")) -> set[Path]:
    """The directories that a mounted overlay of this machine uses as a lower layer."""
    used: set[Path] = set()
    for line in mounts.read_text().splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] != "overlay":
            continue
        for option in fields[3].split(","):
            if option.startswith("lowerdir="):
                used.update(Path(p.replace("\\040", " ")) for p in option[len("lowerdir="):].split(":"))
    return used
