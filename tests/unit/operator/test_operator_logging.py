"""The operator's logging is set up once, at its entry point; handler modules take the typed Deps."""

from __future__ import annotations

import ast
import inspect
import logging
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("level", ["DEBUG", "INFO", logging.WARNING])
def test_http_client_loggers_never_log_request_urls(level) -> None:
    """httpx logs each request URL at INFO, and webhook URLs carry tokens (STYLE C11)."""
    from modalscale.operator.cli import QUIET_LOGGERS, configure_logging

    configure_logging(level)
    for name in QUIET_LOGGERS:
        assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
    assert set(QUIET_LOGGERS) == {"httpx", "httpcore"}


def test_only_the_entry_point_changes_log_levels() -> None:
    """A kopf start-up handler used to change the global httpx/httpcore levels; that is the entry point's job."""
    offenders = []
    for py in sorted((REPO / "operator").glob("*.py")):
        if py.name == "cli.py":
            continue
        for node in ast.walk(ast.parse(py.read_text(), filename=str(py))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "setLevel", "basicConfig", "disable"):
                offenders.append(f"{py.name}:{node.lineno} {node.func.attr}")
    assert offenders == []


def test_budget_functions_take_the_typed_deps() -> None:
    from modalscale.operator.budget import handlers as budget_handlers

    for fn in (budget_handlers.evaluate_policy, budget_handlers.run_policy, budget_handlers.lift_caps):
        assert inspect.signature(fn).parameters["deps"].annotation == "Deps", fn.__name__
