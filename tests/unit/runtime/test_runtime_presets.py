"""`runtime serve --preset naive|default|fastest`: each preset is the same config as its explicit flags, `--help`
lists them, explicit flags override a preset, and `--preset` cannot be mixed with `--from-isvc`."""

from __future__ import annotations

import argparse

import pytest

from modalscale.runtime import cli
from modalscale.runtime.repo_config import (
    PRESETS,
    Precision,
    RuntimeConfig,
    build_repository,
    config_flags,
    preset_flags,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modalscale")
    cli.add_parser(parser.add_subparsers(dest="command"))
    return parser


def _config(*argv: str) -> RuntimeConfig:
    return cli.config_from_args(_parser().parse_args(["runtime", "serve", *argv]))


def test_naive_preset_is_the_baseline_written_out() -> None:
    explicit = _config("--instance-count", "2", "--intra-op-threads", "1", "--max-batch-size", "0",
                       "--no-dynamic-batching", "--no-modality-aware-batching", "--no-response-cache",
                       "--no-embedding-cache", "--precision", "FP32")
    assert _config("--preset", "naive") == explicit == PRESETS["naive"]
    assert not explicit.batching_enabled and not explicit.uses_router
    files = build_repository(explicit)
    assert sorted(files) == ["multimodal/1/model.py", "multimodal/config.pbtxt"]  # one model, no router


def test_default_preset_is_an_inference_service_without_runtime_fields() -> None:
    assert _config("--preset", "default") == RuntimeConfig.from_isvc_spec({}) == _config()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_equals_its_explicit_flags(name: str) -> None:
    assert _config(*preset_flags(name)) == _config("--preset", name) == PRESETS[name]


def test_config_flags_give_back_a_config_that_is_no_preset() -> None:
    plain_dynamic = PRESETS["fastest"].replace(max_batch_size=8, dynamic_batching=True, embedding_cache=False,
                                               max_queue_delay_microseconds=3000)
    assert plain_dynamic not in PRESETS.values()
    assert _config(*config_flags(plain_dynamic)) == plain_dynamic
    assert plain_dynamic.batching_enabled and not plain_dynamic.uses_router


def test_fastest_preset_quantizes() -> None:
    assert PRESETS["fastest"].precision is Precision.INT8


def test_help_lists_every_preset_with_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["runtime", "serve", "--help"])
    text = capsys.readouterr().out
    for name in PRESETS:
        assert f"  {name:<8} {' '.join(preset_flags(name))}" in text


def test_explicit_flags_override_a_preset() -> None:
    cfg = _config("--preset", "naive", "--precision", "INT8", "--instance-count", "1")
    assert cfg == PRESETS["naive"].replace(precision=Precision.INT8, instance_count=1)
    assert _config("--instance-count", "1", "--preset", "naive").instance_count == 1  # position does not matter


def test_preset_and_from_isvc_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["runtime", "serve", "--preset", "naive", "--from-isvc", "x.yaml"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_unknown_preset_is_rejected_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["runtime", "serve", "--preset", "fast"])
    assert "naive" in capsys.readouterr().err
