"""The ``modalscale`` command line: one entry point, one module per subcommand.

Each subcommand module exposes ``add_parser(subparsers) -> None``; the parser it adds sets ``func`` to a
callable taking the parsed ``argparse.Namespace`` and returning an exit code. Modules are imported only
when their subcommand runs, so ``modalscale cluster`` does not import torch.

Bad input exits 2 with one line on stderr, ``modalscale <command>: <flag or field>: <what is wrong; the fix>``,
never a traceback: a subcommand raises :class:`UsageError` (argparse's own errors also exit 2).
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


class UsageError(ValueError):
    """Bad input to a subcommand: :func:`main` prints ``modalscale <command>: <where>: <message>`` and exits 2.

    A ``ValueError``, so library callers of a command's helpers (``simulate_cli.load_trace``) that catch
    ``ValueError`` keep working.

    Args:
        where: The flag or field at fault (``--trace``, ``KUBECONFIG``).
        message: What is wrong and the fix, one line.
    """

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


def positive_finite(flag: str, value: float, example: str) -> float:
    """``value`` when it is > 0 and finite (a rate, a duration, a scale).

    Raises:
        UsageError: naming ``flag``, with ``example`` as the fix (``--rate-rps: -1 must be > 0 and finite; e.g. 5``).
    """
    if not (math.isfinite(value) and value > 0):
        raise UsageError(flag, f"{value:g} must be > 0 and finite; e.g. {example}")
    return value


def first_line(exc: BaseException) -> str:
    """An exception's message as one line for a :class:`UsageError`: its first line, without the quotes a
    ``KeyError`` adds; for a YAML error its problem and where (``not valid YAML: ... at line 5, column 1``); its
    type when it has no message."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is not None and problem:  # a yaml MarkedYAMLError: its first line ("while parsing ...") says nothing
        return f"not valid YAML: {problem} at line {mark.line + 1}, column {mark.column + 1}"
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return text.splitlines()[0] if text.strip() else type(exc).__name__


@contextmanager
def reading(flag: str, path: Path, what: str, otherwise: str = "") -> Iterator[None]:
    """Read ``path`` (given by ``flag``) inside this block: the reader's errors become one-line :class:`UsageError`
    naming ``flag``, with ``what`` to give instead (``a trace CSV``) and ``otherwise`` after a missing file's fix."""
    try:
        yield
    except UsageError:
        raise
    except FileNotFoundError:
        raise UsageError(flag, f"{path}: no such file; give {what}{otherwise}") from None
    except IsADirectoryError:
        raise UsageError(flag, f"{path} is a directory; give {what} file") from None
    except UnicodeDecodeError:
        raise UsageError(flag, f"{path} is not UTF-8 text; give {what}") from None
    except OSError as exc:
        raise UsageError(flag, f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # the readers' messages name the line and the column, most of them the file too
        message = first_line(exc)
        raise UsageError(flag, message if str(path) in message else f"{path}: {message}") from None


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
    "gateway": "modalscale.gateway.cli",
}

#: subcommand name -> its one-line summary in ``modalscale --help`` (the module is not imported for it); equal to
#: the ``help`` its module registers (a unit test says so).
SUMMARIES: dict[str, str] = {
    "cluster": "local control plane: etcd, apiserver, controller-manager, scheduler, KWOK",
    "images": "build the operator and CPU runtime images (buildah, no daemon) and load them",
    "operator": "run the operator (watches InferenceService and BudgetPolicy)",
    "runtime": "Serve the built-in multimodal model on tritonserver",
    "load": "Replay an arrival trace against the runtime and report latency",
    "profile": "Measure per-request service time on the real runtime and fit the autoscaler's service-time model",
    "simulate": "compare autoscaling policies on a request trace",
    "cost": "cost reports from BudgetPolicy ledgers",
    "demo": "local cluster with a real node: real pods, Prometheus, scaling and budget, live",
    "gateway": "run the request-path gateway of one InferenceService (KServe v2 HTTP and gRPC)",
}


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """Build the parser; only the subcommand named in ``argv`` (if any) is imported."""
    parser = argparse.ArgumentParser(
        prog="modalscale",
        description="Serve multimodal models on Triton, autoscale them and keep their spend inside budgets.",
        epilog="`modalscale COMMAND --help` lists a command's options.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, module in SUBCOMMANDS.items():
        if wanted == name:
            importlib.import_module(module).add_parser(sub)
        else:
            sub.add_parser(name, help=SUMMARIES[name])
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
    try:
        return int(func(args) or 0)
    except UsageError as exc:
        # The command as typed: `modalscale runtime render` (a nested command's dest ends in `_command`).
        nested = [v for k, v in vars(args).items() if k.endswith("_command") and isinstance(v, str)]
        print(f"{getattr(args, 'prog', None) or ' '.join(['modalscale', args.command, *nested])}: {exc}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    # `python -m modalscale.cli`: run the imported module's main, so this UsageError is the one commands raise.
    from modalscale.cli import main as _imported_main

    raise SystemExit(_imported_main())
