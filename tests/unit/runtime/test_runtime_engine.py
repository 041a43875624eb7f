"""The encoder engine knob (``torch`` | ``openvino``): how it travels from the CLI and presets through the generated
config.pbtxt to the model's settings, that a torch config renders exactly as before the knob existed, and the pure
parts of the OpenVINO engine (precision hint, compile properties, cache keys)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from modalscale.api.errors import InvalidSpec
from modalscale.runtime.model import ov_engine
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import (
    PRESETS,
    Engine,
    Precision,
    RuntimeConfig,
    build_repository,
    config_summary,
    model_parameters,
    preset_flags,
)


def _parameters(pbtxt: str) -> dict[str, str]:
    """The ``parameters`` blocks of a rendered config.pbtxt."""
    out = {}
    lines = pbtxt.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  key: "):
            key = json.loads(line.split(":", 1)[1])
            value = lines[i + 1].split("string_value:", 1)[1].strip().rstrip("}").strip()
            out[key] = json.loads(value)
    return out


def test_torch_config_renders_without_an_engine_parameter() -> None:
    """A torch config's repository is what it was before the engine existed (no new parameter, same summary keys)."""
    for cfg in (RuntimeConfig(), PRESETS["naive"], RuntimeConfig(precision=Precision.INT8, max_batch_size=0)):
        assert "engine" not in model_parameters(cfg)
        for path, text in build_repository(cfg).items():
            if path.endswith("config.pbtxt"):
                assert "engine" not in _parameters(text)
        assert "engine" not in json.loads(config_summary(cfg))


def test_openvino_config_reaches_the_model_settings() -> None:
    cfg = PRESETS["naive"].replace(engine=Engine.OPENVINO, precision=Precision.INT8)
    (pbtxt,) = [t for p, t in build_repository(cfg).items() if p.endswith("config.pbtxt")]
    params = _parameters(pbtxt)
    assert params["engine"] == "openvino"
    settings = ModelSettings.from_model_config({"parameters": {k: {"string_value": v} for k, v in params.items()}})
    assert settings.engine is Engine.OPENVINO and settings.precision is Precision.INT8
    assert json.loads(config_summary(cfg))["engine"] == "openvino"


def test_every_model_of_a_batched_openvino_config_gets_the_engine() -> None:
    cfg = RuntimeConfig(engine=Engine.OPENVINO)  # router + one batched model per modality
    configs = {p: _parameters(t) for p, t in build_repository(cfg).items() if p.endswith("config.pbtxt")}
    encoders = [p for p, params in configs.items() if "preload" in params and params["preload"]]
    assert encoders and all(configs[p]["engine"] == "openvino" for p in encoders)


def test_gpu_layout_runs_torch() -> None:
    cfg = RuntimeConfig(engine=Engine.OPENVINO, gpu_count=1, precision=Precision.FP16)
    for path, text in build_repository(cfg).items():
        if path.endswith("config.pbtxt"):
            assert "engine" not in _parameters(text), path


def test_unknown_engine_parameter_is_named() -> None:
    with pytest.raises(ValueError, match="parameter engine"):
        ModelSettings.from_model_config({"parameters": {"engine": {"string_value": "tensorrt"}}})
    with pytest.raises(InvalidSpec, match="engine"):
        RuntimeConfig(engine="openvino")  # type: ignore[arg-type]  # a plain string, not an Engine


def test_fastest_preset_uses_openvino_and_lists_its_engine_flag() -> None:
    assert PRESETS["fastest"].engine is Engine.OPENVINO
    assert PRESETS["naive"].engine is Engine.TORCH and PRESETS["default"].engine is Engine.TORCH
    flags = preset_flags("fastest")
    assert flags[flags.index("--engine") + 1] == "openvino"


def test_inference_precision_is_explicit_and_refuses_fp16() -> None:
    """OpenVINO's CPU plugin would run an FP32 model in BF16 on a BF16-capable CPU unless told ``f32``."""
    assert ov_engine.inference_precision(Precision.FP32) == "f32"
    assert ov_engine.inference_precision(Precision.INT8) == "f32"
    assert ov_engine.inference_precision(Precision.BF16) == "bf16"
    with pytest.raises(ValueError, match="FP16"):
        ov_engine.inference_precision(Precision.FP16)
    cfg = ov_engine.compile_config(2, Precision.FP32)
    assert cfg["INFERENCE_NUM_THREADS"] == 2 and cfg["NUM_STREAMS"] == 1
    assert cfg["ENABLE_CPU_PINNING"] is False and cfg["INFERENCE_PRECISION_HINT"] == "f32"


def test_cache_key_depends_on_scheme_and_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    a = ov_engine.cache_key("minilm", "fp32", ("torch",))
    assert a == ov_engine.cache_key("minilm", "fp32", ("torch",))
    assert a != ov_engine.cache_key("minilm", "int8", ("torch",))
    assert a != ov_engine.cache_key("minilm", "fp32", ("torch", "nncf"))
    monkeypatch.setattr(ov_engine, "IR_FORMAT_VERSION", "999")
    assert a != ov_engine.cache_key("minilm", "fp32", ("torch",))


def test_cache_dir_writable_read_only_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ov_engine.CACHE_ENV, str(tmp_path / "ov"))
    assert ov_engine.cache_dir() == ov_engine.Cache(tmp_path / "ov", True) and (tmp_path / "ov").is_dir()
    # An existing directory this process cannot write (a read-only volume; simulated: tests may run as root): read.
    monkeypatch.setattr(ov_engine, "_writable", lambda path: False)
    assert ov_engine.cache_dir() == ov_engine.Cache(tmp_path / "ov", False)
    monkeypatch.undo()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(ov_engine.CACHE_ENV, str(blocker / "below-a-file"))  # can be neither created nor read
    assert ov_engine.cache_dir() is None


def test_serving_engine_openvino_without_its_wheels_is_refused_naming_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The openvino extra is separate from `runtime` (the CPU image does not carry it): without the wheels the models
    # would fail to load inside Triton, so the CLI refuses up front naming the flag and both fixes.
    import importlib.util

    from modalscale.runtime import cli

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("openvino", "nncf") else real_find_spec(name, *a))
    with pytest.raises(InvalidSpec) as err:
        cli.require_engine(PRESETS["fastest"])
    assert err.value.field == "--engine"
    assert "modalscale[openvino]" in str(err.value) and "--engine torch" in str(err.value)
    cli.require_engine(PRESETS["naive"])  # torch needs nothing more


def test_the_openvino_wheels_are_their_own_extra_and_the_cpu_image_carries_them() -> None:
    """``pip install modalscale[runtime]`` stays without OpenVINO, but the CPU runtime image is built from both
    extras: an InferenceService with ``spec.runtime.engine: openvino`` gets pods whose models load."""
    from modalscale.devenv.images import dependency_pins, image_definitions

    runtime = dependency_pins("modalscale", ("runtime",))
    assert "openvino" not in runtime and "nncf" not in runtime
    assert {"openvino", "nncf"} <= set(dependency_pins("modalscale", ("openvino",)))
    image = image_definitions()["runtime-cpu"]
    assert set(image.extras) == {"runtime", "openvino"}
    assert {"openvino", "nncf"} <= set(dependency_pins("modalscale", image.extras, image.cpu_only))


# ------------------------------------------------------------------ spec.runtime.engine of an InferenceService
def _isvc_repository(runtime: dict[str, object]) -> dict[str, str]:
    """The repository the operator renders for an InferenceService with ``spec.runtime`` = ``runtime``."""
    from modalscale.api.inferenceservice import parse_isvc
    from modalscale.operator.isvc.reconcile import repository_files

    return repository_files(parse_isvc({"metadata": {"name": "vc", "namespace": "ml"},
                                        "spec": {"runtime": runtime}}))


def test_an_openvino_int8_inference_service_gets_fastest_encoders_in_every_encoder_model() -> None:
    from modalscale.runtime.repo_config import FASTEST_IMAGE_INT8_MIN_SIDE_PIXELS

    assert FASTEST_IMAGE_INT8_MIN_SIDE_PIXELS == PRESETS["fastest"].image_int8_min_side_pixels == 160
    cfg = RuntimeConfig.from_isvc_spec({"runtime": {"engine": "openvino", "precision": "INT8"}})
    assert (cfg.engine, cfg.precision, cfg.image_int8_min_side_pixels) == (Engine.OPENVINO, Precision.INT8, 160)
    files = _isvc_repository({"engine": "openvino", "precision": "INT8"})  # the default layout: router + 3 models
    configs = {p: _parameters(t) for p, t in files.items() if p.endswith("config.pbtxt")}
    encoders = sorted(p for p, params in configs.items() if params.get("preload"))
    assert encoders == ["multimodal_image/config.pbtxt", "multimodal_image_text/config.pbtxt",
                        "multimodal_text/config.pbtxt"]
    for path in encoders:
        params = configs[path]
        assert (params["engine"], params["precision"], params["image_int8_min_side_pixels"]) == \
            ("openvino", "INT8", "160"), path
        settings = ModelSettings.from_model_config({"parameters": {k: {"string_value": v}
                                                                   for k, v in params.items()}})
        assert (settings.engine, settings.image_int8_min_side_pixels) == (Engine.OPENVINO, 160)
    assert "engine" not in configs["multimodal/config.pbtxt"]  # the router runs no encoder


@pytest.mark.parametrize("precision", ["FP32", "BF16"])
def test_openvino_without_int8_keeps_every_image_fp32(precision: str) -> None:
    cfg = RuntimeConfig.from_isvc_spec({"runtime": {"engine": "openvino", "precision": precision}})
    assert (cfg.engine, cfg.image_int8_min_side_pixels) == (Engine.OPENVINO, 0)
    for path, text in _isvc_repository({"engine": "openvino", "precision": precision}).items():
        if path.endswith("config.pbtxt") and _parameters(text).get("preload"):
            assert _parameters(text)["engine"] == "openvino"
            assert "image_int8_min_side_pixels" not in _parameters(text), path


def test_the_fastest_preset_is_an_inference_service_spec() -> None:
    """README and ``PRESETS``' docstring: these runtime fields give exactly the ``fastest`` preset."""
    runtime = {"engine": "openvino", "precision": "INT8", "instanceCount": 2, "intraOpThreads": 1,
               "maxBatchSize": 0, "dynamicBatching": {"enabled": False}, "modalityAwareBatching": False}
    assert RuntimeConfig.from_isvc_spec({"runtime": runtime}) == PRESETS["fastest"]
    assert _isvc_repository(runtime) == build_repository(PRESETS["fastest"])
    # engine openvino at INT8 alone is the default layout with fastest's encoders, not the fastest preset.
    alone = RuntimeConfig.from_isvc_spec({"runtime": {"engine": "openvino", "precision": "INT8"}})
    assert alone == PRESETS["default"].replace(engine=Engine.OPENVINO, precision=Precision.INT8,
                                               image_int8_min_side_pixels=160)


@pytest.mark.parametrize("runtime", [{}, {"precision": "INT8"}, {"precision": "BF16", "maxBatchSize": 0}],
                         ids=["defaults", "int8", "bf16-unbatched"])
def test_an_explicit_torch_engine_renders_exactly_what_no_engine_field_did(runtime: dict[str, object]) -> None:
    files = _isvc_repository(runtime)
    assert _isvc_repository({**runtime, "engine": "torch"}) == files
    for path, text in files.items():
        if path.endswith("config.pbtxt"):
            assert {"engine", "image_int8_min_side_pixels"}.isdisjoint(_parameters(text)), path
    assert RuntimeConfig.from_isvc_spec({"runtime": runtime}).engine is Engine.TORCH


def test_the_runtime_cli_reads_the_engine_from_an_inference_service_file(tmp_path: Path) -> None:
    from modalscale.runtime import cli

    manifest = tmp_path / "isvc.yaml"
    manifest.write_text("kind: InferenceService\nspec:\n  runtime:\n    engine: openvino\n    precision: INT8\n")
    parser = argparse.ArgumentParser()
    cli._add_config_flags(parser)
    cfg = cli.config_from_args(parser.parse_args(["--from-isvc", str(manifest)]))
    assert (cfg.engine, cfg.image_int8_min_side_pixels) == (Engine.OPENVINO, 160)
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: InferenceService\nspec:\n  runtime:\n    engine: openvino\n    precision: FP16\n")
    with pytest.raises(InvalidSpec) as err:
        cli.config_from_args(parser.parse_args(["--from-isvc", str(bad)]))
    assert err.value.field == "spec.runtime.engine"


def test_openvino_at_fp16_on_cpu_is_refused_as_the_crd_refuses_it() -> None:
    """Found by a new-user audit (6 Dec 2026): ``modalscale runtime render --engine openvino --precision FP16``
    wrote a repository (exit 0) that the CRD and ``parse_isvc`` refuse."""
    with pytest.raises(InvalidSpec, match="openvino does not offer precision FP16"):
        RuntimeConfig(engine=Engine.OPENVINO, precision=Precision.FP16)
