"""A real tritonserver (from the nvidia-pytriton wheel) serving the built-in model, on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from modalscale.runtime.repo_config import RuntimeConfig
from modalscale.runtime.server import TritonProcess, free_port, serve_config

@pytest.fixture(scope="session")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    """The default configuration (dynamic batching, modality-aware, embedding cache, FP32), one instance."""
    repo = tmp_path_factory.mktemp("triton-repo")
    log = tmp_path_factory.mktemp("triton-log") / "tritonserver.log"
    with serve_config(RuntimeConfig(), repo, http_port=free_port(), grpc_port=free_port(),
                      metrics_port=free_port(), log_path=log, exit_timeout_s=5) as server:
        yield server
