"""``modalscale images build|import|list``: the project's container images, built here without a daemon."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from modalscale.devenv.checkout import NotACheckoutError, source_root
from modalscale.devenv.images import IMAGE_NAMES, ImageBuildError, build_images


def add_parser(sub: Any) -> None:
    """Register ``images`` and its subcommands on ``sub`` (an argparse subparsers action)."""
    names = IMAGE_NAMES  # not image_definitions(): it reads the checkout, and `--help` must work without one
    p = sub.add_parser("images", help="build the operator and CPU runtime images (buildah, no daemon) and load them")
    isub = p.add_subparsers(dest="images_command", metavar="ACTION", required=True)
    build = isub.add_parser("build", help="build (or find cached) the images and print each one's size")
    build.add_argument("names", nargs="*", metavar="NAME",
                       help=f"images to build (default: all of {', '.join(names)})")
    build.add_argument("--force", action="store_true", help="rebuild even when the inputs did not change")
    build.add_argument("--json", action="store_true", help="print the result as JSON")
    build.add_argument("--import", dest="load", action="store_true",
                       help="also import them into the running local cluster's containerd (see `images import`)")
    build.add_argument("--workdir", type=Path, default=None, help="cluster state directory for --import")
    build.set_defaults(func=_build)
    imp = isub.add_parser("import", help="build if needed, then import into the local cluster's real node")
    imp.add_argument("names", nargs="*", metavar="NAME", help=f"images to import (default: all of {', '.join(names)})")
    imp.add_argument("--workdir", type=Path, default=None,
                     help="cluster state directory (default: the default cluster)")
    imp.set_defaults(func=_import, load=True, force=False, json=False)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _build(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        source_root(f"modalscale images {args.images_command}")
    except NotACheckoutError as exc:
        _log(str(exc))
        return 2
    try:
        built = build_images(args.names or None, log=_log, force=args.force)
    except ImageBuildError as exc:
        _log(f"images build failed: {exc}")
        return 1
    if args.json:
        print(json.dumps([asdict(b) for b in built], indent=2))
    else:
        for b in built:
            how = "cached" if b.cached else (
                f"built in {b.build_s:.1f} s (deps " + ("cached" if b.deps_cached else f"{b.deps_build_s:.1f} s")
                + f", code {b.code_build_s:.1f} s, push {b.push_s:.1f} s)")
            print(f"{b.name:12} {b.full_ref:40} {b.unpacked_bytes / 1e6:6.0f} MB unpacked, "
                  f"{b.size_bytes / 1e6:6.0f} MB gzip  {how}  {b.archive}")
    _log(f"images build took {time.monotonic() - started:.1f} s")
    if args.load:
        return _load(built, args.workdir)
    return 0


def _import(args: argparse.Namespace) -> int:
    return _build(args)


def _load(built: list[Any], workdir: Path | None) -> int:
    from modalscale.devenv.images import import_into_cluster

    try:
        for b in built:
            seconds = import_into_cluster(b, workdir, log=_log)
            _log(f"Imported {b.full_ref} in {seconds:.1f} s")
    except ImageBuildError as exc:
        _log(f"images import failed: {exc}")
        return 1
    return 0
