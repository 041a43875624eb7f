"""``modalscale gateway``: run the request-path gateway of one InferenceService (settings from
``MODALSCALE_GATEWAY_*``, validated at start-up; see :mod:`modalscale.gateway.settings`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

from modalscale.gateway.settings import ConfigError, GatewaySettings

HELP = "run the request-path gateway of one InferenceService (KServe v2 HTTP and gRPC)"


def add_parser(sub: Any) -> None:
    """Register ``gateway`` on ``sub`` (an argparse subparsers action)."""
    p = sub.add_parser("gateway", help=HELP)
    p.add_argument("--endpoints", default=None, metavar="HOST:PORT[:GRPC_PORT],...",
                   help="fixed replicas instead of the EndpointSlice watch (overrides MODALSCALE_GATEWAY_ENDPOINTS)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    environ = dict(os.environ)
    if args.endpoints:
        environ["MODALSCALE_GATEWAY_ENDPOINTS"] = args.endpoints
    try:
        settings = GatewaySettings.from_env(environ)
    except ConfigError as exc:
        print(f"modalscale gateway: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(serve(settings))
    return 0


async def serve(settings: GatewaySettings) -> None:
    """Run the gateway until SIGTERM or SIGINT, then stop gracefully."""
    from modalscale.gateway.activation import kube_activation
    from modalscale.gateway.endpoints import EndpointSliceWatch, EndpointSource, StaticSource, load_api_client
    from modalscale.gateway.isvc_watch import AnnotationSource, InferenceServiceWatch
    from modalscale.gateway.server import Activate, Gateway

    source: EndpointSource
    activate: Activate | None
    budget: AnnotationSource | None = None
    if settings.static_endpoints:
        source, activate = StaticSource(settings.static_endpoints), None
    else:
        api = load_api_client()  # no credentials: fail at start, loudly (STYLE C5)
        source = EndpointSliceWatch(settings.namespace, settings.replicas_service, api)
        activate = kube_activation(settings.namespace, settings.service, api)
        budget = InferenceServiceWatch(settings.namespace, settings.service, api)  # tenant rejections
    gateway = Gateway(settings, source, activate, budget=budget)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await gateway.start()
    await stop.wait()
    log = logging.getLogger(__name__)
    log.info("Gateway draining, not ready; still serving delay_s=%g", settings.shutdown_delay_s)
    gateway.begin_drain()
    await asyncio.sleep(settings.shutdown_delay_s)
    log.info("Gateway stopping, finishing in-flight requests timeout_s=%g", settings.drain_timeout_s)
    await gateway.stop()
