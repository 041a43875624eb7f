"""``mounted_rootfs``: an image's tree as an overlay of its cached lower layers and its last layer, the same tree
``unpack_archive`` writes (files, contents, modes, links, whiteouts and opaque directories), on a small OCI archive
made here. Needs root and overlayfs (the real node's containerd needs both too); skipped elsewhere."""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from modalscale.devenv.image_rootfs import lower_name, mounted_rootfs, overlay_usable, rootfs_cache_dir
from modalscale.devenv.images import unpack_archive

pytestmark = pytest.mark.skipif(not overlay_usable(), reason="mounting an overlay needs root and overlayfs")


def _layer(entries: list[tuple[str, bytes | None, int]]) -> bytes:
    """A gzip tar layer: ``(path, content or None for a directory, mode)``; ``link:<target>`` content is a
    symlink, ``hard:<target>`` a hard link; a directory ``tmp`` belongs to uid 1000."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, content, mode in entries:
            info = tarfile.TarInfo(path)
            info.mode, info.uid = mode, 1000 if path == "tmp" else 0
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif content.startswith((b"link:", b"hard:")):
                info.type = tarfile.SYMTYPE if content.startswith(b"link:") else tarfile.LNKTYPE
                info.linkname = content[5:].decode()
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return gzip.compress(raw.getvalue(), mtime=0)


def _archive(path: Path, layers: list[bytes]) -> Path:
    """An OCI archive of one image of ``layers``."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": f"sha256:{digest}", "size": len(data)}

    config = blob(json.dumps({"config": {"User": "1000:1000", "Env": ["PATH=/bin"]}, "rootfs": {
        "type": "layers", "diff_ids": []}}).encode())
    manifest = blob(json.dumps({"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                                               **config},
                                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **blob(layer)}
                                           for layer in layers]}).encode())
    index = json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                                           **manifest}]}).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in [("index.json", index), *((f"blobs/sha256/{d}", b) for d, b in blobs.items())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


BASE = _layer([("etc", None, 0o755), ("etc/os-release", b"debian\n", 0o644), ("bin", None, 0o755),
               ("bin/sh", b"#!shell\n", 0o755), ("opt", None, 0o755), ("opt/old", None, 0o755),
               ("opt/old/a.txt", b"a\n", 0o644), ("opt/keep", b"keep\n", 0o600), ("tmp", None, 0o1777)])
DEPS = _layer([("usr", None, 0o755), ("usr/lib", None, 0o755), ("usr/lib/big.so", b"\0" * 4096, 0o755),
               ("etc/.wh.os-release", b"", 0o644), ("cache", None, 0o755), ("cache/x", b"x\n", 0o644)])
CODE = _layer([("app", None, 0o755), ("app/main.py", b"print('hi')\n", 0o644), ("app/run", b"link:main.py", 0o777),
               ("usr/lib/.wh.big.so", b"", 0o644), ("cache/.wh..wh..opq", b"", 0o644), ("cache/y", b"y\n", 0o644),
               ("opt/.wh.old", b"", 0o644), ("usr/lib/.wh.never-there", b"", 0o644),
               ("tmp/made-by-code", b"t", 0o644),  # no "tmp" entry: the upper tmp must keep 1777 and uid 1000
               ("app/sh-again", b"hard:bin/sh", 0o755)])  # a hard link to a file of the base layer


def _tree(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``root``: (kind, permission bits, content or link target)."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = ("link", st.st_uid, os.readlink(p).encode())
            elif p.is_dir():
                out[rel] = ("dir", (st.st_mode & 0o7777) | st.st_uid << 16, b"")
            else:
                out[rel] = ("file", (st.st_mode & 0o7777) | st.st_uid << 16, p.read_bytes())
    return out


def test_the_mounted_tree_is_the_unpacked_tree_and_the_lower_layers_are_unpacked_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODALSCALE_CACHE_DIR", str(tmp_path / "cache"))
    archive = _archive(tmp_path / f"image-{1:016x}.oci.tar", [BASE, DEPS, CODE])
    expected = _tree_of_unpacked(archive, tmp_path / "unpacked")
    assert "etc/os-release" not in expected and "usr/lib/big.so" not in expected and "opt/old" not in expected
    assert expected["cache/y"][2] == b"y\n" and "cache/x" not in expected and expected["opt/keep"][1] == 0o600
    assert expected["tmp"][1] == 0o1777 | 1000 << 16 and expected["app/sh-again"][2] == b"#!shell\n"

    logs: list[str] = []
    with mounted_rootfs(archive, tmp_path / "first", log=logs.append) as (rootfs, config):
        assert _tree(rootfs) == expected
        assert config["User"] == "1000:1000"
        lower = rootfs_cache_dir() / lower_name(archive, _manifest_layers(archive)[:-1])
        (rootfs / "app" / "new").write_text("lands in the caller's directory")  # runc makes mount points
        (rootfs / "opt" / "keep").unlink()
        assert not list(lower.rglob("new")) and (lower / "opt" / "keep").is_file()
    assert len([m for m in logs if "unpacking" in m]) == 1, logs
    assert not (tmp_path / "first" / "rootfs").is_mount() and not (tmp_path / "first" / "last-layer").exists()
    other = _archive(tmp_path / f"other-{1:016x}.oci.tar", [BASE, CODE, CODE])  # another image's cache stays

    # A new code layer over the same lower layers: nothing below it is unpacked again.
    code2 = _layer([("app", None, 0o755), ("app/main.py", b"print('v2')\n", 0o644)])
    archive2 = _archive(tmp_path / f"image-{2:016x}.oci.tar", [BASE, DEPS, code2])
    with mounted_rootfs(archive2, tmp_path / "second", log=logs.append) as (rootfs, _):
        assert (rootfs / "app" / "main.py").read_bytes() == b"print('v2')\n"
        assert _tree(rootfs) == _tree_of_unpacked(archive2, tmp_path / "unpacked2")
    assert len([m for m in logs if "unpacking" in m]) == 1, logs

    with mounted_rootfs(other, tmp_path / "other", log=logs.append) as (rootfs, _):
        assert _tree(rootfs) == _tree_of_unpacked(other, tmp_path / "unpacked-other")

    # New dependencies: a new lower tree; the old one stays while another process holds it (its lock shared, as
    # a mount of it does), and goes at the next change once nobody does. Another image's tree stays.
    deps3 = _layer([("usr", None, 0o755), ("usr/lib", None, 0o755), ("usr/lib/other.so", b"o", 0o755)])
    archive3 = _archive(tmp_path / f"image-{3:016x}.oci.tar", [BASE, deps3, CODE])
    with open(lower.with_name(f"{lower.name}.lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_SH)
        with mounted_rootfs(archive3, tmp_path / "third", log=logs.append) as (rootfs, _):
            assert _tree(rootfs) == _tree_of_unpacked(archive3, tmp_path / "unpacked3")
    assert lower.is_dir()
    archive4 = _archive(tmp_path / f"image-{4:016x}.oci.tar", [BASE, _layer([("usr", None, 0o700)]), CODE])
    with mounted_rootfs(archive4, tmp_path / "fourth", log=logs.append) as (rootfs, _):
        assert _tree(rootfs) == _tree_of_unpacked(archive4, tmp_path / "unpacked4")
    cached = sorted(p.name for p in rootfs_cache_dir().iterdir() if p.is_dir())
    assert cached == [lower_name(archive4, _manifest_layers(archive4)[:-1]),
                      lower_name(other, _manifest_layers(other)[:-1])], cached
    assert not [p for p in tmp_path.glob("*/rootfs") if p.is_mount()]


def _tree_of_unpacked(archive: Path, where: Path) -> dict[str, tuple[str, int, bytes]]:
    unpack_archive(archive, where)
    return _tree(where)


def _manifest_layers(archive: Path) -> list[dict[str, object]]:
    from modalscale.devenv.images import archive_manifest

    return list(archive_manifest(archive)[0]["layers"])
