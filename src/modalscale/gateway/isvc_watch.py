"""The gateway's watch on its own InferenceService: the annotations that carry the budget's tenant rejections.

The same list-then-watch loop as :class:`modalscale.gateway.endpoints.EndpointSliceWatch` (client-go's reflector),
narrowed to one object with the field selector ``metadata.name=<service>`` (the gateway's Role grants ``list`` and
``watch`` on that one name, which RBAC allows only with that selector). Every change of the object's annotations
reaches the gateway once, on its event loop; the request path never calls the API.

If the watch fails the last annotations stay in force (a rejection still ends at its ``until``), and the loop lists
again with backoff; nothing is lifted or added on data that could not be read.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from modalscale import GROUP, VERSION
from modalscale.gateway.endpoints import BACKOFF_S, WATCH_TIMEOUT_S

log = logging.getLogger(__name__)

PLURAL = "inferenceservices"
OnAnnotations = Callable[[Mapping[str, str]], None]
"""Receives the InferenceService's annotations after each change ({} when it is gone); called on the event loop."""


class AnnotationSource(Protocol):
    """Something that reports the InferenceService's annotations: :class:`StaticAnnotations` or
    :class:`InferenceServiceWatch`."""

    async def run(self, on_update: OnAnnotations) -> None:
        """Report the current annotations, then every change, until cancelled."""


class StaticAnnotations:
    """Fixed annotations (tests, ``--endpoints`` runs); :meth:`set` replaces them while running."""

    def __init__(self, annotations: Mapping[str, str] | None = None) -> None:
        self._annotations = dict(annotations or {})
        self._changed = asyncio.Event()

    def set(self, annotations: Mapping[str, str]) -> None:
        """Replace the annotations (call on the event loop); the gateway sees them at once."""
        self._annotations = dict(annotations)
        self._changed.set()

    async def run(self, on_update: OnAnnotations) -> None:
        while True:
            self._changed.clear()
            on_update(dict(self._annotations))
            await self._changed.wait()


def annotations_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """The string annotations of a raw object (pure; non-string values are dropped)."""
    raw = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return {str(k): v for k, v in raw.items() if isinstance(v, str)} if isinstance(raw, Mapping) else {}


class InferenceServiceWatch:
    """List and watch one InferenceService (see the module docstring).

    Args:
        namespace, service: The InferenceService.
        api_client: A ``kubernetes.client.ApiClient``.
    """

    def __init__(self, namespace: str, service: str, api_client: Any) -> None:
        self.namespace = namespace
        self.service = service
        self._api_client = api_client
        self._stop = threading.Event()
        self.relists = 0

    async def run(self, on_update: OnAnnotations) -> None:
        loop = asyncio.get_running_loop()

        def report(annotations: dict[str, str]) -> None:
            loop.call_soon_threadsafe(on_update, annotations)

        thread = threading.Thread(target=self._loop, args=(report,), name=f"watch-isvc-{self.service}", daemon=True)
        thread.start()
        try:
            await asyncio.Event().wait()
        finally:
            self._stop.set()

    def _loop(self, report: Callable[[dict[str, str]], None]) -> None:
        from kubernetes import client, watch
        from kubernetes.client.exceptions import ApiException

        api = client.CustomObjectsApi(self._api_client)
        selector = f"metadata.name={self.service}"
        failures = 0
        last: dict[str, str] | None = None
        while not self._stop.is_set():
            try:
                resp = api.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL,
                                                         field_selector=selector, _preload_content=False,
                                                         _request_timeout=(5, 30))
                listed = json.loads(resp.data)  # type: ignore[attr-defined]
                self.relists += 1
                version = listed["metadata"]["resourceVersion"]
                items = listed.get("items") or []
                current = annotations_of(items[0]) if items else {}
                if current != last:
                    report(current)
                    last = current
                failures = 0
                while not self._stop.is_set():
                    started = time.monotonic()
                    w = watch.Watch()  # type: ignore[no-untyped-call]
                    for event in w.stream(  # type: ignore[no-untyped-call]
                            api.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL,
                            field_selector=selector, resource_version=version, allow_watch_bookmarks=True,
                            timeout_seconds=WATCH_TIMEOUT_S, _request_timeout=(5, WATCH_TIMEOUT_S + 10)):
                        if self._stop.is_set():
                            w.stop()  # type: ignore[no-untyped-call]
                            break
                        kind, obj = event.get("type"), event.get("raw_object") or {}
                        if kind == "ERROR":
                            code = (obj or {}).get("code")
                            raise ApiException(status=code if isinstance(code, int) else 500,
                                               reason=str((obj or {}).get("message", "watch error")))
                        version = (obj.get("metadata") or {}).get("resourceVersion", version)
                        if kind in ("ADDED", "MODIFIED"):
                            current = annotations_of(obj)
                        elif kind == "DELETED":
                            current = {}
                        else:
                            continue  # BOOKMARK
                        if current != last:
                            report(current)
                            last = current
                    if time.monotonic() - started < 1.0:
                        self._stop.wait(1.0)
            except ApiException as exc:
                if exc.status == 410:
                    log.info("Watch of the InferenceService expired; listing again name=%s", self.service)
                    continue
                failures += 1
                log.warning("Watch of the InferenceService failed name=%s status=%s reason=%s", self.service,
                            exc.status, exc.reason)
            except Exception as exc:  # a dropped connection, a timeout: back off and list again
                failures += 1
                log.warning("Watch of the InferenceService failed name=%s error=%r", self.service, exc)
            self._stop.wait(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1] if failures else 0)

    def stop(self) -> None:
        self._stop.set()


__all__ = ["AnnotationSource", "InferenceServiceWatch", "OnAnnotations", "StaticAnnotations", "annotations_of"]
