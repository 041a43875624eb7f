"""The ``modalscale`` command line: one entry point, one module per subcommand.

Each subcommand module exposes ``add_parser(subparsers) -> None``; the parser it adds sets ``func`` to a
callable taking the parsed ``argparse.Namespace`` and returning an exit code. Modules are imported only
when their subcommand runs, so ``modalscale cluster`` does not import torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: subcommand name -> module that registers it.
SUBCOMMANDS: dict[str, str] = {
    "cluster": "modalscale.devenv.cluster_cli",
    "images": "modalscale.devenv.images_cli",
    "operator": "modalscale.operator.cli",
    "runtime": "modalscale.runtime.cli",
    "load": "modalscale.runtime.load_cli",
    "profile": "modalscale.profile_cli",
    "simulate": "modalscale.autoscaler.simulate_cli",
    "cost": "modalscale.operator.cost_cli",
    "demo": "modalscale.demo.cli",
}


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """Build the parser; only the subcommand named in ``argv`` (if any) is imported."""
    parser = argparse.ArgumentParser(prog="modalscale", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, module in SUBCOMMANDS.items():
        if wanted == name:
            importlib.import_module(module).add_parser(sub)
        else:
            sub.add_parser(name, help=f"(see `modalscale {name} --help`)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    return int(func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
