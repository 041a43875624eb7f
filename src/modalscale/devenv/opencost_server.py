"""A local OpenCost ``/assets`` server for tests and the demo: a real HTTP server on 127.0.0.1 that answers the
documented response shape from configured node prices.

Why not a real OpenCost: it cannot be built here. The Go module proxy this machine reaches answers ``403
Forbidden: This module version is not available`` for ``github.com/opencost/opencost`` (``go list -m -versions`` and
``go mod download github.com/opencost/opencost@v1.118.0``, tried 2026-12-01). Even built, OpenCost computes assets from
Prometheus series that it exports itself and that Prometheus must have scraped over the query window
(``node_total_hourly_cost``, ``kube_node_status_capacity_*``, ...), which is more wiring than this feature could spend
on it. This server answers instead, exactly as the docs show (https://www.opencost.io/docs/integrations/api, "Assets
API", and https://www.opencost.io/docs/integrations/api-examples, "/assets Example"):

* ``GET /assets?window=...``: ``window`` is required and parsed with OpenCost's rules (``today``, ``yesterday``,
  ``week``, ``lastweek``, ``month``, ``lastmonth``; ``<n>m|h|d|w``, with ``offset <n>m|h|d|w``; an RFC 3339 pair;
  a Unix-seconds pair). A missing or illegal window gets OpenCost's ``400 Invalid 'window' parameter: illegal
  window: ...`` (text/plain). ``filter`` is not implemented here and answers 500 as OpenCost does for a filter it
  cannot parse.
* ``200 {"code": 200, "status": "success", "data": {<key>: <asset>}}``: one ``Node`` asset per configured node, with
  the fields of OpenCost's ``Node.MarshalJSON`` in its order (numbers with six decimals, as OpenCost's ``%f``),
  label names sanitized as OpenCost does (``nvidia.com/gpu.product`` -> ``nvidia_com_gpu_product``), plus one
  ``Disk`` asset (which a client must skip). A node's cost over the window is its unit price x the unit-hours it
  ran inside the window (``n`` hours/days windows are rounded forward to whole hours/days, as OpenCost does).

It can be scripted to answer anything (garbage, NaN, HTTP 500) and stopped (connection refused) and started again
on the same port.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_DURATION = re.compile(r"^(\d+)(m|h|d|w)$")
_DURATION_OFFSET = re.compile(r"^(\d+)(m|h|d|w) offset (\d+)(m|h|d|w)$")
_RFC3339 = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})"
_RFC_PAIR = re.compile(rf"^({_RFC3339}),({_RFC3339})$")
_UNIX_PAIR = re.compile(r"^(\d+)[,|-](\d+)$")
_UNIT = {"m": dt.timedelta(minutes=1), "h": dt.timedelta(hours=1), "d": dt.timedelta(days=1),
         "w": dt.timedelta(weeks=1)}


def parse_window(window: str, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """``[start, end)`` of an OpenCost ``window`` (UTC, no offset), following ``parseWindow`` in OpenCost's
    ``core/pkg/opencost/window.go``.

    Raises:
        ValueError: ``illegal window: <window>``, OpenCost's own message.
    """
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if window == "today":
        return day, day + dt.timedelta(days=1)
    if window == "yesterday":
        return day - dt.timedelta(days=1), day
    if window in ("week", "lastweek"):
        start = day - dt.timedelta(days=(day.weekday() + 1) % 7)
        return (start, now) if window == "week" else (start - dt.timedelta(days=7), start)
    if window in ("month", "lastmonth"):
        start = day.replace(day=1)
        if window == "month":
            return start, now
        prev = (start - dt.timedelta(days=1)).replace(day=1)
        return prev, start
    match = _DURATION.match(window) or _DURATION_OFFSET.match(window)
    if match:
        unit = _UNIT[match.group(2)]
        end = now - (int(match.group(3)) * _UNIT[match.group(4)] if match.re is _DURATION_OFFSET else dt.timedelta())
        if match.group(2) in ("h", "d"):  # "the past X hours/days" = the current one (rounded forward) and X-1 more
            floor = end.replace(minute=0, second=0, microsecond=0)
            if match.group(2) == "d":
                floor = floor.replace(hour=0)
            end = floor + unit if floor != end else floor
        return end - int(match.group(1)) * unit, end
    if m := _RFC_PAIR.match(window):
        start, end = (dt.datetime.fromisoformat(g.replace("Z", "+00:00")) for g in m.groups())
        return start.astimezone(dt.UTC), end.astimezone(dt.UTC)
    if m := _UNIX_PAIR.match(window):
        return (dt.datetime.fromtimestamp(int(m.group(1)), dt.UTC), dt.datetime.fromtimestamp(int(m.group(2)), dt.UTC))
    raise ValueError(f"illegal window: {window}")


def sanitize_label(name: str) -> str:
    """A Kubernetes label name as OpenCost writes it in ``labels`` (``[^a-zA-Z0-9_]`` -> ``_``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


@dataclass(frozen=True)
class PricedNode:
    """One node with its unit prices, as OpenCost would price it.

    Attributes:
        name: Node name.
        cpu_cores / ram_bytes / gpu_count: Capacity.
        cpu_usd_per_core_hour / ram_usd_per_gib_hour / gpu_usd_per_gpu_hour: Unit prices (USD per unit-hour).
        labels: Kubernetes labels (e.g. ``{"nvidia.com/gpu.product": "nvidia-l4"}``), sanitized when answered.
        preemptible: Spot node.
        discount: OpenCost's discount on CPU and RAM (0..1).
        created: When the node started (None: before any window).
    """

    name: str
    cpu_cores: float
    ram_bytes: float
    gpu_count: float = 0.0
    cpu_usd_per_core_hour: float = 0.031611
    ram_usd_per_gib_hour: float = 0.004237
    gpu_usd_per_gpu_hour: float = 0.0
    labels: tuple[tuple[str, str], ...] = ()
    preemptible: bool = False
    discount: float = 0.0
    created: dt.datetime | None = None


def _f(value: float) -> float:
    return float(f"{value:f}")  # OpenCost writes every float with %f (six decimals)


def node_asset(node: PricedNode, start: dt.datetime, end: dt.datetime, now: dt.datetime,
               cluster: str = "cluster-one") -> tuple[str, dict[str, Any]]:
    """The ``/assets`` key and ``Node`` asset of ``node`` for the window ``[start, end)`` seen at ``now``."""
    run_start = max(start, node.created or start)
    run_end = max(run_start, min(end, now))
    hours = (run_end - run_start).total_seconds() / 3600
    cpu_h, ram_bh, gpu_h = node.cpu_cores * hours, node.ram_bytes * hours, node.gpu_count * hours
    cpu_cost = node.cpu_usd_per_core_hour * cpu_h
    ram_cost = node.ram_usd_per_gib_hour * ram_bh / 2**30
    gpu_cost = node.gpu_usd_per_gpu_hour * gpu_h
    labels = {sanitize_label(k): v for k, v in node.labels}
    labels.setdefault("kubernetes_io_hostname", node.name)
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    key = f"custom/__undefined__/__undefined__/Compute/{cluster}/Node/Kubernetes/{node.name}/{node.name}"
    asset = {
        "type": "Node",
        "properties": {"category": "Compute", "provider": "custom", "service": "Kubernetes", "cluster": cluster,
                       "name": node.name, "providerID": node.name},
        "labels": labels,
        "window": {"start": start.strftime(stamp), "end": end.strftime(stamp)},
        "start": run_start.strftime(stamp), "end": run_end.strftime(stamp),
        "minutes": _f(hours * 60), "nodeType": labels.get("node_kubernetes_io_instance_type", ""),
        "cpuCores": _f(node.cpu_cores), "ramBytes": _f(node.ram_bytes),
        "cpuCoreHours": _f(cpu_h), "ramByteHours": _f(ram_bh), "GPUHours": _f(gpu_h),
        "cpuBreakdown": {"idle": 1, "other": 0, "system": 0, "user": 0},
        "ramBreakdown": {"idle": 1, "other": 0, "system": 0, "user": 0},
        "preemptible": _f(1.0 if node.preemptible else 0.0), "discount": _f(node.discount),
        "cpuCost": _f(cpu_cost), "gpuCost": _f(gpu_cost), "gpuCount": _f(node.gpu_count), "ramCost": _f(ram_cost),
        "adjustment": _f(0.0),
        "totalCost": _f((cpu_cost + ram_cost) * (1 - node.discount) + gpu_cost),
    }
    return key, asset


@dataclass(frozen=True)
class Scripted:
    """A scripted answer: ``status`` with ``body`` (bytes/str as is, anything else as JSON)."""

    status: int
    body: Any


class OpenCostServer:
    """A local OpenCost answering ``GET /assets`` for ``nodes`` (see the module docstring). Context manager.

    Args:
        nodes: The nodes to price.
        now: Clock (timezone-aware UTC); injectable.
    """

    def __init__(self, nodes: list[PricedNode], *, now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
                 ) -> None:
        self.nodes = list(nodes)
        self._now = now
        self._scripted: deque[Scripted] = deque()
        self._always: Scripted | None = None
        self.requests: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> "OpenCostServer":
        """Serve (again, on the same port after :meth:`stop`)."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # http.server naming
                status, ctype, data = server._answer(self.path)
                self.close_connection = True  # no keep-alive: after stop(), nothing answers any more
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                return

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._server.daemon_threads = True
        self._port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="opencost-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: connections are refused until :meth:`start`."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "OpenCostServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL (``MODALSCALE_OPENCOST_URL``)."""
        assert self._port, "start() the server first"
        return f"http://127.0.0.1:{self._port}"

    # ------------------------------------------------------------------------------------------ scripting
    def script(self, *answers: Scripted) -> None:
        """Answer the next requests with ``answers``, in order, then normally again."""
        with self._lock:
            self._scripted.extend(answers)

    def always(self, answer: Scripted | None) -> None:
        """Answer every request with ``answer`` (None: normally again)."""
        with self._lock:
            self._always = answer

    # ------------------------------------------------------------------------------------------ answering
    def _answer(self, raw_path: str) -> tuple[int, str, bytes]:
        parsed = urllib.parse.urlsplit(raw_path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query, keep_blank_values=True).items()}
        with self._lock:
            self.requests.append({"path": parsed.path, **query})
            scripted = self._scripted.popleft() if self._scripted else self._always
        if parsed.path != "/assets":
            return 404, "text/plain; charset=utf-8", b"404 page not found\n"
        if scripted is not None:
            body = scripted.body
            data = body.encode() if isinstance(body, str) else body if isinstance(body, bytes) else (
                json.dumps(body).encode())
            return scripted.status, "application/json", data
        now = self._now()
        try:
            start, end = parse_window(query.get("window", ""), now)
        except ValueError as exc:
            return 400, "text/plain; charset=utf-8", f"Invalid 'window' parameter: {exc}\n".encode()
        if query.get("filter"):
            return 500, "text/plain; charset=utf-8", b"Error getting assets: filter not supported by this server\n"
        data: dict[str, Any] = dict(node_asset(n, start, end, now) for n in self.nodes)
        stamp = "%Y-%m-%dT%H:%M:%SZ"
        data["custom/__undefined__/__undefined__/Storage/cluster-one/Disk/Kubernetes/pvc-1/pvc-1"] = {
            "type": "Disk", "properties": {"category": "Storage", "provider": "custom", "service": "Kubernetes",
                                           "cluster": "cluster-one", "name": "pvc-1", "providerID": "pvc-1"},
            "labels": {}, "window": {"start": start.strftime(stamp), "end": end.strftime(stamp)},
            "start": start.strftime(stamp), "end": min(end, now).strftime(stamp), "minutes": 0.0,
            "byteHours": 0.0, "bytes": 8589934592.0, "adjustment": 0.0, "totalCost": 0.0}
        return 200, "application/json", json.dumps({"code": 200, "status": "success", "data": data}).encode()
