"""The GPU layout's encoders on a real GPU (issue 24's GPU run): fidelity to the CPU and encoder-level batching.

The GPU layout (``spec.resources.gpu.count > 0``) runs a CPU orchestrator that decodes, tokenizes and pads each
request's images to fixed square sides in FP16, and two ``KIND_GPU`` encoder models that batch every request's
images (one pass per side) and texts (one pass per length bucket). This benchmark runs that compute,
``modalscale.runtime.model.gpu_layout`` (the very functions ``gpu_models`` calls inside Triton), on a GPU without
tritonserver (none can be installed on the lent GPU machine), in two steps:

1. ``reference`` (here, on the CPU): real requests (photos shipped in scikit-image / scikit-learn resized to image
   sizes drawn from COCO val2017's size table, real English texts, a third each image, text and image+text), and
   their FP32 CPU embeddings both through the GPU layout's path and through the one-piece pipeline::

       .venv/bin/python benchmarks/gpu_encoders.py reference \\
           --image-sizes ../shared/data/coco_val2017_image_sizes.csv --requests 96 --out .gpu/ref

2. ``run`` (on the GPU machine): the same requests through the layout's path on ``cuda:0`` at FP32 (cuDNN's TF32
   convolutions on, torch's default, and off), FP16 and BF16, cosine to the CPU FP32 embeddings per modality;
   then throughput of each encoder pass against its batch size (the knob the encoder models' ``max_batch_size``
   sets: ``repo_config.GPU_ENCODER_MAX_BATCH``), per fixed side and per text length bucket, in rounds, with an
   A/A row (the same configuration timed at the start and at the end)::

       python3 benchmarks/gpu_encoders.py run --ref .gpu/ref --out "$OUT"

A pass's time is wall time from the host array to features back on the host (``MultimodalEncoder.encode_images``
and ``encode_texts`` copy both ways), synchronised, median over ``--rounds`` rounds of at least ``--min-s`` each.
"""

from __future__ import annotations

import argparse
import base64
import csv
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

MODALITIES = ("image", "text", "image_text")
SIDES = (128, 256, 384)


def _settings(cache: bool = False) -> Any:
    from modalscale.runtime.model.settings import ModelSettings
    from modalscale.runtime.repo_config import RuntimeConfig, gpu_image_sides

    return ModelSettings(embedding_cache=cache, image_bucket_sides=gpu_image_sides(RuntimeConfig(gpu_count=1)))


def _requests(sizes_csv: Path, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` requests, modalities in turn; each image a shipped photo at a COCO val2017 image's size."""
    from modalscale.runtime.workload import fidelity_texts, photo_at, photo_names

    with sizes_csv.open() as f:
        sizes = [(int(r["width"]), int(r["height"])) for r in csv.DictReader(f)]
    rng = random.Random(seed)
    texts = fidelity_texts(count, seed=seed)
    names = photo_names()
    out = []
    for i in range(count):
        modality = MODALITIES[i % 3]
        req: dict[str, Any] = {"modality": modality, "images": [], "text": None}
        if modality != "text":
            for _ in range(1 + (rng.random() < 0.25)):  # a quarter of them carry two images
                w, h = rng.choice(sizes)
                req["images"].append(photo_at(names[rng.randrange(len(names))], w, h))
        if modality != "image":
            req["text"] = texts[i]
        out.append(req)
    return out


def _tensors(req: dict[str, Any]) -> tuple[Any, Any]:
    images = np.array(req["images"], dtype=np.object_) if req["images"] else None
    text = np.array([req["text"].encode()], dtype=np.object_) if req["text"] is not None else None
    return images, text


def layout_embeddings(encoder: Any, requests: list[dict[str, Any]], batch: bool = True) -> np.ndarray:
    """Embeddings (n, 256) through the GPU layout's path: prepare on the CPU, pad, then one image-encoder call and
    one text-encoder call over every request (``batch``: as one dynamic batch; else one request at a time)."""
    from modalscale.runtime.model.gpu_layout import encode_image_items, encode_text_rows, fuse_request, pad_images
    from modalscale.runtime.model.pipeline import MultimodalPipeline

    settings = _settings()
    pipe = MultimodalPipeline(settings, encoder)
    preps = [pipe.prepare(*_tensors(r)) for r in requests]
    side_batches = [pad_images(p.parsed.images, range(len(p.parsed.images)), settings.image_bucket_sides)
                    for p in preps]
    flat = [(r, b) for r, bs in enumerate(side_batches) for b in bs]
    groups = [flat] if batch else [[x] for x in flat]
    image_feats: list[dict[int, np.ndarray]] = [{} for _ in preps]
    for group in groups:
        if not group:
            continue
        feats, _ = encode_image_items(encoder, [b.pixels for _, b in group], [b.valid_hw for _, b in group])
        for (r, b), f in zip(group, feats, strict=True):
            for j, k in enumerate(b.members):
                image_feats[r][k] = f[j]
    text_rows = [r for r, p in enumerate(preps) if p.token_ids is not None]
    ids = [preps[r].token_ids or [] for r in text_rows]
    text = encode_text_rows(encoder, ids) if batch else np.concatenate(
        [encode_text_rows(encoder, [row]) for row in ids]) if ids else np.zeros((0, 384), np.float32)
    text_of = {r: text[i:i + 1] for i, r in enumerate(text_rows)}
    return np.stack([fuse_request(encoder, [image_feats[r][k] for k in sorted(image_feats[r])], text_of.get(r))
                     for r in range(len(preps))])


def one_piece_embeddings(encoder: Any, requests: list[dict[str, Any]]) -> np.ndarray:
    """Embeddings (n, 256) through the CPU layout's ``MultimodalPipeline.run``, one request at a time."""
    from modalscale.runtime.model.pipeline import MultimodalPipeline

    pipe = MultimodalPipeline(_settings(), encoder)
    return np.stack([pipe.run([pipe.prepare(*_tensors(r))])[0].embedding for r in requests])


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _by_modality(cos: np.ndarray, requests: list[dict[str, Any]]) -> dict[str, float]:
    return {m: round(float(min(c for c, r in zip(cos, requests, strict=True) if r["modality"] == m)), 7)
            for m in MODALITIES}


def reference(args: argparse.Namespace) -> None:
    """Write the requests and their CPU FP32 embeddings to ``args.out``."""
    from modalscale.runtime.model.encoders import MultimodalEncoder

    requests = _requests(args.image_sizes, args.requests, args.seed)
    encoder = MultimodalEncoder()
    layout = layout_embeddings(encoder, requests)
    one_piece = one_piece_embeddings(encoder, requests)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "requests.json").write_text(json.dumps(
        [{**r, "images": [base64.b64encode(img).decode() for img in r["images"]]} for r in requests]))
    np.savez(args.out / "cpu_fp32.npz", layout=layout, one_piece=one_piece)
    cos = _cosines(layout, one_piece)
    print(f"{len(requests)} requests; CPU FP32, GPU layout's path vs one-piece pipeline: min cosine per modality "
          f"{_by_modality(cos, requests)}")


def _load(ref: Path) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    requests = [{**r, "images": [base64.b64decode(b) for b in r["images"]]}
                for r in json.loads((ref / "requests.json").read_text())]
    arrays = np.load(ref / "cpu_fp32.npz")
    return requests, {k: arrays[k] for k in arrays.files}


def _timed(fn: Any, rounds: int, min_s: float, sync: Any) -> list[float]:
    """Seconds per call of ``fn``: one value per round (calls repeated until ``min_s``), after one warm-up call."""
    fn()
    sync()
    out = []
    for _ in range(rounds):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            sync()
            calls += 1
            if time.perf_counter() - start >= min_s:
                break
        out.append((time.perf_counter() - start) / calls)
    return out


def _row(kind: str, config: str, size: int, batch: int, per_call_s: list[float]) -> dict[str, Any]:
    med = statistics.median(per_call_s)
    return {"encoder": kind, "config": config, "size": size, "batch": batch,
            "ms_per_pass": [round(s * 1e3, 3) for s in per_call_s], "items_per_s": round(batch / med, 1),
            "items_per_s_range": [round(batch / max(per_call_s), 1), round(batch / min(per_call_s), 1)]}


def _image_sweep(encoder: Any, config: str, pixels: dict[int, np.ndarray], batches: list[int], rounds: int,
                 min_s: float, sync: Any) -> list[dict[str, Any]]:
    rows = []
    for side, items in pixels.items():
        for b in batches:
            x = np.ascontiguousarray(np.resize(items, (b, *items.shape[1:])).astype(np.float32))
            valid = [(side, side)] * b
            rows.append(_row("image", config, side, b, _timed(lambda: encoder.encode_images(x, valid),
                                                               rounds, min_s, sync)))
    return rows


def _text_sweep(encoder: Any, config: str, ids_by_bucket: dict[int, list[list[int]]], batches: list[int],
                rounds: int, min_s: float, sync: Any) -> list[dict[str, Any]]:
    rows = []
    for bucket, rows_ids in ids_by_bucket.items():
        for b in batches:
            ids = [rows_ids[i % len(rows_ids)] for i in range(b)]
            rows.append(_row("text", config, bucket, b, _timed(lambda: encoder.encode_texts(ids, bucket),
                                                               rounds, min_s, sync)))
    return rows


def _mixed_sweep(encoder: Any, config: str, preps: list[Any], batches: list[int], rounds: int, min_s: float,
                 sync: Any) -> list[dict[str, Any]]:
    """Dynamic batches of real requests' images: padded to the fixed sides (the GPU layout, ``gpu_layout``) or
    grouped by exact resolution bucket (the CPU layout's ``MultimodalPipeline.image_entries``, whose features equal
    the one-piece path's), padding and stacking on the host included; then the encoder's share alone (what the
    image encoder model does with tensors the orchestrator already made: FP16, fixed sides or exact buckets)."""
    from modalscale.runtime.model.gpu_layout import encode_image_items, pad_images
    from modalscale.runtime.model.pipeline import MultimodalPipeline

    pipe = MultimodalPipeline(_settings(), encoder)
    with_images = [p for p in preps if p.parsed.images]
    rows = []
    for b in batches:
        chosen, count = [], 0
        while count < b:
            chosen.append(with_images[len(chosen) % len(with_images)])
            count += len(chosen[-1].parsed.images)

        def fixed(host_float32: bool = False) -> None:
            bs = [x for p in chosen for x in pad_images(p.parsed.images, range(len(p.parsed.images)), SIDES)]
            encode_image_items(encoder, [x.pixels.astype(np.float32) if host_float32 else x.pixels for x in bs],
                               [x.valid_hw for x in bs])

        padded = [x for p in chosen for x in pad_images(p.parsed.images, range(len(p.parsed.images)), SIDES)]
        by_bucket: dict[tuple[int, int], list[Any]] = {}
        for im in (im for p in chosen for im in p.parsed.images):
            by_bucket.setdefault(im.bucket, []).append(im.array)
        exact = {hw: np.stack(arrays).astype(np.float16) for hw, arrays in by_bucket.items()}

        def fixed_encoder_only() -> None:  # what the image encoder model itself does with the orchestrator's tensors
            encode_image_items(encoder, [x.pixels for x in padded], [x.valid_hw for x in padded])

        def exact_encoder_only() -> None:  # the same, had the orchestrator sent each bucket unpadded
            for hw, pixels in exact.items():
                encoder.encode_images(pixels, [hw] * len(pixels))

        sides = len({x.side for x in padded})
        for label, fn, passes in (
                ("fixed sides", fixed, sides),
                ("fixed sides host-f32", lambda: fixed(host_float32=True), sides),  # before: widened on the host
                ("exact buckets", lambda: pipe.image_entries(chosen), len(exact)),
                ("fixed sides encoder only", fixed_encoder_only, sides),
                ("exact buckets encoder only", exact_encoder_only, len(exact))):
            row = _row("image mix", f"{config} {label}", 0, count, _timed(fn, rounds, min_s, sync))
            row["passes"] = passes
            rows.append(row)
    return rows


def run(args: argparse.Namespace) -> None:
    """Fidelity and batch sweep on ``cuda:0``; JSON to ``args.out/gpu_encoders.json``, a table on stdout."""
    import torch

    from modalscale.runtime.model.batching import text_bucket
    from modalscale.runtime.model.encoders import MultimodalEncoder
    from modalscale.runtime.model.pipeline import MultimodalPipeline
    from modalscale.runtime.repo_config import Precision

    requests, ref = _load(args.ref)
    device = args.device
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else device
    report: dict[str, Any] = {"gpu": gpu, "torch": torch.__version__,
                              "python": platform.python_version(), "requests": len(requests), "fidelity": [],
                              "sweep": []}
    print(f"{report['gpu']}, torch {report['torch']}, {len(requests)} requests", flush=True)
    configs = [("FP32", Precision.FP32, True), ("FP32-noTF32", Precision.FP32, False),
               ("FP16", Precision.FP16, True), ("BF16", Precision.BF16, True)]
    batches = [int(b) for b in args.batches.split(",")]
    encoders = {}
    for name, precision, tf32 in configs:
        torch.backends.cudnn.allow_tf32 = tf32
        start = time.perf_counter()
        encoder = MultimodalEncoder(precision, device)
        load_s = time.perf_counter() - start
        got = layout_embeddings(encoder, requests)
        alone = layout_embeddings(encoder, requests, batch=False)
        row = {"config": name, "load_s": round(load_s, 2),
               "cos_to_cpu_layout": _by_modality(_cosines(got, ref["layout"]), requests),
               "cos_to_cpu_one_piece": _by_modality(_cosines(got, ref["one_piece"]), requests),
               "cos_batched_to_alone": _by_modality(_cosines(got, alone), requests)}
        report["fidelity"].append(row)
        print(json.dumps(row), flush=True)
        encoders[name] = encoder
    torch.backends.cudnn.allow_tf32 = True
    pipe = MultimodalPipeline(_settings(), encoders["FP16"])
    preps = [pipe.prepare(*_tensors(r)) for r in requests]
    from modalscale.runtime.model.gpu_layout import pad_images

    pixels = {}
    for side in SIDES:
        items = [b.pixels[j] for p in preps for b in pad_images(p.parsed.images, range(len(p.parsed.images)), SIDES)
                 if b.side == side for j in range(len(b.members))]
        if items:
            pixels[side] = np.stack(items)
    ids_by_bucket: dict[int, list[list[int]]] = {}
    for p in preps:
        if p.token_ids is not None:
            ids_by_bucket.setdefault(text_bucket(len(p.token_ids)), []).append(p.token_ids)
    report["pixels_per_side"] = {s: int(v.shape[0]) for s, v in pixels.items()}
    report["texts_per_bucket"] = {b: len(v) for b, v in sorted(ids_by_bucket.items())}
    aa = ("FP16", 256 if 256 in pixels else next(iter(pixels)), 64)

    def aa_row(label: str) -> None:
        name, side, b = aa
        row = _image_sweep(encoders[name], f"{name} {label}", {side: pixels[side]}, [b], args.rounds, args.min_s,
                           sync)[0]
        report["sweep"].append(row)
        print(json.dumps(row), flush=True)

    aa_row("A/A first")
    for name in (("FP32", "FP16", "BF16") if args.only == "all" else ()):
        for row in (_image_sweep(encoders[name], name, pixels, batches, args.rounds, args.min_s, sync)
                    + _text_sweep(encoders[name], name, dict(sorted(ids_by_bucket.items())), batches, args.rounds,
                                  args.min_s, sync)):
            report["sweep"].append(row)
            print(json.dumps(row), flush=True)
    mix_batches = [int(b) for b in args.mix_batches.split(",")]
    for name in ("FP32", "FP16"):
        for row in _mixed_sweep(encoders[name], name, preps, mix_batches, args.rounds, args.min_s, sync):
            report["sweep"].append(row)
            print(json.dumps(row), flush=True)
    aa_row("A/A last")
    report["max_memory_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_encoders.json").write_text(json.dumps(report, indent=1))
    print(f"max GPU memory allocated {report['max_memory_allocated_mib']} MiB", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("reference", help="requests and CPU FP32 embeddings (run here)")
    p.add_argument("--image-sizes", type=Path, required=True, help="COCO val2017 image-size CSV (width, height)")
    p.add_argument("--requests", type=int, default=96)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("run", help="fidelity and batch sweep on cuda:0 (run on the GPU machine)")
    p.add_argument("--ref", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--batches", default="1,4,16,32,64,128,256")
    p.add_argument("--device", default="cuda:0", help="torch device (cpu: a smoke test of this script)")
    p.add_argument("--mix-batches", default="8,32,64,128", help="images per dynamic batch of real requests")
    p.add_argument("--only", choices=("all", "mix"), default="all",
                   help="mix: fidelity, the A/A rows and the dynamic batches of real images only")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-s", type=float, default=0.15)
    args = parser.parse_args(argv)
    from modalscale.devenv.provenance import code_version  # lazy, as every modalscale import here

    print(f"commit {code_version()}; {platform.node()}; python {sys.version.split()[0]}", flush=True)
    {"reference": reference, "run": run}[args.command](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
