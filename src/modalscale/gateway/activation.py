"""The activation poke: tell the operator that a request waits at zero Ready replicas.

Knative's activator pokes its autoscaler directly when a request reaches a revision at zero, instead of waiting
for the next scrape; here the gateway patches one annotation on the InferenceService and the operator, which
watches InferenceServices, scales 0 -> 1 on the change at once. The value is the RFC 3339 UTC time of the poke, so
every poke is a change. The gateway sends at most one poke per second (:mod:`modalscale.gateway.server`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from modalscale import GROUP, VERSION

ACTIVATION_ANNOTATION = "modalscale.io/activation-requested-at"
"""Annotation the gateway sets on the InferenceService (RFC 3339 UTC, e.g. ``2026-12-02T08:15:03Z``)."""
PLURAL = "inferenceservices"


def activation_patch(now: datetime) -> dict[str, Any]:
    """The merge patch of one poke at ``now`` (timezone-aware; pure).

    Raises:
        ValueError: ``now`` is naive.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"annotations": {ACTIVATION_ANNOTATION: stamp}}}


def kube_activation(namespace: str, service: str, api_client: Any,
                    clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> Callable[[], Awaitable[None]]:
    """An ``activate`` callable for :class:`modalscale.gateway.server.Gateway` that patches the InferenceService.

    Args:
        namespace: The InferenceService's namespace.
        service: Its name.
        api_client: A ``kubernetes.client.ApiClient`` (:func:`modalscale.gateway.endpoints.load_api_client`).
    Returns:
        A coroutine function; it raises ``kubernetes.client.rest.ApiException`` when the patch fails (the gateway
        counts and logs it, and the next waiting request pokes again).
    """
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)

    async def activate() -> None:
        await asyncio.to_thread(api.patch_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, service,
                                activation_patch(clock()), _request_timeout=(5, 10),
                                _content_type="application/merge-patch+json")

    return activate
