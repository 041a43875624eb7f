"""How ``benchmarks/gateway_capacity.py`` reads the time a replica held each request from Triton's trace records."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gateway_capacity  # a benchmark script, not a package

# Records as tritonserver (the nvidia-pytriton wheel's) wrote them, mode triton, level TIMESTAMPS: one HTTP and one
# gRPC request of a Python-backend model, with request ids h0 and g0.
REAL = json.loads("""[
{"id": 1, "timestamps": [{"name": "HTTP_RECV_START", "ns": 355507236572}]},
{"id": 1, "timestamps": [{"name": "HTTP_RECV_END", "ns": 355507249962}]},
{"id": 1, "model_name": "echo", "model_version": 1, "request_id": "h0"},
{"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 355507337642}]},
{"id": 1, "timestamps": [{"name": "QUEUE_START", "ns": 355507356670}]},
{"id": 1, "timestamps": [{"name": "INFER_RESPONSE_COMPLETE", "ns": 355540661013}]},
{"id": 1, "timestamps": [{"name": "COMPUTE_START", "ns": 355507413574}]},
{"id": 1, "timestamps": [{"name": "COMPUTE_END", "ns": 355540691358}]},
{"id": 1, "timestamps": [{"name": "REQUEST_END", "ns": 355540747952}]},
{"id": 1, "timestamps": [{"name": "HTTP_SEND_START", "ns": 355540791236}]},
{"id": 1, "timestamps": [{"name": "HTTP_SEND_END", "ns": 355540807060}]},
{"id": 2, "model_name": "echo", "model_version": 1, "request_id": "g0"},
{"id": 2, "timestamps": [{"name": "REQUEST_START", "ns": 355547863405}]},
{"id": 2, "timestamps": [{"name": "REQUEST_END", "ns": 355548466989}]},
{"id": 2, "timestamps": [{"name": "GRPC_WAITREAD_START", "ns": 355059234692}]},
{"id": 2, "timestamps": [{"name": "GRPC_WAITREAD_END", "ns": 355547786541}]},
{"id": 2, "timestamps": [{"name": "INFER_RESPONSE_COMPLETE", "ns": 355548350666}]},
{"id": 2, "timestamps": [{"name": "GRPC_SEND_START", "ns": 355548353010}]},
{"id": 2, "timestamps": [{"name": "GRPC_SEND_END", "ns": 355548489152}]}
]""")


def test_held_time_runs_from_the_frontend_having_read_the_request_to_its_response_sent() -> None:
    held = gateway_capacity.replica_held_ms(REAL)
    assert held == pytest.approx({"h0": 33.557098, "g0": 0.702611})
    # gRPC's WAITREAD_START is when the handler began waiting, half a second before this request came: not used
    assert held["g0"] < 1.0


def test_traces_without_an_id_or_a_frontend_are_left_out() -> None:
    child: list[dict[str, Any]] = [  # a composing model's request: no frontend read it
        {"id": 3, "model_name": "default_image", "model_version": 1, "parent_id": 1, "request_id": "h0"},
        {"id": 3, "timestamps": [{"name": "REQUEST_START", "ns": 10}]},
        {"id": 3, "timestamps": [{"name": "REQUEST_END", "ns": 20}]}]
    warm_up = [{"id": 4, "timestamps": [{"name": "HTTP_RECV_END", "ns": 10}]},
               {"id": 4, "model_name": "echo", "model_version": 1},
               {"id": 4, "timestamps": [{"name": "HTTP_SEND_END", "ns": 2_000_010}]}]
    assert gateway_capacity.replica_held_ms(REAL + child + warm_up) == pytest.approx({"h0": 33.557098,
                                                                                      "g0": 0.702611})


def test_an_id_received_twice_is_an_error_not_a_silent_choice() -> None:
    again = [{**r, "id": 9} for r in REAL if r["id"] == 1]
    with pytest.raises(ValueError, match="'h0'"):
        gateway_capacity.replica_held_ms(REAL + again)


def test_trace_files_are_read_in_their_order(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    (tmp_path / "trace.json.0").write_text(json.dumps(REAL[:11]))
    (tmp_path / "trace.json.1").write_text(json.dumps(REAL[11:]))
    assert gateway_capacity.read_traces(trace) == REAL


def test_time_outside_the_replica_is_the_call_less_the_held_time() -> None:
    result = {"calls": [{"direct A": [("a", 40.0), ("b", 50.0)], "gateway": [("c", 43.0), ("untraced", 9.0)]}]}
    rounds, untraced = gateway_capacity.outside_percentiles(result, {"a": 38.0, "b": 47.0, "c": 40.5})
    assert untraced == 1
    assert rounds[0]["direct A"][0] == pytest.approx(2.5)  # p50 of 2.0 and 3.0
    assert rounds[0]["gateway"][0] == pytest.approx(2.5)
