"""kopf peering of operator replicas: the start-time priority and the peering object the replicas meet in."""

from __future__ import annotations

import json
import random
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from modalscale.operator.apply import Writer
from modalscale.operator.settings import Settings


def peering_priority(started_at_s: float, tie_break: int | None = None) -> int:
    """kopf peering priority of an operator replica started at ``started_at_s``: a later start ranks higher.

    Args:
        started_at_s: Start time, Unix seconds.
        tie_break: 0..999 (default random), so that replicas started in the same millisecond still differ: kopf
            pauses every replica while two live peers share a priority.
    Returns:
        Milliseconds since the epoch x 1000 + ``tie_break``; exact in a JSON double (below 2**53) until the year
        2255.
    Raises:
        ValueError: ``tie_break`` outside 0..999.
    """
    tie = random.randint(0, 999) if tie_break is None else tie_break
    if not 0 <= tie <= 999:
        raise ValueError(f"tie_break must be in 0..999, got {tie}")
    return round(started_at_s * 1000) * 1000 + tie


PEERING_CRD_FIXES = ("install it with `kubectl apply -f crds/` (kopf's peering CRDs ship there and in the "
                     "modalscale-crds chart, kopfPeering.install=true), or run a single replica without peering "
                     "with MODALSCALE_STANDALONE=true")
"""The two fixes named when kopf's peering CRD is missing."""


def ensure_peering(writer: Writer, config: Settings) -> None:
    """Create the kopf peering object(s) the replicas meet in, if missing (kopf freezes until it exists).

    Args:
        writer: The operator's one writer (:meth:`Writer.create_peering`).
    Raises:
        kopf.PermanentError: kopf's peering CRD (``clusterkopfpeerings.kopf.dev``, or ``kopfpeerings.kopf.dev``
            with ``MODALSCALE_NAMESPACES``) is not installed: the apiserver answered 404 for the resource itself.
            The message names the CRD and both fixes; start-up stops, since without the CRD kopf would hold every
            handler paused forever.
        kubernetes.client.rest.ApiException: Any other refusal (409, the object already exists, is success: for
            each object on its own, so a namespace added to ``MODALSCALE_NAMESPACES`` gets its KopfPeering though
            the namespaces before it have theirs; kopf keeps the whole operator paused while one is missing).
    """
    body = {"apiVersion": "kopf.dev/v1", "metadata": {"name": config.peering_name}}
    plural = "kopfpeerings" if config.namespaces else "clusterkopfpeerings"
    if config.namespaces:
        for ns in config.namespaces:
            _create_peering(writer, config, plural, ns, {**body, "kind": "KopfPeering"})
    else:
        _create_peering(writer, config, plural, None, {**body, "kind": "ClusterKopfPeering"})


def _create_peering(writer: Writer, config: Settings, plural: str, namespace: str | None,
                    body: dict[str, Any]) -> None:
    """One peering object of :func:`ensure_peering`: 409 (it exists) is success, a missing CRD a PermanentError."""
    try:
        writer.create_peering(plural, namespace, body)
    except ApiException as exc:
        if exc.status == 409:
            return
        if exc.status == 404 and not _names_a_missing_namespace(exc):
            raise kopf.PermanentError(
                f"the CRD {plural}.kopf.dev is not installed (creating {plural}/{config.peering_name} answered "
                f"404): {PEERING_CRD_FIXES}") from None
        raise


def _names_a_missing_namespace(exc: Any) -> bool:
    """A 404 whose Status names a namespace (a watched namespace that does not exist), not a missing resource."""
    try:
        details = json.loads(exc.body or "").get("details") or {}
    except (ValueError, AttributeError):
        return False
    return details.get("kind") == "namespaces"
