"""Stage-disaggregated serving (issue 24), the runtime's half: the stage fields and their validation, the
``image-encoder`` and ``front`` repositories, the flags, a front's pipeline (image call and texts at once, per-request
errors) with stand-ins for the encoders and the pool, and the pool client's channels. Stage ``all`` must keep every
earlier repository byte for byte. The real servers: ``tests/integration/runtime/test_runtime_stages.py``."""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib.util
import itertools
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modalscale.api.errors import InvalidSpec
from modalscale.runtime import cli
from modalscale.runtime.model.encoder_client import ImageEncoderClient, decode_answer
from modalscale.runtime.model.inputs import RequestError, check_request, parse_request
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.model.staged import (
    CLIENT,
    INTERNAL,
    UNAVAILABLE,
    EncoderFailure,
    FrontOutput,
    FrontPipeline,
    RemoteImages,
    classify_encoder_error,
)
from modalscale.runtime.repo_config import (
    IMAGE_ENCODER_MODEL,
    IMAGE_ENCODER_UNAVAILABLE,
    PRESETS,
    Precision,
    RuntimeConfig,
    Stage,
    build_repository,
    config_flags,
    config_summary,
    render_router_pbtxt,
    served_model_name,
)

URL = "10.96.0.12:8001"
FRONT = RuntimeConfig(stage=Stage.FRONT, image_encoder_url=URL)
ENCODER = RuntimeConfig(stage=Stage.IMAGE_ENCODER)


def _digest(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


# build_repository of each config at df43d75 (before stages existed), json.dumps(files, sort_keys=True), SHA-256;
# "gpu" since c895bb4, whose text encoder model's max_batch_size 128 (was 64) is its one change: with that line set
# back to 64 the repository still gives df43d75's digest 53162419100cfd2b.
ONE_PIECE_DIGESTS = {
    "default": "7251e272af153722",
    "naive": "cb56c5f76ee3fdb0",
    "fastest": "2cb0e74e7e2d99dc",
    "default-2-cores-cache": "8fca0345a0a7f8e5",
    "gpu": "f14babb61332182d",
}
ONE_PIECE_CONFIGS = {
    "default": RuntimeConfig(),
    "naive": PRESETS["naive"],
    "fastest": PRESETS["fastest"],
    "default-2-cores-cache": RuntimeConfig(cpu_cores=2.0, response_cache=True, model_name="mm"),
    "gpu": RuntimeConfig(gpu_count=2, precision=Precision.FP16),
}


@pytest.mark.parametrize("name", sorted(ONE_PIECE_CONFIGS))
def test_stage_all_keeps_the_one_piece_repository_byte_for_byte(name: str) -> None:
    cfg = ONE_PIECE_CONFIGS[name]
    assert cfg.stage is Stage.ALL and cfg.image_encoder_url == ""
    assert _digest(build_repository(cfg)) == ONE_PIECE_DIGESTS[name]


def test_stage_all_keeps_its_summary_and_flags() -> None:
    summary = json.loads(config_summary(RuntimeConfig()))
    assert "stage" not in summary and "image_encoder_url" not in summary
    assert "--stage" not in config_flags(RuntimeConfig())
    assert "--image-encoder-url" not in config_flags(PRESETS["naive"])
    assert json.loads(config_summary(FRONT))["stage"] == "front"
    assert json.loads(config_summary(FRONT))["image_encoder_url"] == URL


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"stage": Stage.FRONT}, "image_encoder_url", "--image-encoder-url"),
    ({"stage": Stage.FRONT, "image_encoder_url": "http://10.0.0.1:8001"}, "image_encoder_url", "no scheme"),
    ({"stage": Stage.FRONT, "image_encoder_url": "encoder"}, "image_encoder_url", "host:port"),
    ({"stage": Stage.FRONT, "image_encoder_url": "encoder:0"}, "image_encoder_url", "port 1-65535"),
    ({"stage": Stage.FRONT, "image_encoder_url": "encoder:70000"}, "image_encoder_url", "port 1-65535"),
    ({"stage": Stage.FRONT, "image_encoder_url": "a b:8001"}, "image_encoder_url", "host:port"),
    ({"image_encoder_url": URL}, "image_encoder_url", "--stage front"),
    ({"stage": Stage.IMAGE_ENCODER, "image_encoder_url": URL}, "image_encoder_url", "only a front"),
    ({"stage": "front", "image_encoder_url": URL}, "stage", "image-encoder"),
    ({"stage": Stage.FRONT, "image_encoder_url": 8001}, "image_encoder_url", "string"),
], ids=["front-without-url", "scheme", "no-port", "port-0", "port-too-large", "space", "all-with-url",
        "encoder-with-url", "stage-not-enum", "url-not-str"])
def test_invalid_stage_settings_name_the_field_and_the_fix(changes: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        RuntimeConfig(**changes)
    assert info.value.field == field
    assert words in info.value.message


@pytest.mark.parametrize("url", ["127.0.0.1:8001", "encoder.default.svc.cluster.local:8001", "[::1]:8001",
                                 "localhost:65535"])
def test_front_accepts_host_port_addresses(url: str) -> None:
    assert RuntimeConfig(stage=Stage.FRONT, image_encoder_url=url).image_encoder_url == url


def test_served_model_name_per_stage() -> None:
    assert served_model_name(RuntimeConfig(model_name="mm")) == "mm"
    assert served_model_name(FRONT.replace(model_name="mm")) == "mm"
    assert served_model_name(ENCODER.replace(model_name="mm")) == IMAGE_ENCODER_MODEL == "image_encoder"


def _params(pbtxt: str) -> dict[str, str]:
    out = {}
    for block in pbtxt.split("parameters {")[1:]:
        key = block.split('key: "', 1)[1].split('"', 1)[0]
        out[key] = block.split('string_value: "', 1)[1].split('"', 1)[0]
    return out


def test_encoder_stage_is_one_batched_image_model_whatever_the_model_name() -> None:
    files = build_repository(ENCODER.replace(model_name="mm", max_queue_delay_microseconds=700))
    assert sorted(files) == ["image_encoder/1/model.py", "image_encoder/config.pbtxt"]
    text = files["image_encoder/config.pbtxt"]
    assert text.startswith('name: "image_encoder"\nbackend: "python"\nmax_batch_size: 16\n')  # >= 16 images
    assert 'name: "IMAGE"\n    data_type: TYPE_STRING\n    dims: [ 1 ]' in text
    assert 'name: "FEATURES"\n    data_type: TYPE_FP32\n    dims: [ 1280 ]' in text
    assert 'name: "CLASSES"\n    data_type: TYPE_INT32\n    dims: [ 1 ]' in text
    assert 'name: "IMAGE_SIZE"\n    data_type: TYPE_INT32\n    dims: [ 2 ]' in text
    assert "dynamic_batching {\n  max_queue_delay_microseconds: 700\n}" in text
    assert "kind: KIND_CPU" in text and "response_cache" not in text
    params = _params(text)
    assert params["preload"] == "image" and params["embedding_cache"] == "true"
    assert "image_encoder_url" not in params
    assert "stage_models import ImageEncoderStageModel as TritonPythonModel" in files["image_encoder/1/model.py"]
    assert ModelSettings.from_model_config({"parameters": {k: {"string_value": v} for k, v in params.items()}}
                                           ).preload == ("image",)


def test_encoder_stage_follows_the_engine_batching_and_gpus() -> None:
    naive = build_repository(PRESETS["naive"].replace(stage=Stage.IMAGE_ENCODER))["image_encoder/config.pbtxt"]
    assert "max_batch_size: 16" in naive and "dynamic_batching" not in naive  # every request alone, as naive
    fastest = _params(build_repository(PRESETS["fastest"].replace(stage=Stage.IMAGE_ENCODER))[
        "image_encoder/config.pbtxt"])
    assert fastest["engine"] == "openvino" and fastest["precision"] == "INT8"
    assert fastest["image_int8_min_side_pixels"] == "160"
    gpu = build_repository(ENCODER.replace(gpu_count=2, precision=Precision.INT8))["image_encoder/config.pbtxt"]
    assert "max_batch_size: 64" in gpu and "kind: KIND_GPU\n    gpus: [ 0, 1 ]" in gpu
    assert _params(gpu)["precision"] == "FP16"  # INT8 is CPU-only: as the GPU layout's encoders
    many = build_repository(ENCODER.replace(max_batch_size=32))["image_encoder/config.pbtxt"]
    assert "max_batch_size: 32" in many


def test_front_stage_keeps_the_router_and_replaces_each_batched_model() -> None:
    cfg = FRONT.replace(model_name="mm", cpu_cores=2.0)
    files = build_repository(cfg)
    assert sorted(files) == sorted(build_repository(cfg.replace(stage=Stage.ALL, image_encoder_url="")))
    assert files["mm/config.pbtxt"] == render_router_pbtxt(cfg) == build_repository(
        RuntimeConfig(model_name="mm", cpu_cores=2.0))["mm/config.pbtxt"]
    preload = {}
    for modality in ("image", "text", "image_text"):
        text = files[f"mm_{modality}/config.pbtxt"]
        params = _params(text)
        assert params["image_encoder_url"] == URL and params["image_encoder_model"] == "image_encoder"
        preload[modality] = params["preload"]
        assert "stage_models import FrontModel as TritonPythonModel" in files[f"mm_{modality}/1/model.py"]
        one_piece = build_repository(RuntimeConfig(model_name="mm", cpu_cores=2.0))[f"mm_{modality}/config.pbtxt"]
        assert text.split("parameters {")[0] == one_piece.split("parameters {")[0]  # same interface and batching
    assert preload == {"image": "", "text": "text", "image_text": "text"}  # never the image encoder


def test_front_stage_without_router_is_one_model_with_the_text_encoder_only() -> None:
    files = build_repository(PRESETS["naive"].replace(stage=Stage.FRONT, image_encoder_url=URL))
    assert sorted(files) == ["multimodal/1/model.py", "multimodal/config.pbtxt"]
    params = _params(files["multimodal/config.pbtxt"])
    assert params["preload"] == "text" and params["image_encoder_url"] == URL
    gpu = build_repository(FRONT.replace(gpu_count=1, precision=Precision.INT8))
    assert all(_params(t)["precision"] == "FP16" for p, t in gpu.items() if p.endswith("_text/config.pbtxt"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modalscale")
    cli.add_parser(parser.add_subparsers(dest="command"))
    return parser


def _config(*argv: str) -> RuntimeConfig:
    return cli.config_from_args(_parser().parse_args(["runtime", "serve", *argv]))


@pytest.mark.parametrize("cfg", [FRONT, ENCODER, PRESETS["fastest"].replace(stage=Stage.IMAGE_ENCODER),
                                 PRESETS["naive"].replace(stage=Stage.FRONT, image_encoder_url="127.0.0.1:9")],
                         ids=["front", "encoder", "fastest-encoder", "naive-front"])
def test_stage_flags_give_back_the_config(cfg: RuntimeConfig) -> None:
    flags = config_flags(cfg)
    assert flags[flags.index("--stage") + 1] == cfg.stage.value
    assert _config(*flags) == cfg


def test_front_flag_without_url_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["runtime", "render", "--stage", "front", "--out", str(tmp_path / "repo")])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "--image-encoder-url: required for stage front" in err and "(image_encoder_url)" in err
    args = _parser().parse_args(["runtime", "render", "--stage", "image-encoder", "--out", str(tmp_path / "enc")])
    assert args.func(args) == 0
    assert sorted(p.name for p in (tmp_path / "enc").iterdir()) == [".modalscale-repository", "image_encoder"]


def test_front_checks_every_non_image_rule_in_the_one_piece_order() -> None:
    settings = ModelSettings(max_images_per_request=2)
    cases = [(None, None), (np.array([[b"a", b"b", b"c"]], dtype=object), None),
             (None, np.array([[b"\xff"]], dtype=object)), (np.zeros((1, 0), dtype=object), np.array([[b" "]], object)),
             (np.array([[b"x"] * 3], dtype=object), np.array([[b"\xff"]], dtype=object))]
    for images, text in cases:
        with pytest.raises(RequestError) as front:
            check_request(images, text, settings)
        with pytest.raises(RequestError) as whole:
            parse_request(images, text, settings)
        assert (front.value.reason, str(front.value)) == (whole.value.reason, str(whole.value))
    items, text = check_request(np.array([[b"not decoded"]], dtype=object), None, settings)
    assert items == [b"not decoded"] and text is None  # images are left to the pool


@pytest.mark.parametrize(("status", "message", "reason", "kind", "starts"), [
    ("StatusCode.INVALID_ARGUMENT", "CorruptImage: IMAGES[0]: not a recognised image format", "CorruptImage", CLIENT,
     "CorruptImage: IMAGES[0]"),
    ("StatusCode.INVALID_ARGUMENT", "inference request batch-size must be <= 16", "ImageEncoderRejected", CLIENT,
     "ImageEncoderRejected: inference"),
    ("StatusCode.INTERNAL", "InternalError: RuntimeError: boom", "InternalError", INTERNAL,
     f"InternalError: image encoder pool at {URL}"),
    ("StatusCode.UNAVAILABLE", "failed to connect to all addresses", IMAGE_ENCODER_UNAVAILABLE, UNAVAILABLE,
     f"ImageEncoderUnavailable: the image encoder pool at {URL} did not answer (UNAVAILABLE: failed"),
    ("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded", IMAGE_ENCODER_UNAVAILABLE, UNAVAILABLE,
     "ImageEncoderUnavailable:"),
    ("StatusCode.NOT_FOUND", "Request for unknown model: 'image_encoder' is not found", IMAGE_ENCODER_UNAVAILABLE,
     UNAVAILABLE, "ImageEncoderUnavailable:"),
    (None, "no answer within 60 s", IMAGE_ENCODER_UNAVAILABLE, UNAVAILABLE, "ImageEncoderUnavailable:"),
    ("StatusCode.UNAVAILABLE", "OutOfMemory: the replica ran out of memory for this request (MemoryError: ); retry",
     "OutOfMemory", UNAVAILABLE, f"OutOfMemory: image encoder pool at {URL}: the replica ran out of memory"),
], ids=["bad-image", "triton-refusal", "internal", "unreachable", "deadline", "no-model", "no-status",
        "pool-out-of-memory"])
def test_pool_errors_map_to_the_requests_own_error(status: str | None, message: str, reason: str, kind: str,
                                                   starts: str) -> None:
    failure = classify_encoder_error(status, message, URL)
    assert (failure.reason, failure.kind) == (reason, kind)
    assert failure.message.startswith(starts)
    assert failure.message.startswith(failure.reason + ": ")


class StandInEncoder:
    """Text feature = token count; fusion = (mean image feature 0, text feature 0); records the order of events."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def token_ids(self, text: str) -> list[int]:
        return [101] + [1000 + i for i, _ in enumerate(text.split())] + [102]

    def encode_texts(self, ids: list[list[int]], pad_to: int) -> np.ndarray:
        self.events.append(f"texts {len(ids)}")
        out = np.zeros((len(ids), 384), dtype=np.float32)
        out[:, 0] = [len(row) for row in ids]
        return out

    def fuse(self, image: np.ndarray, image_present: np.ndarray, text: np.ndarray, text_present: np.ndarray
             ) -> np.ndarray:
        self.events.append(f"fuse {len(image)}")
        out = np.zeros((image.shape[0], 256), dtype=np.float32)
        out[:, 0] = image[:, 0] * image_present
        out[:, 1] = text[:, 0] * text_present
        return out


class StandInPool:
    """Answers a call only when the test (or the texts' encoding) says so: feature 0 = image byte length."""

    def __init__(self, events: list[str], fail: dict[bytes, EncoderFailure] | None = None) -> None:
        self.events = events
        self.fail = fail or {}
        self.pending: list[tuple[list[bytes], concurrent.futures.Future[RemoteImages]]] = []

    def start(self, images: list[bytes]) -> concurrent.futures.Future[RemoteImages]:
        self.events.append(f"call {len(images)}")
        future: concurrent.futures.Future[RemoteImages] = concurrent.futures.Future()
        self.pending.append((images, future))
        return future

    def answer_all(self) -> None:
        for images, future in self.pending:
            if images[0] in self.fail:
                future.set_exception(self.fail[images[0]])
                continue
            feats = np.zeros((len(images), 1280), dtype=np.float32)
            feats[:, 0] = [len(b) for b in images]
            future.set_result(RemoteImages(features=feats, classes=np.arange(len(images), dtype=np.int32),
                                           sizes=np.array([[len(b), 2] for b in images], dtype=np.int32),
                                           seconds=0.25))
        self.events.append("answered")
        self.pending = []


def _front(events: list[str], pool: StandInPool, timeout_s: float = 5.0) -> tuple[FrontPipeline, StandInEncoder]:
    encoder = StandInEncoder(events)
    original = encoder.encode_texts

    def texts_then_answer(ids: list[list[int]], pad_to: int) -> np.ndarray:
        out = original(ids, pad_to)
        pool.answer_all()  # the pool answers only after the texts were encoded: run() must not wait before them
        return out

    encoder.encode_texts = texts_then_answer  # type: ignore[method-assign]
    counter = itertools.count()
    front = FrontPipeline(ModelSettings(image_encoder_url=URL), encoder, pool.start,  # type: ignore[arg-type]
                          clock=lambda: next(counter) * 0.01, timeout_s=timeout_s)
    return front, encoder


def _request(images: list[bytes] | None, text: str | None) -> tuple[Any, Any]:
    return (None if images is None else np.array([images], dtype=object),
            None if text is None else np.array([[text.encode()]], dtype=object))


def test_front_sends_the_images_before_it_encodes_the_texts_and_fuses_after_both() -> None:
    events: list[str] = []
    pool = StandInPool(events)
    front, _ = _front(events, pool)
    batch = [front.prepare(*_request([b"abc", b"abcde"], "two words")), front.prepare(*_request(None, "one")),
             front.prepare(*_request([b"abcdefg"], None))]
    assert [p.modality for p in batch] == ["image_text", "text", "image"]
    outputs = front.run(batch)
    assert events == ["call 2", "call 1", "texts 2", "answered", "fuse 3"]
    both, text, image = outputs
    assert isinstance(both, FrontOutput) and isinstance(text, FrontOutput) and isinstance(image, FrontOutput)
    assert both.embedding[0] == pytest.approx(4.0) and both.embedding[1] == 4  # mean of 3 and 5; [CLS] two words [SEP]
    assert list(both.image_classes) == [0, 1] and both.image_pixels == [6, 10]
    assert both.text_tokens == 2 and both.stage_s["image_encoder"] == 0.25
    assert set(both.stage_s) == {"decode", "tokenize", "text_encoder", "image_encoder", "fusion"}
    assert text.image_classes.size == 0 and text.image_pixels == [] and "image_encoder" not in text.stage_s
    assert image.embedding[0] == 7 and image.text_tokens is None and "tokenize" not in image.stage_s


def test_a_failed_image_call_fails_only_its_request() -> None:
    events: list[str] = []
    refusal = classify_encoder_error("StatusCode.INVALID_ARGUMENT", "CorruptImage: IMAGES[0]: bad", URL)
    gone = classify_encoder_error("StatusCode.UNAVAILABLE", "connection refused", URL)
    pool = StandInPool(events, fail={b"bad": refusal, b"gone": gone})
    front, _ = _front(events, pool)
    outputs = front.run([front.prepare(*_request([b"bad"], "a text")), front.prepare(*_request(None, "text only")),
                         front.prepare(*_request([b"gone"], None)), front.prepare(*_request([b"fine"], None))])
    assert outputs[0] is refusal and outputs[2] is gone
    assert isinstance(outputs[1], FrontOutput) and isinstance(outputs[3], FrontOutput)
    assert events[-1] == "fuse 2"  # only the served requests are fused


def test_an_image_call_without_answer_fails_as_unavailable_after_the_timeout() -> None:
    events: list[str] = []
    pool = StandInPool(events)
    pool.answer_all = lambda: None  # type: ignore[method-assign]  # the pool never answers
    front, _ = _front(events, pool, timeout_s=0.05)
    out = front.run([front.prepare(*_request([b"img"], "text"))])[0]
    assert isinstance(out, EncoderFailure) and out.kind == UNAVAILABLE and URL in out.message


class FakeChannelClient:
    made = itertools.count()

    def __init__(self, url: str) -> None:
        self.url = url
        self.serial = next(self.made)
        self.closed = False
        self.calls: list[dict[str, Any]] = []

    def async_infer(self, model: str, inputs: list[Any], callback: Any, outputs: list[Any],
                    client_timeout: float) -> None:
        self.calls.append({"model": model, "inputs": inputs, "timeout": client_timeout})
        self.callback = callback

    def close(self) -> None:
        self.closed = True


def test_pool_client_uses_its_channels_in_turn_and_replaces_old_ones() -> None:
    now = [0.0]
    made: list[FakeChannelClient] = []

    def new(url: str) -> FakeChannelClient:
        made.append(FakeChannelClient(url))
        return made[-1]

    client = ImageEncoderClient(URL, channels=2, max_age_s=30.0, timeout_s=10.0, clock=lambda: now[0],
                                new_client=new)
    for _ in range(4):
        client.start([b"x"])
    assert [len(c.calls) for c in made] == [2, 2] and made[0].calls[0]["model"] == "image_encoder"
    assert made[0].calls[0]["timeout"] == 10.0
    now[0] = 31.0
    client.start([b"x"])  # channel 0 is too old: replaced, the old one kept open for its calls in flight
    assert len(made) == 3 and len(made[2].calls) == 1 and not made[0].closed
    now[0] = 46.5  # past the old channel's last deadline (10 s + 5 s margin)
    client.start([b"x"])
    assert made[0].closed and len(made) == 4  # channel 1 was replaced too (46.5 > 30)
    client.close()
    assert all(c.closed for c in made)


def test_pool_client_turns_answers_and_errors_into_the_future() -> None:
    made: list[FakeChannelClient] = []
    seconds = iter([1.0, 1.5, 2.0, 2.5])
    client = ImageEncoderClient(URL, channels=1, new_client=lambda url: made.append(FakeChannelClient(url))
                                or made[-1], call_clock=lambda: next(seconds), retry_window_s=0.0)

    class Answer:
        def __init__(self, outputs: dict[str, np.ndarray]) -> None:
            self.outputs = outputs

        def as_numpy(self, name: str) -> np.ndarray | None:
            return self.outputs.get(name)

    class Error:
        def status(self) -> str:
            return "StatusCode.UNAVAILABLE"

        def message(self) -> str:
            return "failed to connect to all addresses"

    ok = client.start([b"a", b"b"])
    made[0].callback(result=Answer({"FEATURES": np.ones((2, 1280), np.float32), "CLASSES": np.array([[3], [4]]),
                                    "IMAGE_SIZE": np.array([[4, 3], [2, 2]])}), error=None)
    assert ok.result(0).seconds == 0.5 and list(ok.result(0).classes) == [3, 4]
    failed = client.start([b"a"])
    made[0].callback(result=None, error=Error())
    with pytest.raises(EncoderFailure, match=f"pool at {URL} did not answer"):
        failed.result(0)
    with pytest.raises(ValueError, match="shapes"):
        decode_answer(Answer({"FEATURES": np.ones((1, 1280), np.float32), "CLASSES": np.array([[3]]),
                              "IMAGE_SIZE": np.array([[4, 3]])}), 2, 0.0)


class StatusError:
    def __init__(self, status: str) -> None:
        self._status = status

    def status(self) -> str:
        return self._status

    def message(self) -> str:
        return f"{self._status}: from the stand-in"


def _retrying_client(channels: int = 2, timeout_s: float = 60.0
                     ) -> tuple[ImageEncoderClient, list[FakeChannelClient], list[float]]:
    """A client whose retries run at once, each moving its clock on by the retry's delay (recorded)."""
    made: list[FakeChannelClient] = []
    now = [0.0]
    delays: list[float] = []

    def schedule(delay_s: float, fn: Any) -> None:
        delays.append(delay_s)
        now[0] += delay_s
        fn()

    client = ImageEncoderClient(URL, channels=channels, timeout_s=timeout_s, clock=lambda: now[0],
                                new_client=lambda url: made.append(FakeChannelClient(url)) or made[-1],
                                schedule=schedule, max_age_s=1e9)
    return client, made, delays


@pytest.mark.parametrize("status", ["StatusCode.UNAVAILABLE", "StatusCode.NOT_FOUND"])
def test_a_call_whose_pod_is_gone_is_sent_again_on_the_next_channel(status: str) -> None:
    """A pod killed with the call in flight (or a connection still sent to its address) answers UNAVAILABLE, a
    stopping Triton (its models unloaded) NOT_FOUND: encoding has no side effect, so the call goes again on the next
    channel, another connection."""
    client, made, delays = _retrying_client()
    future = client.start([b"a"])
    made[0].callback(result=None, error=StatusError(status))
    assert (len(made[0].calls), len(made[1].calls), delays, client.retries) == (1, 1, [0.1], 1)
    assert made[1].calls[0]["timeout"] == pytest.approx(60.0 - 0.1)  # what is left of the call's deadline
    made[1].callback(result=ANSWER_OF_ONE, error=None)
    assert list(future.result(0).classes) == [3]


@pytest.mark.parametrize("status", ["StatusCode.INVALID_ARGUMENT", "StatusCode.DEADLINE_EXCEEDED",
                                    "StatusCode.INTERNAL", None])
def test_other_failures_are_never_sent_again(status: str | None) -> None:
    client, made, delays = _retrying_client()
    future = client.start([b"a"])
    made[0].callback(result=None, error=StatusError(status))  # type: ignore[arg-type]
    assert (delays, client.retries, len(made[1].calls)) == ([], 0, 0)
    with pytest.raises(EncoderFailure):
        future.result(0)


@pytest.mark.parametrize(("timeout_s", "retries"), [
    (60.0, 12),  # delays 0.1 0.2 0.4 0.8 then 1 s: the 12th retry starts at 9.5 s, a 13th would at 10.5 s
    (3.0, 5),  # the deadline comes first: the 5th retry starts at 2.5 s, a 6th would at 3.5 s
])
def test_a_pool_that_stays_down_fails_the_call_after_the_retry_window(timeout_s: float, retries: int) -> None:
    client, made, delays = _retrying_client(timeout_s=timeout_s)
    future = client.start([b"a"])
    for k in range(retries + 1):
        made[k % 2].callback(result=None, error=StatusError("StatusCode.UNAVAILABLE"))
    assert client.retries == retries and delays[:5] == [0.1, 0.2, 0.4, 0.8, 1.0][:retries]
    assert [len(c.calls) for c in made] == [(retries + 2) // 2, (retries + 1) // 2]
    with pytest.raises(EncoderFailure, match="did not answer"):
        future.result(0)
    assert made[retries % 2].calls[-1]["timeout"] == pytest.approx(timeout_s - sum(delays))


class _Answer:
    def __init__(self, outputs: dict[str, np.ndarray]) -> None:
        self.outputs = outputs

    def as_numpy(self, name: str) -> np.ndarray | None:
        return self.outputs.get(name)


ANSWER_OF_ONE = _Answer({"FEATURES": np.ones((1, 1280), np.float32), "CLASSES": np.array([[3]]),
                         "IMAGE_SIZE": np.array([[4, 3]])})


def test_settings_read_the_pool_address() -> None:
    params = {"image_encoder_url": {"string_value": URL}, "image_encoder_model": {"string_value": "enc"}}
    settings = ModelSettings.from_model_config({"parameters": params})
    assert (settings.image_encoder_url, settings.image_encoder_model) == (URL, "enc")
    assert ModelSettings.from_model_config({}).image_encoder_url == ""


def test_router_gives_an_unavailable_pool_back_its_status(monkeypatch: pytest.MonkeyPatch) -> None:
    """BLS loses the front model's status code; the router restores it from the message's reason."""
    fake = types.ModuleType("triton_python_backend_utils")
    fake.TritonError = type("TritonError", (), {"INVALID_ARG": 400, "UNAVAILABLE": 503,  # type: ignore[attr-defined]
                                                "INTERNAL": 500})
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake)
    import modalscale.runtime.model as package

    spec = importlib.util.spec_from_file_location("_router_under_test", Path(package.__file__).parent / "router.py")
    assert spec is not None and spec.loader is not None
    router = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(router)
    unavailable = classify_encoder_error("StatusCode.UNAVAILABLE", "connection refused", URL).message
    assert router._code(unavailable) == 503
    assert router._code("CorruptImage: IMAGES[0]: not a recognised image format") == 400
    assert router._code(classify_encoder_error("StatusCode.INTERNAL", "boom", URL).message) == 500
    assert router._code("ImageEncoderUnavailableish: no") == 400  # only the exact reason
    # a replica out of memory (triton_model.server_failure) is transient, 503 through the router as without it
    assert router._code("OutOfMemory: the replica ran out of memory for this request (MemoryError: ); retry") == 503
