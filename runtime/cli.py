"""``modalscale runtime``: serve the built-in multimodal model on a real tritonserver, or render its repository.

``modalscale runtime serve [--from-isvc FILE.yaml] [optimization flags] [--http-port ...]`` writes the
generated model repository and runs ``tritonserver`` from the ``nvidia-pytriton`` wheel until SIGTERM or
SIGINT, which it forwards so that Triton drains in-flight requests before exiting.
``modalscale runtime render --out DIR`` only writes the repository.

A directory given to ``render --out`` or ``serve --model-repository`` ends up holding exactly this config's
models: Triton loads every model folder it finds, so one left by an earlier render with other flags would be
served too. A directory an earlier render wrote (it holds :data:`RENDER_MARKER`) is emptied first; a non-empty one
without the marker is refused (exit 2), never emptied.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from modalscale.api.errors import InvalidSpec
from modalscale.runtime.repo_config import (
    PRESETS,
    Engine,
    Precision,
    RuntimeConfig,
    Stage,
    build_repository,
    config_summary,
    from_configmap_data,
    preset_flags,
    served_model_name,
    server_arguments,
)

RENDER_MARKER = ".modalscale-repository"
"""File a render leaves in the repository's top folder (Triton loads only folders, so it is ignored there):
the folder's contents are ours to replace."""

#: CLI flag destination -> RuntimeConfig field, for flags that override the config.
_OVERRIDES = {
    "model_name": "model_name",
    "instance_count": "instance_count",
    "intra_op_threads": "intra_op_threads",
    "max_batch_size": "max_batch_size",
    "dynamic_batching": "dynamic_batching",
    "preferred_batch_sizes": "preferred_batch_sizes",
    "max_queue_delay_us": "max_queue_delay_microseconds",
    "modality_aware_batching": "modality_aware_batching",
    "response_cache": "response_cache",
    "embedding_cache": "embedding_cache",
    "precision": "precision",
    "engine": "engine",
    "image_int8_min_side_pixels": "image_int8_min_side_pixels",
    "cpu_cores": "cpu_cores",
    "stage": "stage",
    "image_encoder_url": "image_encoder_url",
}


def add_parser(subparsers: Any) -> None:
    """Register ``runtime`` with its ``serve`` and ``render`` subcommands."""
    parser = subparsers.add_parser("runtime", help="Serve the built-in multimodal model on tritonserver")
    sub = parser.add_subparsers(dest="runtime_command", metavar="SUBCOMMAND", required=True)

    serve = sub.add_parser("serve", help="Generate the model repository and run tritonserver in the foreground",
                           description="Generate the model repository and run tritonserver in the foreground.",
                           epilog=_presets_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_flags(serve)
    serve.add_argument("--host", default="127.0.0.1", help="Address to bind (0.0.0.0 inside a pod)")
    serve.add_argument("--http-port", type=int, default=8000)
    serve.add_argument("--grpc-port", type=int, default=8001)
    serve.add_argument("--metrics-port", type=int, default=8002)
    serve.add_argument("--model-repository", type=Path, default=None,
                       help="Directory to write the repository to (default: a new temporary directory)")
    serve.add_argument("--configmap-dir", type=Path, default=None,
                       help="Serve a repository mounted from a ConfigMap (flat files, '__' for '/') instead of "
                            "generating one; the optimization flags then only choose the server arguments")
    serve.add_argument("--exit-timeout-s", type=int, default=30,
                       help="Seconds Triton drains in-flight requests after SIGTERM")
    serve.add_argument("--ready-timeout-s", type=float, default=300.0)
    serve.add_argument("--log-file", type=Path, default=None,
                       help="Write tritonserver's output to this file (default: this command's stdout/stderr)")
    serve.set_defaults(func=run_serve)

    render = sub.add_parser("render", help="Write the generated model repository to a directory",
                            epilog=_presets_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_flags(render)
    render.add_argument("--out", type=Path, required=True)
    render.set_defaults(func=run_render)


def _presets_epilog() -> str:
    lines = ["presets (--preset NAME is the same as these flags; explicit flags override the preset):"]
    for name in PRESETS:
        lines.append(f"  {name:<8} {' '.join(preset_flags(name))}")
    return "\n".join(lines)


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from-isvc", type=Path, default=None, metavar="FILE.yaml",
                        help="Read spec.model / spec.runtime / spec.resources.gpu of an InferenceService manifest")
    source.add_argument("--preset", choices=list(PRESETS), default=None,
                        help="Start from a named configuration (listed below): naive = FP32, no batching, no "
                             "modality queues, no caches; default = an InferenceService without runtime fields; "
                             "fastest = the configuration behind the headline figure in docs/benchmarks.md")
    parser.add_argument("--model-name", default=None)
    parser.add_argument("--instance-count", type=int, default=None)
    parser.add_argument("--intra-op-threads", type=int, default=None)
    parser.add_argument("--max-batch-size", type=int, default=None)
    parser.add_argument("--dynamic-batching", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--preferred-batch-sizes", type=_int_tuple, default=None, metavar="4,8")
    parser.add_argument("--max-queue-delay-us", type=int, default=None)
    parser.add_argument("--modality-aware-batching", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--response-cache", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--embedding-cache", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--precision", choices=[p.value for p in Precision], default=None)
    parser.add_argument("--engine", choices=[e.value for e in Engine], default=None,
                        help="What runs the encoders in the Python backend: torch (default) or openvino (the same "
                             "modules converted and compiled for the CPU; CPU instances only)")
    parser.add_argument("--image-int8-min-side-pixels", type=int, default=None, metavar="PIXELS",
                        help="With --engine openvino --precision INT8: images whose resolution bucket's shorter side "
                             "is at least PIXELS go to the INT8 image encoder, smaller ones to the FP32 one; 0: every "
                             f"image FP32 (preset fastest: {PRESETS['fastest'].image_int8_min_side_pixels})")
    parser.add_argument("--cpu-cores", type=float, default=None, metavar="CORES",
                        help="Cores the server may use, which size the router's instances (2 per core, at most "
                             "16); default or 0: this process's cgroup CPU quota, else its CPU affinity")
    parser.add_argument("--stage", choices=[s.value for s in Stage], default=None,
                        help="Which part of the model to serve: all (default, the whole model), image-encoder (only "
                             "the image encoder, as the model image_encoder, for front replicas to call) or front "
                             "(the client-facing model without the image encoder; needs --image-encoder-url)")
    parser.add_argument("--image-encoder-url", default=None, metavar="HOST:PORT",
                        help="With --stage front: the gRPC host:port of the image encoder stage (e.g. "
                             "127.0.0.1:8001)")


def _int_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def config_from_args(args: argparse.Namespace) -> RuntimeConfig:
    """Build the config: the InferenceService file or the preset (if any), then explicit flags on top.

    Raises:
        InvalidSpec: The file cannot be read or parsed, or it or a flag is invalid (message names the
            flag or field).
    """
    cfg = PRESETS[args.preset] if getattr(args, "preset", None) else RuntimeConfig()
    if args.from_isvc is not None:
        try:
            manifest = yaml.safe_load(args.from_isvc.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
            raise InvalidSpec("--from-isvc", f"{args.from_isvc}: {why}; give an InferenceService "
                                                    "manifest (YAML)") from None
        if not isinstance(manifest, dict) or manifest.get("kind", "InferenceService") != "InferenceService":
            raise InvalidSpec(str(args.from_isvc), "not an InferenceService manifest")
        cfg = RuntimeConfig.from_isvc_spec(manifest.get("spec") or {})
    enums = {"precision": Precision, "engine": Engine, "stage": Stage}
    flags = {field: (_flag(dest), getattr(args, dest)) for dest, field in _OVERRIDES.items()
             if getattr(args, dest) is not None}
    return _with_flags(cfg, {field: (flag, enums[field](value) if field in enums else value)
                             for field, (flag, value) in flags.items()})


def _flag(dest: str) -> str:
    """The flag of an argparse destination (``max_batch_size`` -> ``--max-batch-size``)."""
    return f"--{dest.replace('_', '-')}"


def _flag_of(field: str) -> str | None:
    """The flag that sets the config field an :class:`InvalidSpec` names (``spec.runtime.maxBatchSize``,
    ``runtime.dynamicBatching.maxQueueDelayMicroseconds`` or ``image_encoder_url``), or None."""
    name = re.sub(r"(?<!^)([A-Z])", r"_\1", field.rsplit(".", 1)[-1]).lower()
    dest = next((d for d, f in _OVERRIDES.items() if f == name), None)
    return None if dest is None else _flag(dest)


def _with_flags(cfg: RuntimeConfig, flags: dict[str, tuple[str, Any]]) -> RuntimeConfig:
    """``cfg`` with ``{field: (flag, value)}`` applied.

    Raises:
        InvalidSpec: Named after the flag that sets the field the config refuses (given or not: ``--stage front``
            without ``--image-encoder-url`` names the latter), else after the flag whose value the config refuses
            on its own, else after every flag given; the config's own field in the message.
    """
    if not flags:
        return cfg
    try:
        return cfg.replace(**{field: value for field, (_, value) in flags.items()})
    except InvalidSpec as together:
        flag = _flag_of(together.field)
        if flag is not None:
            raise InvalidSpec(flag, f"{together.message} ({together.field})") from None
        for field, (flag, value) in flags.items():
            try:
                cfg.replace(**{field: value})
            except InvalidSpec as alone:
                raise InvalidSpec(flag, f"{alone.message} ({alone.field})") from None
        raise InvalidSpec(", ".join(flag for flag, _ in flags.values()), f"together: {together}") from None


def require_engine(cfg: RuntimeConfig) -> None:
    """Refuse to serve with an engine whose wheels are not installed (the models would fail to load inside Triton).

    Raises:
        InvalidSpec: ``engine`` is openvino and the ``openvino``/``nncf`` packages (the ``openvino`` extra:
            ``pip install 'modalscale[openvino]'``) are missing.
    """
    import importlib.util

    if cfg.engine is Engine.OPENVINO:
        missing = [m for m in ("openvino", "nncf") if importlib.util.find_spec(m) is None]
        if missing:
            raise InvalidSpec("--engine", f"engine openvino needs {', '.join(missing)}, not installed here; "
                                                 "install the openvino extra (pip install 'modalscale[openvino]') "
                                                 "or use --engine torch")


def sized_for_this_machine(cfg: RuntimeConfig) -> RuntimeConfig:
    """``cfg`` with ``cpu_cores`` set to :func:`~modalscale.runtime.cores.available_cores` when it is 0 (unknown)."""
    from modalscale.runtime.cores import available_cores

    return cfg if cfg.cpu_cores > 0 else cfg.replace(cpu_cores=available_cores())


def write_fresh_repository(files: Mapping[str, str | bytes], directory: Path, flag: str) -> None:
    """Write ``files`` (``build_repository`` output) so that ``directory`` holds exactly them plus the marker.

    Args:
        files: Repository-relative path -> content.
        directory: Created when missing; emptied first when an earlier render wrote it (:data:`RENDER_MARKER`).
        flag: The flag that named ``directory``, for the error.
    Raises:
        UsageError: ``directory`` is not a directory, or is not empty and was not written by a render (left as is).
    """
    from modalscale.cli import UsageError
    from modalscale.runtime.server import write_repository

    if directory.exists() and not directory.is_dir():
        raise UsageError(flag, f"{directory} is a file; give a directory for the model repository")
    entries = sorted(directory.iterdir()) if directory.is_dir() else []
    if entries and not (directory / RENDER_MARKER).is_file():
        shown = ", ".join(p.name for p in entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise UsageError(flag, f"{directory} holds files modalscale did not render ({shown}) and Triton would load "
                               "every model folder in it; give an empty or new directory")
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    write_repository(files, directory)
    (directory / RENDER_MARKER).write_text("Written by modalscale runtime; emptied by the next render.\n",
                                           encoding="utf-8")


def run_render(args: argparse.Namespace) -> int:
    """Write the repository; returns 0, or 2 on an invalid config or an ``--out`` holding files not ours."""
    try:
        cfg = sized_for_this_machine(config_from_args(args))
    except InvalidSpec as exc:
        print(f"modalscale runtime render: {exc}", file=sys.stderr)
        return 2
    write_fresh_repository(build_repository(cfg), args.out, "--out")
    print(f"Wrote model repository to {args.out}: {config_summary(cfg)}")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    """Run tritonserver in the foreground until it exits or SIGTERM/SIGINT arrives; returns its exit code."""
    from modalscale.runtime.server import TEMP_REPOSITORY_PREFIX, temp_name_prefix

    try:
        cfg = sized_for_this_machine(config_from_args(args))
        require_engine(cfg)
    except InvalidSpec as exc:
        print(f"modalscale runtime serve: {exc}", file=sys.stderr)
        return 2
    if args.model_repository is not None:
        return _serve(args, cfg, args.model_repository)
    repository = Path(tempfile.mkdtemp(prefix=temp_name_prefix(TEMP_REPOSITORY_PREFIX)))
    try:
        return _serve(args, cfg, repository)
    finally:  # a SIGKILLed launcher's repository is removed by the next start (remove_stale_temp_files)
        shutil.rmtree(repository, ignore_errors=True)


def _serve(args: argparse.Namespace, cfg: RuntimeConfig, repository: Path) -> int:
    from modalscale.runtime.server import TritonProcess, TritonStartError

    if args.configmap_dir is not None:
        files = {p.name: p.read_text(encoding="utf-8") for p in sorted(args.configmap_dir.iterdir())
                 if p.is_file() and not p.name.startswith(".")}
        write_fresh_repository(from_configmap_data(files), repository, "--model-repository")
        if any("response_cache {\n  enable: true" in text for text in files.values()):
            cfg = cfg.replace(response_cache=True)  # the server must size the cache the models ask for
    else:
        write_fresh_repository(build_repository(cfg), repository, "--model-repository")
    server = TritonProcess(model_repository=repository, http_port=args.http_port, grpc_port=args.grpc_port,
                           metrics_port=args.metrics_port, host=args.host, extra_args=server_arguments(cfg),
                           exit_timeout_s=args.exit_timeout_s, stop_timeout_s=args.exit_timeout_s + 15,
                           log_path=args.log_file, inherit_output=args.log_file is None,
                           temp_paths=[] if args.model_repository is not None else [repository])
    draining: list[threading.Thread] = []

    def _forward(signum: int, _frame: object) -> None:
        # First signal: wait for the requests in flight (Triton's own drain misses those inside a router's BLS
        # call), then SIGTERM; a second signal sends SIGTERM at once. The main thread's wait() returns once
        # Triton has exited.
        if draining:
            print(f"Received signal {signal.Signals(signum).name} again, stopping tritonserver now", flush=True)
            server.terminate()
            return
        print(f"Received signal {signal.Signals(signum).name}, draining tritonserver", flush=True)
        draining.append(threading.Thread(target=_drain_then_terminate, name="drain", daemon=True))
        draining[0].start()

    def _drain_then_terminate() -> None:
        result = server.drain()
        if result is not None:
            print(f"Drain: {result.reason} after {result.waited_s:.1f} s (in flight: {result.inflight})", flush=True)
        server.terminate()

    previous = {sig: signal.signal(sig, _forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start(ready_timeout_s=args.ready_timeout_s)
        print(f"Serving model={served_model_name(cfg)} http={server.http_url} grpc={server.grpc_url} "
              f"metrics={server.metrics_url} repository={repository} log={server.log_path or 'stdout'}", flush=True)
        code = server.wait()
    except TritonStartError as exc:
        print(f"tritonserver failed to start: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    server.stop()
    print(f"tritonserver exited with code {code}", flush=True)
    return int(code)
