"""One request's fault never fails the other requests of its batch (runtime adapters of the Python backend).

A request whose validation raised anything but a ``RequestError`` used to leave ``execute`` with the exception, and
Triton failed every request of the batch with it: a palette PNG whose tRNS is longer than its palette did so (a
bare ``ValueError`` from Pillow's RGB conversion), with valid requests beside it. ``decode_image`` now refuses that
image; this checks the whole kind: whatever ``prepare`` raises for one request, the others are served, and that one
gets an ``InternalError`` of its own, counted.

The adapters import ``triton_python_backend_utils``, which exists only inside the backend's stub process: a small
stand-in module records the responses, as in ``test_runtime_stages.py``.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from modalscale.runtime.model import metrics as names
from modalscale.runtime.model.inputs import RequestError
from modalscale.runtime.model.settings import ModelSettings


def _stand_in() -> types.ModuleType:
    fake = types.ModuleType("triton_python_backend_utils")

    class TritonError:
        INVALID_ARG, INTERNAL, UNAVAILABLE = 400, 500, 503

        def __init__(self, message: str, code: int = 500) -> None:
            self.message, self.code = message, code

    fake.TritonError = TritonError  # type: ignore[attr-defined]
    fake.TritonModelException = type("TritonModelException", (Exception,), {})  # type: ignore[attr-defined]
    fake.InferenceResponse = lambda output_tensors=None, error=None: SimpleNamespace(  # type: ignore[attr-defined]
        outputs=output_tensors, error=error)
    fake.Tensor = lambda name, array: (name, array)  # type: ignore[attr-defined]
    fake.get_input_tensor_by_name = lambda request, name: (  # type: ignore[attr-defined]
        SimpleNamespace(as_numpy=lambda: request[name]) if name in request else None)
    return fake


@pytest.fixture(autouse=True)
def _forget_the_adapters() -> Iterator[None]:
    """Drop the adapter modules a test imported against the stand-in (``stage_models`` imports ``triton_model`` by
    its package name), from ``sys.modules`` and from the package's attributes, so no later test gets them bound to
    it."""
    import modalscale.runtime.model as package

    before, attributes = set(sys.modules), set(vars(package))
    yield
    for name in set(sys.modules) - before:
        if name.endswith(("triton_model", "stage_models", "gpu_models", "_under_test")):
            del sys.modules[name]
    for name in set(vars(package)) - attributes:  # the package's attribute of the submodule, too
        delattr(package, name)


def _module(monkeypatch: pytest.MonkeyPatch, name: str) -> Any:
    """``modalscale.runtime.model.<name>`` loaded afresh against the stand-in ``triton_python_backend_utils``."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _stand_in())
    import modalscale.runtime.model as package

    spec = importlib.util.spec_from_file_location(f"_{name}_under_test", Path(package.__file__).parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


class _Pipeline:
    """``prepare`` raises what the request's TEXT names (``b"crash"``: a ``KeyError``, ``b"invalid"``: a
    ``RequestError``); ``run`` answers the others with an embedding."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def prepare(self, images: Any, text: Any) -> Any:
        word = text[0][0].decode()
        if word == "crash":
            raise KeyError("a fault no check named")
        if word == "invalid":
            raise RequestError("InvalidUtf8", "TEXT: not UTF-8")
        modality = SimpleNamespace(value="text")
        return SimpleNamespace(word=word, text_tokens=3, stage_s={"decode": 0.001},
                               parsed=SimpleNamespace(modality=modality, images=(), text=word))

    def run(self, prepared: list[Any]) -> list[Any]:
        self.ran = [p.word for p in prepared]
        return [SimpleNamespace(modality="text", stage_s={"text": 0.01}, cache_hits=0, cache_misses=1,
                                embedding=np.ones(4, dtype=np.float32), image_classes=np.zeros(0, dtype=np.int64))
                for _ in prepared]


def test_a_request_whose_validation_crashes_fails_alone_and_its_batch_is_served(
        monkeypatch: pytest.MonkeyPatch) -> None:
    triton_model = _module(monkeypatch, "triton_model")
    model = object.__new__(triton_model.TritonPythonModel)
    model.settings, model.pipeline = ModelSettings(), _Pipeline()
    requests = [{"TEXT": np.array([[w.encode()]], dtype=object)} for w in ("a cat", "crash", "invalid", "a dog")]
    batch = names.MetricBatch()

    responses = model._execute(requests, batch)

    assert model.pipeline.ran == ["a cat", "a dog"]
    assert [r.error is None for r in responses] == [True, False, False, True]
    assert responses[1].error.code == 500 and responses[1].error.message.startswith("InternalError: KeyError")
    assert responses[2].error.code == 400 and responses[2].error.message.startswith("InvalidUtf8")
    errors = {dict(label_set)["reason"]: by for op, name, label_set, by in batch.calls()
              if name == names.REQUEST_ERRORS_TOTAL}
    assert errors == {"InternalError": 1, "InvalidUtf8": 1}


@pytest.mark.parametrize("model_class, input_name", [("ImageEncoderStageModel", "ENCODER_IMAGE"),
                                                     ("FrontModel", "INPUT_IMAGES")])
def test_the_staged_models_fail_a_crashing_request_alone(monkeypatch: pytest.MonkeyPatch, model_class: str,
                                                        input_name: str) -> None:
    """The encoder pool's and the front's own validation loops: the crashing request gets its ``InternalError``,
    the call does not raise (it raised out of ``execute`` before, failing the batch)."""
    stage_models = _module(monkeypatch, "stage_models")
    cls = getattr(stage_models, model_class, None)
    assert cls is not None, [n for n in dir(stage_models) if n.endswith("Model")]
    model = object.__new__(cls)

    def prepare(images: Any, text: Any) -> Any:
        raise KeyError("a fault no check named")

    model.pipeline = model.front = SimpleNamespace(prepare=prepare)
    name = getattr(stage_models, input_name)
    batch = names.MetricBatch()
    responses = model._execute([{name: np.array([[b"x"]], dtype=object)}], batch)
    (response,) = responses
    assert response.error.code == 500 and response.error.message.startswith("InternalError: KeyError")
    assert [(name_, by) for op, name_, _, by in batch.calls() if name_ == names.REQUEST_ERRORS_TOTAL] == [
        (names.REQUEST_ERRORS_TOTAL, 1)]


def test_the_gpu_layouts_orchestrator_answers_each_request_as_the_batched_models_do(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU layout's orchestrator validates one request at a time (``_one``): a request whose validation raised
    anything but a ``RequestError`` left ``execute`` with the exception (Triton answered every request of the call
    with it, as an unlabelled 500, uncounted); it gets the batched models' ``InternalError`` of its own now, and a
    ``RequestError`` its 400 naming the field, as before."""
    gpu_models = _module(monkeypatch, "gpu_models")
    model = object.__new__(gpu_models.OrchestratorModel)
    model.pipeline = _Pipeline()
    sent: list[names.MetricBatch] = []
    model.metrics = SimpleNamespace(inflight=SimpleNamespace(increment=lambda by: None), send=sent.append)
    encoded: list[str] = []

    def encode(prep: Any) -> Any:
        encoded.append(prep.word)
        return np.ones(4, dtype=np.float32), np.zeros(0, dtype=np.int32), 0, 0

    model._encode = encode
    requests = [{"TEXT": np.array([[w.encode()]], dtype=object)} for w in ("a cat", "crash", "invalid", "a dog")]

    responses = model.execute(requests)

    assert encoded == ["a cat", "a dog"]
    assert [r.error is None for r in responses] == [True, False, False, True]
    assert responses[1].error.code == 500 and responses[1].error.message.startswith("InternalError: KeyError")
    assert responses[2].error.code == 400 and responses[2].error.message == "InvalidUtf8: TEXT: not UTF-8"
    (batch,) = sent
    errors = {dict(label_set)["reason"]: by for op, name, label_set, by in batch.calls()
              if name == names.REQUEST_ERRORS_TOTAL}
    assert errors == {"InternalError": 1, "InvalidUtf8": 1}


def _counted(batch: names.MetricBatch) -> dict[str, dict[str, float]]:
    """``{series name: {label value: total}}`` of the requests, errors and images counters of ``batch``."""
    out: dict[str, dict[str, float]] = {}
    for op, name, label_set, value in batch.calls():
        key = dict(label_set).get("reason") or dict(label_set).get("modality", "")
        if name in (names.REQUESTS_TOTAL, names.REQUEST_ERRORS_TOTAL):
            out.setdefault(name, {})[key] = out.get(name, {}).get(key, 0.0) + value
        elif name in (names.REQUEST_IMAGES, names.REQUEST_IMAGE_PIXELS):
            out.setdefault(name, {})[key] = out.get(name, {}).get(key, 0.0) + 1  # observations
    return out


def test_a_request_that_passed_validation_and_then_failed_counts_in_both_shapes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``modalscale_requests_total`` counts the requests a model accepted (they passed its validation), failed
    later or not, in both deployment shapes: the one-piece model counted a request whose encoder pass failed, the
    front (stage ``front``) did not, so the autoscaler's demand read lower in the staged shape by every failure."""
    triton_model = _module(monkeypatch, "triton_model")
    stage_models = _module(monkeypatch, "stage_models")
    from modalscale.runtime.model.staged import FrontPrepared

    def broken_run(prepared: list[Any]) -> list[Any]:
        raise RuntimeError("the encoder pass failed")

    one_piece = object.__new__(triton_model.TritonPythonModel)
    one_piece.settings, one_piece.pipeline = ModelSettings(), _Pipeline()
    one_piece.pipeline.run = broken_run
    front = object.__new__(stage_models.FrontModel)
    front.front = SimpleNamespace(
        prepare=lambda images, text: FrontPrepared(modality="text", images=[], token_ids=[101, 102], text_tokens=3),
        run=broken_run)
    requests = [{"TEXT": np.array([[b"a cat"]], dtype=object)}]

    counted = []
    for model in (one_piece, front):
        batch = names.MetricBatch()
        (response,) = model._execute(requests, batch)
        assert response.error.code == 500
        counted.append(_counted(batch))

    assert counted[0][names.REQUESTS_TOTAL] == {"text": 1}
    assert counted[1] == counted[0]


def test_a_front_request_whose_pool_call_failed_counts_as_accepted_unless_the_pool_refused_its_image(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool that failed (500) or did not answer (503) leaves the request accepted, as the one-piece model counts
    a request whose encoder failed, with the images it sent (their pixels are the pool's to tell, so none are
    observed); an image the pool refused (400) was never accepted, as the one-piece model refuses it while it
    validates."""
    stage_models = _module(monkeypatch, "stage_models")
    from modalscale.runtime.model.staged import CLIENT, INTERNAL, UNAVAILABLE, EncoderFailure, FrontPrepared

    failures = [EncoderFailure("ImageEncoderUnavailable", "ImageEncoderUnavailable: down", UNAVAILABLE),
                EncoderFailure("CorruptImage", "CorruptImage: IMAGES[0]: cannot decode image", CLIENT),
                EncoderFailure("InternalError", "InternalError: image encoder pool at x: boom", INTERNAL)]
    front = object.__new__(stage_models.FrontModel)
    front.front = SimpleNamespace(
        prepare=lambda images, text: FrontPrepared(modality="image", images=[b"a", b"b"], token_ids=None,
                                                   text_tokens=None),
        run=lambda prepared: failures)
    batch = names.MetricBatch()

    responses = front._execute([{"IMAGES": np.array([[b"a", b"b"]], dtype=object)}] * 3, batch)

    assert [r.error.code for r in responses] == [503, 400, 500]
    assert _counted(batch) == {
        names.REQUESTS_TOTAL: {"image": 2},
        names.REQUEST_ERRORS_TOTAL: {"ImageEncoderUnavailable": 1, "CorruptImage": 1, "InternalError": 1},
        names.REQUEST_IMAGES: {"image": 2},
    }
    images = [value for op, name, _, value in batch.calls() if name == names.REQUEST_IMAGES]
    assert images == [2.0, 2.0]


class _OutOfMemoryPipeline(_Pipeline):
    """``_Pipeline`` whose ``prepare`` runs out of memory on TEXT ``b"huge"`` (a large image decoded on a replica
    near its memory limit: Pillow's or numpy's ``MemoryError``)."""

    def prepare(self, images: Any, text: Any) -> Any:
        if text[0][0] == b"huge":
            raise MemoryError("cannot allocate 1.2 GiB for the decoded image")
        return super().prepare(images, text)


def test_a_request_that_runs_out_of_memory_gets_a_retryable_unavailable_in_every_model_shape(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``MemoryError`` while one request is decoded is the replica's resource exhaustion, not a fault of the request
    nor a bug: it was a 500 ``InternalError``, which clients and the gateway do not retry and the error counter mixed
    with real bugs. Every model that validates requests (one-piece, the GPU layout's orchestrator, the pool, the
    front) answers it ``UNAVAILABLE`` (HTTP 503, gRPC UNAVAILABLE: Triton's code for a transient server-side failure;
    the Python backend has no RESOURCE_EXHAUSTED) with reason ``OutOfMemory``, and serves the rest of its batch."""
    triton_model = _module(monkeypatch, "triton_model")
    requests = [{"TEXT": np.array([[w.encode()]], dtype=object)} for w in ("a cat", "huge", "a dog")]
    one_piece = object.__new__(triton_model.TritonPythonModel)
    one_piece.settings, one_piece.pipeline = ModelSettings(), _OutOfMemoryPipeline()
    batch = names.MetricBatch()

    responses = one_piece._execute(requests, batch)

    assert one_piece.pipeline.ran == ["a cat", "a dog"]
    assert [r.error is None for r in responses] == [True, False, True]
    assert responses[1].error.code == 503, responses[1].error.message
    assert responses[1].error.message.startswith("OutOfMemory: ")
    assert "1.2 GiB" in responses[1].error.message
    assert _counted(batch)[names.REQUEST_ERRORS_TOTAL] == {"OutOfMemory": 1}

    gpu_models = _module(monkeypatch, "gpu_models")
    orchestrator = object.__new__(gpu_models.OrchestratorModel)
    orchestrator.pipeline = _OutOfMemoryPipeline()
    batch = names.MetricBatch()
    response = orchestrator._one(requests[1], batch, 1, 3)
    assert (response.error.code, response.error.message.split(":")[0]) == (503, "OutOfMemory")

    stage_models = _module(monkeypatch, "stage_models")
    for cls, name in ((stage_models.ImageEncoderStageModel, stage_models.ENCODER_IMAGE),
                      (stage_models.FrontModel, stage_models.INPUT_IMAGES)):
        model = object.__new__(cls)

        def prepare(images: Any, text: Any) -> Any:
            raise MemoryError("cannot allocate")

        model.pipeline = model.front = SimpleNamespace(prepare=prepare)
        batch = names.MetricBatch()
        (response,) = model._execute([{name: np.array([[b"x"]], dtype=object)}], batch)
        assert (response.error.code, response.error.message.split(":")[0]) == (503, "OutOfMemory"), cls
        assert _counted(batch)[names.REQUEST_ERRORS_TOTAL] == {"OutOfMemory": 1}


def _passing_models(monkeypatch: pytest.MonkeyPatch, broken: Callable[..., Any]) -> list[tuple[Any, dict[str, Any]]]:
    """``(model, request)`` for each batched model whose pass is ``broken`` (raises): the one-piece model, the staged
    front and the image encoder pool, each with a request that passes validation."""
    triton_model = _module(monkeypatch, "triton_model")
    stage_models = _module(monkeypatch, "stage_models")
    from modalscale.runtime.model.staged import FrontPrepared

    one_piece = object.__new__(triton_model.TritonPythonModel)
    one_piece.settings, one_piece.pipeline = ModelSettings(), _Pipeline()
    one_piece.pipeline.run = broken
    front = object.__new__(stage_models.FrontModel)
    front.front = SimpleNamespace(
        prepare=lambda images, text: FrontPrepared(modality="text", images=[], token_ids=[101, 102], text_tokens=3),
        run=broken)
    pool = object.__new__(stage_models.ImageEncoderStageModel)
    pool.pipeline = SimpleNamespace(
        prepare=lambda images, text: SimpleNamespace(parsed=SimpleNamespace(images=()), stage_s={}),
        image_entries=broken)
    return [(one_piece, {"TEXT": np.array([[b"a cat"]], dtype=object)}),
            (front, {"TEXT": np.array([[b"a cat"]], dtype=object)}),
            (pool, {stage_models.ENCODER_IMAGE: np.array([[b"x"]], dtype=object)})]


@pytest.mark.parametrize("exc", [MemoryError("cannot allocate"), torch.OutOfMemoryError("CUDA out of memory")])
def test_a_batch_that_runs_out_of_memory_is_answered_unavailable_not_raised(monkeypatch: pytest.MonkeyPatch,
                                                                            exc: Exception) -> None:
    """The same kind after validation: a ``MemoryError`` in the encoder pass left ``execute`` (Triton failed the
    batch with an unlabelled 500, uncounted), and torch's out of memory (a ``RuntimeError``) was an
    ``InternalError``; both are ``OutOfMemory`` 503 for each request of the batch now, in each batched model."""
    def broken(prepared: list[Any]) -> Any:
        raise exc

    for model, request in _passing_models(monkeypatch, broken):
        batch = names.MetricBatch()
        (response,) = model._execute([request], batch)
        assert (response.error.code, response.error.message.split(":")[0]) == (503, "OutOfMemory"), model
        assert _counted(batch)[names.REQUEST_ERRORS_TOTAL] == {"OutOfMemory": 1}


@pytest.mark.parametrize("exc, code, reason", [
    (MemoryError("cannot allocate 3.1 GiB"), 503, "OutOfMemory"),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.1 GiB"), 503, "OutOfMemory"),
    (IndexError("a fault no check named"), 500, "InternalError"),
])
@pytest.mark.parametrize("model_class", ["ImageEncoderModel", "TextEncoderModel"])
def test_the_gpu_layouts_encoders_answer_every_request_of_a_failed_pass(
        monkeypatch: pytest.MonkeyPatch, model_class: str, exc: Exception, code: int, reason: str) -> None:
    """The GPU layout's encoder models caught only ``RuntimeError`` and ``ValueError``: a ``MemoryError`` (or any
    other exception) left ``execute`` and Triton failed the whole dynamic batch (up to 64 images, from every
    orchestrator instance) with its own unlabelled message, and torch's out of memory was an ``InternalError`` 500;
    each request of the pass gets the one mapping's answer now (``OutOfMemory`` 503, else ``InternalError`` 500)."""
    gpu_models = _module(monkeypatch, "gpu_models")
    model = object.__new__(getattr(gpu_models, model_class))
    model.inflight = SimpleNamespace(increment=lambda by: None)

    def encode(requests: list[Any]) -> list[Any]:
        raise exc

    model._encode = encode

    responses = model.execute([{}, {}, {}])

    assert [(r.error.code, r.error.message.split(":")[0]) for r in responses] == [(code, reason)] * 3
    assert type(exc).__name__ in responses[0].error.message


@pytest.mark.parametrize("answered, code, reason", [
    ("OutOfMemory: the replica ran out of memory for this request (OutOfMemoryError: CUDA out of memory); retry",
     503, "OutOfMemory"),
    ("InternalError: IndexError: a fault no check named", 500, "InternalError"),
])
def test_the_gpu_layouts_orchestrator_keeps_its_encoders_out_of_memory(
        monkeypatch: pytest.MonkeyPatch, answered: str, code: int, reason: str) -> None:
    """BLS gives the orchestrator only the encoder's message (its code is lost, as behind the router): an encoder's
    ``OutOfMemory`` was re-raised as a ``RuntimeError`` and answered ``InternalError: RuntimeError: OutOfMemory: ...``
    (500, counted InternalError), so a GPU out of memory in the GPU layout never reached the client as the 503 the
    other layouts give; the orchestrator keeps the reason and its code now, counted under it."""
    gpu_models = _module(monkeypatch, "gpu_models")
    error = SimpleNamespace(message=lambda: answered)
    answer = SimpleNamespace(has_error=lambda: True, error=lambda: error)
    monkeypatch.setattr(gpu_models.pb_utils, "InferenceRequest",
                        lambda **kwargs: SimpleNamespace(exec=lambda: answer), raising=False)
    model = object.__new__(gpu_models.OrchestratorModel)
    model.pipeline, model.cache = _Pipeline(), None
    model.settings = SimpleNamespace(image_bucket_sides=(128, 256, 384))
    model.routes = {"image_encoder": "mm_image_encoder", "text_encoder": "mm_text_encoder"}
    prepared = model.pipeline.prepare(None, np.array([[b"a cat"]], dtype=object))
    prepared.token_ids = [101, 102]
    model.pipeline.prepare = lambda images, text: prepared
    batch = names.MetricBatch()

    response = model._one({"TEXT": np.array([[b"a cat"]], dtype=object)}, batch, 0, 1)

    assert (response.error.code, response.error.message.split(":")[0]) == (code, reason), response.error.message
    assert response.error.message.startswith(f"{reason}: mm_text_encoder: "), response.error.message
    assert answered.removeprefix(f"{reason}: ") in response.error.message
    assert "RuntimeError" not in response.error.message
    assert _counted(batch)[names.REQUEST_ERRORS_TOTAL] == {reason: 1}


def test_an_encoder_pass_that_raises_anything_fails_its_requests_not_the_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The batched models caught ``RuntimeError``, ``ValueError`` and ``MemoryError`` from the encoder pass; anything
    else (an ``IndexError`` of a bug) left ``execute`` and Triton failed the batch with its own unlabelled 500,
    uncounted, the requests that failed validation beside it included. Each request of the pass gets its counted
    ``InternalError`` now, in every model that runs one, and the others keep their own answers."""
    gpu_models = _module(monkeypatch, "gpu_models")

    def broken(*args: Any) -> Any:
        raise IndexError("a fault no check named")

    for model, request in _passing_models(monkeypatch, broken):
        batch = names.MetricBatch()
        (response,) = model._execute([request], batch)
        assert (response.error.code, response.error.message.split(":")[0]) == (500, "InternalError"), model
        assert "IndexError" in response.error.message
        assert _counted(batch)[names.REQUEST_ERRORS_TOTAL] == {"InternalError": 1}

    orchestrator = object.__new__(gpu_models.OrchestratorModel)
    orchestrator.pipeline = _Pipeline()
    orchestrator._encode = broken
    batch = names.MetricBatch()
    response = orchestrator._one({"TEXT": np.array([[b"a cat"]], dtype=object)}, batch, 0, 1)
    assert (response.error.code, response.error.message.split(":")[0]) == (500, "InternalError")
    assert _counted(batch)[names.REQUEST_ERRORS_TOTAL] == {"InternalError": 1}


def test_the_router_answers_a_request_whose_forwarding_raised_and_serves_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The router caught only ``TritonModelException`` around its BLS call: anything else (a ``MemoryError`` copying
    the answer, a bug) left ``execute`` and failed every request of the call; that request gets its counted
    ``InternalError`` (or ``OutOfMemory`` 503) now and the next is forwarded."""
    router = _module(monkeypatch, "router")
    served = SimpleNamespace(has_error=lambda: False)
    calls: list[str] = []

    def request(model_name: str, inputs: Any, requested_output_names: Any) -> Any:
        calls.append(model_name)
        if len(calls) == 1:
            raise MemoryError("cannot allocate the answer")
        if len(calls) == 2:
            raise KeyError("a fault no check named")
        return SimpleNamespace(exec=lambda: served)

    monkeypatch.setattr(router.pb_utils, "InferenceRequest", request, raising=False)
    monkeypatch.setattr(router.pb_utils, "get_output_tensor_by_name", lambda answer, name: name, raising=False)
    model = object.__new__(router.TritonPythonModel)
    model.routes = {"image": "mm_image", "text": "mm_text", "image_text": "mm_image_text"}
    errors: dict[str, float] = {}
    model.errors_family = SimpleNamespace(Metric=lambda labels: SimpleNamespace(
        increment=lambda by: errors.__setitem__(labels["reason"], errors.get(labels["reason"], 0) + by)))
    model.missing_input, model.errors = model.errors_family.Metric(labels={"reason": "MissingInput"}), {}
    text = {"TEXT": np.array([[b"a cat"]], dtype=object)}

    responses = model._forward([text, text, text])

    assert calls == ["mm_text"] * 3
    assert [(r.error.code, r.error.message.split(":")[0]) for r in responses[:2]] == [
        (503, "OutOfMemory"), (500, "InternalError")]
    assert responses[2].error is None
    assert errors == {"OutOfMemory": 1, "InternalError": 1}
