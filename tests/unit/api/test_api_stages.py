"""``spec.stages`` (issue 24) in the typed spec: absent is the one-piece layout, given it is resolved against the
one-piece fields, and every refusal names the field and the fix (the CRD's rules, for manifests read from files and
objects admitted under an older CRD)."""

from __future__ import annotations

from typing import Any

import pytest

from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import STAGED_NAME_MAX_LENGTH, parse_isvc, parse_spec
from tests.factories import inference_service


def test_absent_or_null_stages_is_the_one_piece_layout() -> None:
    assert parse_spec({}).stages is None
    assert parse_spec({"stages": None}).stages is None


def test_given_stages_take_their_defaults_and_the_one_piece_values_they_leave_out() -> None:
    spec = parse_spec({"stages": {"imageEncoder": {}}, "resources": {"cpu": "4", "memory": "16Gi"},
                       "runtime": {"instanceCount": 3, "intraOpThreads": 2, "maxBatchSize": 16,
                                   "dynamicBatching": {"maxQueueDelayMicroseconds": 700}}})
    assert spec.stages is not None
    enc = spec.stages.image_encoder
    assert (enc.min_replicas, enc.max_replicas, enc.resources) == (1, 10, spec.resources)
    assert (enc.runtime.instance_count, enc.runtime.intra_op_threads, enc.runtime.max_batch_size,
            enc.runtime.dynamic_batching.max_queue_delay_us) == (3, 2, 16, 700)
    own = parse_spec({"stages": {"imageEncoder": {
        "minReplicas": 3, "maxReplicas": 3, "resources": {"memory": "2Gi", "gpu": {"count": 2, "type": "nvidia-l4"}},
        "runtime": {"instanceCount": 8, "intraOpThreads": 1, "maxBatchSize": 64,
                    "maxQueueDelayMicroseconds": 5000}}}}).stages
    assert own is not None
    e = own.image_encoder
    assert (e.min_replicas, e.max_replicas, e.resources.cpu, e.resources.memory, e.resources.gpu_count) == (
        3, 3, "2", "2Gi", 2)
    assert (e.runtime.instance_count, e.runtime.max_batch_size, e.runtime.dynamic_batching.max_queue_delay_us) == (
        8, 64, 5000)


@pytest.mark.parametrize(("spec", "field", "words"), [
    ({"stages": {}}, "spec.stages.imageEncoder", "remove spec.stages"),
    ({"stages": {"imageEncoder": None}}, "spec.stages.imageEncoder", "required"),
    ({"stages": {"textEncoder": {}}}, "spec.stages.textEncoder", "unknown field"),
    ({"stages": {"imageEncoder": {"replicas": 2}}}, "spec.stages.imageEncoder.replicas", "unknown field"),
    ({"stages": {"imageEncoder": {"minReplicas": 0}}}, "spec.stages.imageEncoder.minReplicas", "[1, 1000]"),
    ({"stages": {"imageEncoder": {"minReplicas": 5, "maxReplicas": 2}}}, "spec.stages.imageEncoder.minReplicas",
     "<= spec.stages.imageEncoder.maxReplicas"),
    ({"stages": {"imageEncoder": {"resources": {"cpu": "0"}}}}, "spec.stages.imageEncoder.resources.cpu",
     "greater than 0"),
    ({"stages": {"imageEncoder": {"resources": {"gpu": {"count": 1}}}}},
     "spec.stages.imageEncoder.resources.gpu.type", "required when spec.stages.imageEncoder.resources.gpu.count"),
    ({"stages": {"imageEncoder": {"runtime": {"maxBatchSize": 300}}}}, "spec.stages.imageEncoder.runtime.maxBatchSize",
     "[0, 256]"),
    ({"stages": {"imageEncoder": {"runtime": {"engine": "openvino"}}}}, "spec.stages.imageEncoder.runtime.engine",
     "unknown field"),
    ({"stages": {"imageEncoder": {}}, "model": {"source": "URI", "uri": "s3://b/m"}}, "spec.stages",
     "needs spec.model.source BuiltIn"),
    ({"stages": {"imageEncoder": {"resources": {"gpu": {"count": 1, "type": "nvidia-l4"}}}},
      "runtime": {"engine": "openvino"}}, "spec.stages.imageEncoder.resources.gpu.count", "engine torch"),
], ids=["empty", "null-encoder", "unknown-stage", "unknown-field", "min-zero", "min-above-max", "zero-cpu",
        "gpu-without-type", "batch-too-big", "engine-is-the-services", "user-model", "openvino-gpu"])
def test_a_bad_stages_block_is_refused_naming_the_field_and_the_fix(spec: dict[str, Any], field: str,
                                                                    words: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_spec(spec)
    assert info.value.field == field
    assert words in str(info.value)


def test_a_staged_name_leaves_room_for_the_encoder_services_suffix() -> None:
    ok = "a" * STAGED_NAME_MAX_LENGTH
    assert parse_isvc(inference_service(ok, stages={"imageEncoder": {}})).stages is not None
    assert parse_isvc(inference_service(ok + "b")).stages is None  # one piece: 50 characters still fine
    with pytest.raises(InvalidSpec) as info:
        parse_isvc(inference_service(ok + "b", stages={"imageEncoder": {}}))
    assert info.value.field == "metadata.name" and "at most 49 characters" in str(info.value)
