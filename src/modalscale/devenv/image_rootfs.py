"""An image's root filesystem for a container run without an engine (``runc`` with a bundle, ``chroot``), without
unpacking its unchanged layers again.

The project's images are a base, a dependencies and a code layer (:mod:`modalscale.devenv.images`); only the code
layer changes with the code. :func:`mounted_rootfs` keeps the layers below the last one unpacked once in
``~/.cache/modalscale/images/rootfs/lower-<image>-<key>`` (the key is their digests), unpacks the last layer (a few
MB) into the caller's directory with its whiteouts as overlayfs writes them, and mounts that as the upper layer of an
overlay on the cached tree: the tree :func:`~modalscale.devenv.images.unpack_archive` writes, in about a second once
the lower layers are cached. It stays writable (``runc`` makes a container's mount points in it before it turns the
root read-only); what is written lands in the caller's directory and goes with it, never in the cache.
Unpacking the runtime image's 2.9 GB dependencies layer took 44 s of an idle machine (26 s user, 16 s system) and
up to 155 s in a test lane, every run. Where overlayfs cannot be used (not root, no overlay support, the mount
refused) the whole image is unpacked into the caller's directory as before.

Processes share the cache: each holds a shared ``flock`` on its tree's lock file from before it looks the tree up
until it has unmounted it, and a tree is removed (when the same image's dependencies change) only by a process that
can take that lock exclusively, after renaming it aside, so no tree is removed under a mount and none half removed
looks whole.
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
from typing import IO, Any

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


def lower_name(archive: Path, layers: list[dict[str, Any]]) -> str:
    """``lower-<image name>-<key>``: the image name from ``<name>-<hash>.oci.tar``, else the file name up to its
    first dot (pure)."""
    match = _ARCHIVE_NAME.fullmatch(archive.name)
    return f"{LOWER_PREFIX}{match['name'] if match else archive.name.split('.')[0]}-{lower_key(layers)}"


def overlay_usable() -> bool:
    """Whether this process can mount an overlay: root, and ``overlay`` in ``/proc/filesystems``."""
    try:
        return os.geteuid() == 0 and "\toverlay\n" in Path("/proc/filesystems").read_text()
    except OSError:
        return False


@contextlib.contextmanager
def mounted_rootfs(archive: Path, work: Path, log: Log = print) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The image in ``archive`` as a root filesystem, ``(rootfs, image config)``, until the block ends.

    Args:
        archive: An OCI archive of one image (``images/<name>-<hash>.oci.tar``).
        work: An empty or missing directory of the caller's: the last layer (the overlay's upper layer, which
            takes what is written), the overlay's work directory and the mount point (or the whole unpacked image)
            go there, and are removed at the end.
    Returns:
        The tree and the image config (``config`` of the OCI image config: User, Env, Entrypoint, ...).
    Raises:
        ImageBuildError: A layer member would land outside the tree.
    """
    manifest, config = archive_manifest(archive)
    layers, image_config = list(manifest["layers"]), dict(config.get("config") or {})
    rootfs, upper, scratch = work / "rootfs", work / "last-layer", work / "overlay-work"
    try:
        if len(layers) >= 2 and overlay_usable():
            root = rootfs_cache_dir()
            root.mkdir(parents=True, exist_ok=True)
            name = lower_name(archive, layers[:-1])
            with open(root / f"{name}.lock", "a") as held:
                fcntl.flock(held, fcntl.LOCK_SH)  # until unmounted: no other process removes the tree meanwhile
                lower = cached_lower(archive, layers[:-1], name, log)
                if _mount(archive, layers[-1], lower, upper, scratch, rootfs, log):
                    try:
                        yield rootfs, image_config
                    finally:
                        _unmount(rootfs)
                    return
        unpack_archive(archive, rootfs)
        yield rootfs, image_config
    finally:
        for path in (upper, scratch) if rootfs.is_mount() else (upper, scratch, rootfs):
            shutil.rmtree(path, ignore_errors=True)


def _mount(archive: Path, last: dict[str, Any], lower: Path, upper: Path, scratch: Path, rootfs: Path,
           log: Log) -> bool:
    """Unpack ``last`` into ``upper`` and mount the overlay of ``upper`` on ``lower`` at ``rootfs``; False (and
    ``upper`` removed) where that fails, for the caller to unpack the whole image instead."""
    try:
        unpack_layers(archive, [last], upper, overlay_below=lower)
        rootfs.mkdir(parents=True, exist_ok=True)
        scratch.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # e.g. no trusted.* attributes where the caller's directory lies
        log(f"cannot write the last layer as an overlay's upper layer ({exc}): unpacking the whole image")
        shutil.rmtree(upper, ignore_errors=True)
        return False
    proc = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                           f"lowerdir={lower},upperdir={upper},workdir={scratch}", str(rootfs)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        log(f"overlay mount refused ({proc.stderr.strip()}): unpacking the whole image into {rootfs}")
        shutil.rmtree(upper, ignore_errors=True)
        return False
    return True


def _unmount(rootfs: Path) -> None:
    if subprocess.run(["umount", str(rootfs)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", "-l", str(rootfs)], capture_output=True, check=False)


def cached_lower(archive: Path, layers: list[dict[str, Any]], name: str, log: Log = print) -> Path:
    """The tree of ``layers`` (the image's layers below its last one) as ``name`` under :func:`rootfs_cache_dir`,
    unpacked now if it is not there. The caller holds ``<name>.lock`` shared.

    Built under the cache's exclusive lock, in a temporary directory renamed into place when whole, so a process
    killed midway leaves no tree that looks complete. The same image's other trees that no process holds are removed
    then (each is GBs of disk; another image's stay).
    """
    root = rootfs_cache_dir()
    final = root / name
    if final.is_dir():
        return final
    with open(root / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir():
            return final
        _remove_unheld(root, name[:-16])
        tmp = root / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"unpacking the {len(layers)} lower layer(s) of {archive.name} into {final} (once per dependencies "
            f"change)")
        unpack_layers(archive, layers, tmp)
        tmp.rename(final)
    return final


def _remove_unheld(root: Path, prefix: str) -> None:
    """Remove the trees ``<prefix><key>`` under ``root`` whose lock no process holds, and the leftovers of
    interrupted builds and removals of them. The caller holds the cache's exclusive lock."""
    tree = re.compile(re.escape(prefix) + r"[0-9a-f]{16}")
    for path in list(root.iterdir()):
        if path.name.startswith((f".tmp-{prefix}", f".trash-{prefix}")):
            shutil.rmtree(path, ignore_errors=True)
        elif tree.fullmatch(path.name) and path.is_dir():
            with open(root / f"{path.name}.lock", "a") as fh:
                if not _try_exclusive(fh):
                    continue  # mounted (or about to be) by another process
                trash = root / f".trash-{path.name}-{os.getpid()}"
                path.rename(trash)
                shutil.rmtree(trash, ignore_errors=True)


def _try_exclusive(fh: IO[str]) -> bool:
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
