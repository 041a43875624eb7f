"""``modalscale operator``: run the kopf operator (settings from ``MODALSCALE_*``, validated at start-up)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from modalscale.operator.settings import ConfigError, Settings


def add_parser(sub: Any) -> None:
    """Register ``operator`` on ``sub`` (an argparse subparsers action)."""
    p = sub.add_parser("operator", help="run the operator (watches InferenceService and BudgetPolicy)")
    p.add_argument("--namespace", "-n", action="append", default=None,
                   help="namespace to watch (repeatable); default: MODALSCALE_NAMESPACES, else all namespaces")
    p.add_argument("--standalone", action="store_true", default=None,
                   help="no peering with other replicas (single replica only)")
    p.set_defaults(func=run)


QUIET_LOGGERS = ("httpx", "httpcore")
"""Loggers held at WARNING or above: httpx logs every request URL at INFO, and chat webhook URLs carry tokens that
must never reach a log (STYLE C11)."""


def configure_logging(level: int | str) -> None:
    """The operator process's logging: ``level`` for everything, :data:`QUIET_LOGGERS` at WARNING or above."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    floor = max(logging.WARNING, logging.getLogger().getEffectiveLevel())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(floor)


def missing_namespaces(core: Any, namespaces: Sequence[str]) -> list[str]:
    """The watched ``namespaces`` that do not exist (the apiserver answered 404), in order.

    A namespace that cannot be read for another reason (403: a namespace-scoped install may not ``get``
    namespaces; the apiserver unreachable) is not reported: it may well exist.

    Args:
        core: A ``kubernetes.client.CoreV1Api``.
    """
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    missing = []
    for ns in namespaces:
        try:
            core.read_namespace(ns)
        except ApiException as exc:
            if exc.status == 404:
                missing.append(ns)
        except HTTPError:
            break  # kopf reports the unreachable apiserver itself
    return missing


def ports_in_use(ports: dict[str, int]) -> list[str]:
    """``"<setting>: port <n> is in use (<error>)"`` for each non-zero port of ``ports`` that cannot be bound on all
    addresses now (checked before start: kopf's health server fails inside a task, and the operator ran on without
    ``/healthz``)."""
    import socket

    taken = []
    for name, port in ports.items():
        if not port:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is no use
            try:
                sock.bind(("0.0.0.0", port))
            except OSError as exc:
                taken.append(f"{name}: port {port} is in use ({exc.strerror or exc})")
    return taken


def run(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env(os.environ, namespaces=args.namespace)  # -n is checked as the variable is
    except ConfigError as exc:
        print(f"modalscale operator: {exc}", file=sys.stderr)
        return 2
    if args.standalone:
        settings = Settings(**{**settings.__dict__, "standalone": True})
    configure_logging(settings.log_level)

    import kopf
    from kubernetes.config import ConfigException
    from prometheus_client import start_http_server

    from modalscale.operator.deps import KubeconfigError, build_deps
    from modalscale.operator.handlers import register

    try:
        deps = build_deps(settings)  # the one composition root: handlers reach it as memo.deps
    except ConfigException as exc:
        print(f"modalscale operator: no cluster to connect to: {str(exc).splitlines()[0]}; run it in a pod "
              f"(the chart), or set KUBECONFIG to a readable kubeconfig", file=sys.stderr)
        return 2
    except KubeconfigError as exc:
        print(f"modalscale operator: the kubeconfig {exc}; fix it, or set KUBECONFIG to a readable kubeconfig",
              file=sys.stderr)
        return 2
    taken = ports_in_use({"MODALSCALE_METRICS_PORT": settings.metrics_port,
                          "MODALSCALE_HEALTH_PORT": settings.health_port})
    if taken:
        print(f"modalscale operator: {'; '.join(taken)}: stop what uses it or set another port", file=sys.stderr)
        return 2
    for ns in missing_namespaces(deps.observer.core, settings.namespaces):
        # A typo in -n / MODALSCALE_NAMESPACES watches nothing, silently: say so (it may still be created later).
        logging.getLogger(__name__).warning("Watched namespace does not exist, nothing there is reconciled until it "
                                            "is created: namespace=%s", ns)
    registry = kopf.OperatorRegistry()
    register(registry, settings)
    if settings.metrics_port:
        start_http_server(settings.metrics_port, addr="0.0.0.0", registry=deps.metrics.registry)
    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    try:
        asyncio.run(kopf.operator(
            registry=registry,
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            standalone=settings.standalone,
            # Naming a peering makes kopf's peering mandatory, which a standalone operator must not wait for.
            peering_name=None if settings.standalone else settings.peering_name,
            liveness_endpoint=liveness,
            memo=kopf.Memo(deps=deps),
        ))
    except Exception as exc:  # kopf's (private) ActivityError: a start-up handler failed permanently
        if not isinstance(exc.__cause__, kopf.PermanentError):
            raise
        print(f"modalscale operator: start-up failed: {exc.__cause__}", file=sys.stderr)
        return 1
    return 0
