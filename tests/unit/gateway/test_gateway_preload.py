"""A started gateway has loaded what reading a request needs, so its first request pays no import.

Found by ``benchmarks/gateway_capacity.py`` (issue 19): the first gRPC request through a new gateway imported
``tritonclient.grpc`` (the ``inference.ModelInferRequest`` message class) and read the WordPiece vocabulary, about
150 ms of CPU on the 2-vCPU development machine, on the request's own path. Run in a fresh interpreter: any earlier
test of this session may have imported both already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"

PROGRAM = """
import asyncio, json, sys
from modalscale.gateway import wordpiece
from modalscale.gateway.endpoints import StaticSource
from modalscale.gateway.server import Gateway
from modalscale.gateway.settings import GatewaySettings
from modalscale.runtime.server import free_port

ports = {k: str(free_port()) for k in ("HTTP", "GRPC", "METRICS")}
if sys.argv[1] == "http-only":
    ports["GRPC"] = "0"
settings = GatewaySettings.from_env({"MODALSCALE_GATEWAY_ENDPOINTS": "127.0.0.1:9:9",
                                     **{f"MODALSCALE_GATEWAY_{k}_PORT": v for k, v in ports.items()}})
MESSAGE = "tritonclient.grpc.service_pb2"


async def main():
    gateway = Gateway(settings, StaticSource([]), None, host="127.0.0.1")
    before = {"message": MESSAGE in sys.modules, "vocabulary": wordpiece.vocabulary.cache_info().currsize}
    await gateway.start()
    after = {"message": MESSAGE in sys.modules, "vocabulary": wordpiece.vocabulary.cache_info().currsize}
    await gateway.stop()
    print(json.dumps({"before": before, "after": after}))

asyncio.run(main())
"""


def _started(mode: str) -> dict[str, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", PROGRAM, mode], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    seen: dict[str, dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == {"message": False, "vocabulary": 0}, "the check would prove nothing: loaded at import"
    return seen


def test_a_started_gateway_has_loaded_the_grpc_message_and_the_vocabulary() -> None:
    assert _started("grpc")["after"] == {"message": True, "vocabulary": 1}


def test_a_gateway_without_grpc_does_not_import_the_grpc_message() -> None:
    """``MODALSCALE_GATEWAY_GRPC_PORT=0``: nothing reads a gRPC message, so a fault in that import cannot stop it."""
    assert _started("http-only")["after"] == {"message": False, "vocabulary": 1}
