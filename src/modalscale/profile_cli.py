"""``modalscale profile``: measure the real Triton runtime's per-request service time and fit the service-time model.

Drives a running runtime (``--url``) or one it starts itself (default RuntimeConfig, loopback ports) with real
requests (photographs resized to the grid's sizes, texts of exact token counts, unique image bytes so the
embedding cache never hits), reads each request's service time from Triton's statistics API (see
``modalscale.autoscaler.profile_design``), writes the profile CSV, fits ``ServiceTimeRegressor``, reports MAE and
MAPE against ``DummyRegressor`` and a linear-in-tokens model on held-out requests and held-out shapes, and writes
the artifact (optionally also as a ConfigMap manifest for ``spec.model.costModelRef``).

This module lives outside ``modalscale.autoscaler`` because it talks to the runtime (``modalscale.runtime``,
httpx), which the autoscaler package must not import.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx


def add_parser(subparsers: Any) -> None:
    """Register ``profile``."""
    p = subparsers.add_parser("profile", help="Measure per-request service time on the real runtime and fit "
                                              "the autoscaler's service-time model")
    p.add_argument("--url", default=None, help="host:port of a running runtime's HTTP endpoint; default: start a "
                                               "local runtime (default config) for the profile")
    p.add_argument("--model", default="multimodal", help="Client-facing Triton model name (spec.model.name)")
    p.add_argument("--shapes", type=_at_least(1), default=80, help="Request shapes drawn from the grid")
    p.add_argument("--repeats", type=_at_least(1), default=3, help="Measurements per shape (one request at a time)")
    p.add_argument("--batched-shapes", type=_at_least(0), default=0,
                   help="Shapes also sent --concurrency at a time to measure batched service times")
    p.add_argument("--concurrency", type=_at_least(1), default=4, help="Requests in flight for the batched shapes")
    p.add_argument("--rounds", type=_at_least(1), default=3, help="Rounds of --concurrency requests per batched shape")
    p.add_argument("--image-sizes", type=_sizes, default=None, metavar="640x480,1024x768",
                   help="Image sizes of the grid (default: upload sizes with a longer side of 480 to 1920 px)")
    p.add_argument("--images", type=_ints, default=None, metavar="1,2,4", help="Images per request of the grid")
    p.add_argument("--tokens", type=_ints, default=None, metavar="8,32,64,128,256", help="Text tokens of the grid")
    p.add_argument("--trace", type=Path, default=None,
                   help="Take the request shapes from a trace CSV (arrival_s,image_count,image_width,"
                        "image_height,text_tokens) instead of the grid")
    p.add_argument("--from-csv", type=Path, default=None, help="Fit and evaluate an existing profile CSV "
                                                               "(nothing is measured)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--test-ratio", type=_ratio, default=0.25, help="Share held out for evaluation, in (0, 1)")
    p.add_argument("--kind", choices=["additive", "boosted"], default="additive", help="Regressor kind")
    p.add_argument("--out-csv", type=Path, default=Path("profile.csv"), help="Profile CSV to write")
    p.add_argument("--out-model", type=Path, default=Path("model.skops"), help="Model artifact to write")
    p.add_argument("--configmap", default=None, metavar="NAME",
                   help="Also write a ConfigMap manifest NAME with the artifact in binaryData (to --configmap-out)")
    p.add_argument("--configmap-out", type=Path, default=None, help="Where to write the ConfigMap YAML "
                                                                     "(default: print it)")
    p.add_argument("--namespace", default=None, help="Namespace of the ConfigMap manifest")
    p.add_argument("--key", default="model.skops", help="binaryData key (spec.model.costModelRef.key)")
    p.add_argument("--json", type=Path, default=None, help="Write the evaluation report as JSON")
    p.set_defaults(func=run_profile)


def _at_least(least: int) -> Any:
    """An argparse type: an integer >= ``least`` (checked before anything is measured)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {text!r}")
        return value
    return parse


def _ratio(text: str) -> float:
    """An argparse type: a number in (0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), e.g. 0.25, got {text!r}")
    return value


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def _sizes(text: str) -> tuple[tuple[int, int], ...]:
    out = []
    for item in text.split(","):
        try:
            w, h = (int(v) for v in item.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT[,...], got {item!r}") from None
        if w < 1 or h < 1:
            raise argparse.ArgumentTypeError(f"image sides must be >= 1, got {item!r}")
        out.append((w, h))
    return tuple(out)


def stats(client: httpx.Client, url: str, model: str) -> dict[str, Any]:
    """``model_stats[0]`` of Triton's statistics API for ``model``.

    Raises:
        httpx.HTTPError: Triton did not answer 200.
    """
    response = client.get(f"http://{url}/v2/models/{model}/stats")
    response.raise_for_status()
    return dict(response.json()["model_stats"][0])


def executing_models(client: httpx.Client, url: str, model: str) -> dict[str, str]:
    """``{modality: model that executes it}``: ``<model>_<modality>`` behind a router, else ``<model>``."""
    out = {}
    for modality in ("text", "image", "image_text"):
        name = f"{model}_{modality}"
        ok = client.get(f"http://{url}/v2/models/{name}/ready").status_code == 200
        out[modality] = name if ok else model
    return out


@contextlib.contextmanager
def server_log(say: Any) -> Iterator[Path]:
    """A per-run path for the local runtime's server log, ``<tmp>/modalscale-profile-XXXX/tritonserver.log``.

    Two runs never share it. After a run that ended normally its folder is removed; when the block raises, the
    log is kept and ``say`` names its path (the server's own account of the failure).
    """
    folder = Path(tempfile.mkdtemp(prefix="modalscale-profile-"))
    log = folder / "tritonserver.log"
    try:
        yield log
    except BaseException:
        say(f"The local runtime's log is kept in {log}")
        raise
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def local_runtime(log: Path) -> Iterator[str]:
    """Start the runtime (default RuntimeConfig) on free loopback ports; yields the HTTP ``host:port``."""
    from modalscale.runtime.repo_config import RuntimeConfig
    from modalscale.runtime.server import free_port, serve_config

    with tempfile.TemporaryDirectory(prefix="modalscale-profile-") as repo:
        with serve_config(RuntimeConfig(), Path(repo), http_port=free_port(), grpc_port=free_port(),
                          metrics_port=free_port(), log_path=log, exit_timeout_s=5) as server:
            yield server.http_url


def measure(url: str, model: str, shapes: Sequence[Any], batched: Sequence[Any], concurrency: int, rounds: int,
            warmup: Sequence[Any], log: Any = print) -> list[dict[str, Any]]:
    """Send the requests and return profile rows (see ``profile_design`` for what is measured).

    Args:
        url: HTTP ``host:port``.
        model: Client-facing model.
        shapes: Sent one at a time, in order (one row each, unless something else ran meanwhile).
        batched: Shapes sent ``concurrency`` at a time for ``rounds`` rounds each.
        warmup: Sent first, not recorded.
    """
    from modalscale.autoscaler.profile_design import batched_rows, sequential_row
    from modalscale.runtime.client import AsyncMultimodalClient, MultimodalClient
    from modalscale.runtime.loadgen import request_content
    from modalscale.runtime.workload import TraceRow

    salt = os.urandom(16)  # per run: no image of this profile equals one the server saw before (cache misses)

    def content(shape: Any, index: int) -> tuple[Any, Any]:
        images, text = request_content(
            TraceRow(0.0, shape.image_count, shape.width, shape.height, shape.text_tokens), index)
        return (None if images is None else [data + salt for data in images]), text

    rows: list[dict[str, Any]] = []
    index = 0
    skipped = 0
    start = time.monotonic()
    with httpx.Client(timeout=30.0) as http, MultimodalClient(url, "http", model) as client:
        executing = executing_models(http, url, model)
        for shape in warmup:
            client.infer(*content(shape, index))
            index += 1
        for n, shape in enumerate(shapes, start=1):
            images, text = content(shape, index)
            index += 1
            target = executing[shape.modality.value]
            before = stats(http, url, target)
            client.infer(images=images, text=text)
            row = sequential_row(shape, before, stats(http, url, target), time.monotonic() - start)
            if row is None:
                skipped += 1
            else:
                rows.append(row)
            if n % 50 == 0:
                log(f"measured {n}/{len(shapes)} requests one at a time")

        async def burst(shape: Any, first: int) -> None:
            aio = AsyncMultimodalClient(url, "http", model)
            try:
                await asyncio.gather(*(aio.infer(*content(shape, first + k)) for k in range(concurrency)))
            finally:
                await aio.close()

        for shape in batched:
            target = executing[shape.modality.value]
            before = stats(http, url, target)
            for _ in range(rounds):
                asyncio.run(burst(shape, index))
                index += concurrency
            rows += batched_rows(shape, before, stats(http, url, target), time.monotonic() - start)
    if skipped:
        log(f"skipped {skipped} request(s) whose model statistics moved by more than that request")
    return rows


def run_profile(args: argparse.Namespace) -> int:
    """Measure (or read), evaluate, fit on everything, write the artifact; returns 0, 1 when the runtime did not
    answer or refused the profile's requests (one line naming it and the fix), or 2 on bad input."""
    from modalscale.autoscaler.profile_data import read_profile_csv, write_profile_csv
    from modalscale.autoscaler.profile_design import ProfileGrid, RequestShape, configmap_yaml, design, to_table
    from modalscale.autoscaler.regressor import ServiceTimeRegressor, dumps_model

    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731 - progress on stderr
    if args.from_csv is not None:
        from modalscale.cli import reading

        with reading("--from-csv", args.from_csv, "a profile CSV", " (one `modalscale profile --out-csv` wrote)"):
            table = read_profile_csv(args.from_csv)
        source = str(args.from_csv)
    else:
        defaults = ProfileGrid()
        grid = ProfileGrid(image_sizes=args.image_sizes or defaults.image_sizes,
                           images_per_request=args.images or defaults.images_per_request,
                           text_tokens=args.tokens or defaults.text_tokens)
        try:
            if args.trace is not None:
                from modalscale.runtime.workload import read_trace

                base = [RequestShape(r.image_count, r.image_width, r.image_height, r.text_tokens)
                        for r in read_trace(args.trace)]
                shapes = design(base, 1, args.seed)
            else:
                shapes = design(grid.draw(args.shapes, args.seed), args.repeats, args.seed)
            batched = grid.draw(args.batched_shapes, args.seed + 7) if args.batched_shapes > 0 else []
        except (OSError, ValueError) as exc:
            say(f"Bad profile request: {exc}")
            return 2
        say(f"Profiling {len(shapes)} requests one at a time and {len(batched)} shape(s) x {args.rounds} rounds "
            f"at concurrency {args.concurrency}")
        from modalscale.runtime.client import InferenceError

        try:
            with contextlib.ExitStack() as stack:  # a failure keeps the local runtime's log (server_log names it)
                url = args.url
                if url is None:
                    log = stack.enter_context(server_log(say))
                    say(f"Starting a local runtime (default config; log {log}, removed after the run)")
                    url = stack.enter_context(local_runtime(log))
                rows = measure(url, args.model, shapes, batched, args.concurrency, args.rounds,
                               grid.warmup_shapes(), say)
        except (httpx.HTTPError, InferenceError, OSError) as exc:
            say(f"Profiling failed: {_runtime_failure(args, exc)}")
            return 1
        table = to_table(rows)
        write_profile_csv(table, args.out_csv)
        source = f"{args.url or 'local runtime'} ({len(rows)} rows -> {args.out_csv})"

    try:
        report = _evaluate(table, args)
        model = ServiceTimeRegressor(kind=args.kind).fit(table)
    except ValueError as exc:  # the profile's rows cannot fit a model; the message says which and the fix
        say(f"Cannot evaluate the profile: {exc}")
        return 2
    artifact = dumps_model(model, {"profile": source, "rows": str(len(table["service_ms"])), "kind": args.kind})
    args.out_model.write_bytes(artifact)
    say(f"Wrote the model artifact {args.out_model} ({len(artifact)} bytes, fitted on all rows)")
    if args.configmap:
        text = configmap_yaml(args.configmap, args.key, artifact, args.namespace)
        if args.configmap_out:
            args.configmap_out.write_text(text, encoding="utf-8")
            say(f"Wrote ConfigMap {args.configmap} to {args.configmap_out}")
        else:
            print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


def _runtime_failure(args: argparse.Namespace, exc: BaseException) -> str:
    """One line for a runtime that did not answer or refused the profile's requests: who, what, and the fix."""
    from modalscale.runtime.client import InferenceError

    detail = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
    who = f"the runtime at {args.url}" if args.url else "the local runtime"
    if isinstance(exc, httpx.HTTPStatusError):
        return (f"{who} answered HTTP {exc.response.status_code} to {exc.request.url.path} ({detail}); is --model "
                f"{args.model!r} the client-facing model it serves?")
    if isinstance(exc, InferenceError):
        return (f"{who} refused a profile request ({detail}); is --model {args.model!r} the client-facing model it "
                "serves?")
    if args.url is None:
        return f"the local runtime did not answer ({detail}); its log is named above"
    return (f"{who} (--url) did not answer: {detail}; give --url HOST:PORT of a running runtime's HTTP endpoint, "
            "or leave it out to start a local runtime")


def _evaluate(table: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Evaluate, print the rich table, and return the report as a JSON-ready dict."""
    from rich.console import Console
    from rich.table import Table

    from modalscale.autoscaler.profile_design import evaluate_profile

    splits = evaluate_profile(table, kind=args.kind, test_ratio=args.test_ratio, seed=args.seed)
    console = Console(stderr=args.configmap is not None and args.configmap_out is None)
    out: dict[str, Any] = {"rows": int(len(table["service_ms"])), "kind": args.kind, "splits": []}
    for split in splits:
        t = Table(title=f"Held-out {split.name} ({split.results['model'].n_requests} rows; trained on "
                        f"{split.n_train})")
        for column in ("model", "MAE ms", "MAPE %"):
            t.add_column(column, justify="left" if column == "model" else "right")
        for name, ev in split.results.items():
            t.add_row(name, f"{ev.mae_ms:.1f}", f"{100 * ev.mape_ratio:.1f}")
        console.print(t)
        detail = ", ".join(f"{m} {100 * v:.1f} %" for m, v in split.model_mape_by_modality.items())
        console.print(f"model MAPE by modality: {detail}")
        if split.noise_floor_mape is not None:
            console.print(f"repeat spread (median of the other repeats of the same shape as the prediction): "
                          f"MAPE {100 * split.noise_floor_mape:.1f} %")
        out["splits"].append({
            "name": split.name, "n_train": split.n_train,
            "results": {k: {"mae_ms": v.mae_ms, "mape_ratio": v.mape_ratio, "n": v.n_requests}
                        for k, v in split.results.items()},
            "model_mape_by_modality": split.model_mape_by_modality, "noise_floor_mape": split.noise_floor_mape})
    return out
