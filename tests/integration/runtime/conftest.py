"""A real tritonserver (from the nvidia-pytriton wheel) serving the built-in model, on free loopback ports."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from modalscale.runtime.repo_config import RuntimeConfig
from modalscale.runtime.server import TritonProcess, free_port, serve_config


@pytest.fixture(scope="session")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    """The default configuration (dynamic batching, modality-aware, embedding cache, FP32), one instance."""
    repo = tmp_path_factory.mktemp("triton-repo")
    log = tmp_path_factory.mktemp("triton-log") / "tritonserver.log"
    # As scripts/test.sh and the demo run it: this virtualenv's python3 first on PATH. The Python-backend stub
    # must still use the stdlib of the libpython it embeds (see server.stub_python_home).
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + old_path
    try:
        with serve_config(RuntimeConfig(), repo, http_port=free_port(), grpc_port=free_port(),
                          metrics_port=free_port(), log_path=log, exit_timeout_s=5) as server:
            yield server
    finally:
        os.environ["PATH"] = old_path
