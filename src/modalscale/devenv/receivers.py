"""Local chat-webhook receivers for tests and the demo: real HTTP servers on 127.0.0.1 that behave like the
platforms (Slack, Teams Workflows, WeCom, DingTalk, Feishu, an Alertmanager-style webhook).

Why a module: the sender must be proven against real HTTP, real signatures and the platforms' real answer
shapes, without the internet. Each :class:`ChatReceiver` listens on an ephemeral loopback port, checks the
payload shape, the token in the URL, the signature and the timestamp freshness (DingTalk and Feishu refuse
timestamps more than one hour away, as the platforms do), records what arrived, can be scripted to answer with
errors, 429 (+ ``Retry-After``) or delays, can be taken down (every request answered with one error, however
many retries come, until :meth:`ChatReceiver.recover`), and can print what a chat room would have shown
(:meth:`ChatReceiver.transcript`).

Answers imitate the platforms' documented ones (see ``modalscale.notify.answers`` for the sources): Slack
``200 ok`` / ``400 invalid_payload`` / ``404 no_service``; Teams ``202``; WeCom and DingTalk ``200
{"errcode": ...}``; Feishu ``200 {"code": ...}`` (19021 for a bad signature or stale timestamp); webhook
``200`` / ``401`` on a bad HMAC.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import secrets
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KINDS = ("Slack", "Teams", "WeCom", "DingTalk", "Feishu", "Webhook")
MAX_SKEW_S = 3600
"""DingTalk and Feishu accept signed timestamps at most one hour away from their clock."""


@dataclass(frozen=True)
class Reply:
    """A scripted answer for the next request (consumed in order).

    Attributes:
        status: HTTP status to answer with; None = behave normally (after ``delay_s``).
        body: Body (``dict`` is sent as JSON).
        headers: Extra headers, e.g. ``{"Retry-After": "1"}``.
        delay_s: Seconds to wait before answering (a hanging receiver); interrupted by :meth:`ChatReceiver.stop`.
    """

    status: int | None = None
    body: str | bytes | dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Received:
    """One request as it arrived, and how the receiver judged it."""

    kind: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    payload: Any
    accepted: bool
    errors: list[str]
    status: int
    scripted: bool
    received_at: float

    def room_text(self) -> str:
        """What a chat room (or Alertmanager receiver) shows for this message."""
        p = self.payload if isinstance(self.payload, dict) else {}
        if self.kind == "Slack":
            lines = []
            for block in p.get("blocks", []):
                if block.get("type") in ("header", "section") and "text" in block:
                    lines.append(block["text"]["text"].replace("*", ""))
                for f in block.get("fields", []):
                    lines.append(f["text"].replace("*", "").replace("\n", ": ", 1))
            shown = "\n".join(lines) or p.get("text", "")
            # mrkdwn's escapes, as Slack shows them (payloads.slack_escape)
            return shown.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
        if self.kind == "Teams":
            card = p["attachments"][0]["content"]
            lines = []
            for item in card.get("body", []):
                if item.get("type") == "TextBlock":
                    lines.append(item["text"])
                if item.get("type") == "FactSet":
                    lines += [f"{f['title']}: {f['value']}" for f in item["facts"]]
            return "\n".join(lines)
        if self.kind == "WeCom":
            return p["markdown"]["content"]
        if self.kind == "DingTalk":
            return p["markdown"]["text"]
        if self.kind == "Feishu":
            card = p["card"]
            return card["header"]["title"]["content"] + "\n" + "\n".join(  # lark_md's escapes (lark_md_escape) as shown
                html.unescape(e["text"]["content"]) for e in card.get("elements", []) if "text" in e)
        alerts = p.get("alerts", [{}])
        shown = dict.fromkeys(f"[{a.get('status')}] {a.get('annotations', {}).get('summary', '')}\n"
                              f"{a.get('annotations', {}).get('description', '')}" for a in alerts)
        return "\n".join(shown)


def _dingtalk_expected_sign(secret: str, timestamp: str) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def _feishu_expected_sign(secret: str, timestamp: str) -> str:
    digest = hmac.new(f"{timestamp}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class ChatReceiver:
    """A fake ``kind`` endpoint on 127.0.0.1 (ephemeral port). Use as a context manager.

    Args:
        kind: One of :data:`KINDS`.
        secret: Signing secret to verify (DingTalk, Feishu, Webhook); None = signatures not required.
        now: Clock in Unix seconds (for timestamp freshness); injectable.
        room: Name shown in the transcript.
    """

    def __init__(self, kind: str, secret: str | None = None, *, now: Callable[[], float] = time.time,
                 room: str = "") -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.kind = kind
        self.secret = secret
        self.room = room or f"{kind.lower()}-room"
        self._now = now
        self._token = secrets.token_hex(12)
        self._replies: deque[Reply] = deque()
        self._outage: Reply | None = None
        self._received: list[Received] = []
        self._arrivals = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._incidents: dict[str, set[str]] = {}
        self._unmatched: list[tuple[str, str]] = []

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> "ChatReceiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, headers, payload = receiver._handle(self.path, dict(self.headers.items()), body)
                if receiver._stop.is_set():
                    return
                data = payload if isinstance(payload, bytes) else (
                    json.dumps(payload).encode() if isinstance(payload, dict) else str(payload or "").encode())
                try:
                    self.send_response(status)
                    ctype = "application/json" if isinstance(payload, dict) else "text/plain; charset=utf-8"
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout); the request is still recorded

            def log_message(self, format: str, *args: Any) -> None:  # silence: paths carry tokens
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"receiver-{self.kind}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; wakes up any scripted delay."""
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ChatReceiver":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -------------------------------------------------------------------------------------------- surface
    @property
    def base(self) -> str:
        assert self._server is not None, "start() the receiver first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        """The webhook URL a Secret would hold (with this receiver's token)."""
        t = self._token
        return self.base + {
            "Slack": f"/services/T0000/B0000/{t}",
            "Teams": f"/workflows/{t[:8]}/triggers/manual/paths/invoke?api-version=2016-06-01&sig={t}",
            "WeCom": f"/cgi-bin/webhook/send?key={t}",
            "DingTalk": f"/robot/send?access_token={t}",
            "Feishu": f"/open-apis/bot/v2/hook/{t}",
            "Webhook": f"/hook/{t}",
        }[self.kind]

    def script(self, *replies: Reply) -> None:
        """Queue answers for the next requests (then the receiver behaves normally again)."""
        with self._cond:
            self._replies.extend(replies)

    def outage(self, reply: Reply | None = None) -> None:
        """Answer every request with ``reply`` (default ``503 Service Unavailable``) until :meth:`recover`.

        Scripted replies (:meth:`script`) still come first.
        """
        with self._cond:
            self._outage = reply or Reply(status=503, body="service unavailable")

    def recover(self) -> None:
        """End the outage: requests are judged and answered normally again."""
        with self._cond:
            self._outage = None

    @property
    def received(self) -> list[Received]:
        with self._cond:
            return list(self._received)

    @property
    def accepted(self) -> list[Received]:
        return [r for r in self.received if r.accepted]

    def wait_for(self, count: int, timeout_s: float = 10.0, accepted_only: bool = False) -> bool:
        """Block until ``count`` requests (accepted ones if asked) arrived or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                have = sum(1 for r in self._received if r.accepted or not accepted_only)
                if have >= count:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)

    def wait_for_arrivals(self, count: int, timeout_s: float = 10.0) -> bool:
        """Block until ``count`` requests have arrived (answered or not, e.g. still in a scripted delay)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._arrivals < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def open_incidents(self) -> dict[str, list[str]]:
        """Webhook: what an Alertmanager-style receiver (Grafana OnCall, PagerDuty) holds open: ``groupKey`` ->
        fingerprints of its alerts fired and not resolved. A resolved alert closes the one with its fingerprint in
        its group; a group with none left is closed."""
        with self._cond:
            return {k: sorted(v) for k, v in self._incidents.items() if v}

    @property
    def unmatched_resolves(self) -> list[tuple[str, str]]:
        """Webhook: (groupKey, fingerprint) of each resolved alert that matched no open alert: a resolve that
        resolves nothing (such a receiver accepts it and keeps the incident open)."""
        with self._cond:
            return list(self._unmatched)

    def _track(self, payload: dict[str, Any]) -> None:
        key = payload["groupKey"]
        with self._cond:
            open_ = self._incidents.setdefault(key, set())
            for a in payload["alerts"]:
                if a["status"] == "firing":
                    open_.add(a["fingerprint"])
                elif a["fingerprint"] in open_:
                    open_.discard(a["fingerprint"])
                else:
                    self._unmatched.append((key, a["fingerprint"]))

    def transcript(self) -> str:
        """What the chat room saw: every accepted message, oldest first."""
        out = []
        for r in self.accepted:
            stamp = time.strftime("%H:%M:%S", time.gmtime(r.received_at))
            out.append(f"--- {self.kind} #{self.room} {stamp} UTC ---\n{r.room_text()}")
        return "\n".join(out)

    # -------------------------------------------------------------------------------------------- judging
    def _handle(self, raw_path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], Any]:
        split = urllib.parse.urlsplit(raw_path)
        query = dict(urllib.parse.parse_qsl(split.query, keep_blank_values=True))
        with self._cond:
            self._arrivals += 1
            self._cond.notify_all()
            reply = self._replies.popleft() if self._replies else self._outage
        if reply is not None and reply.delay_s > 0:
            self._stop.wait(reply.delay_s)
        try:
            payload: Any = json.loads(body.decode("utf-8")) if body else None
        except (UnicodeDecodeError, ValueError):
            payload = None
        if reply is not None and reply.status is not None:
            self._record(split.path, query, headers, body, payload, False, ["scripted answer"], reply.status, True)
            return reply.status, reply.headers, reply.body
        errors = self._check_token(split.path, query) or self._check_signature(query, headers, body, payload)
        if not errors:
            errors = self._check_shape(headers, payload)
        status, answer = self._answer(errors)
        if not errors and self.kind == "Webhook":
            self._track(payload)
        self._record(split.path, query, headers, body, payload, not errors, errors, status, False)
        return status, (reply.headers if reply else {}), answer

    def _record(self, path: str, query: dict[str, str], headers: dict[str, str], body: bytes, payload: Any,
                accepted: bool, errors: list[str], status: int, scripted: bool) -> None:
        with self._cond:
            self._received.append(Received(self.kind, path, query, headers, body, payload, accepted, errors, status,
                                           scripted, self._now()))
            self._cond.notify_all()

    def _check_token(self, path: str, query: dict[str, str]) -> list[str]:
        t = self._token
        ok = {
            "Slack": path == f"/services/T0000/B0000/{t}",
            "Teams": path.startswith("/workflows/") and query.get("sig") == t,
            "WeCom": query.get("key") == t,
            "DingTalk": query.get("access_token") == t,
            "Feishu": path == f"/open-apis/bot/v2/hook/{t}",
            "Webhook": path == f"/hook/{t}",
        }[self.kind]
        return [] if ok else ["token:invalid"]

    def _fresh(self, timestamp: str, unit_per_s: int) -> bool:
        try:
            ts = int(timestamp) / unit_per_s
        except ValueError:
            return False
        return abs(self._now() - ts) <= MAX_SKEW_S

    def _check_signature(self, query: dict[str, str], headers: dict[str, str], body: bytes, payload: Any) -> list[str]:
        if not self.secret:
            return []
        if self.kind == "DingTalk":
            ts, sign = query.get("timestamp", ""), query.get("sign", "")
            if not self._fresh(ts, 1000):
                return ["sign:timestamp-stale"]
            if not hmac.compare_digest(sign, _dingtalk_expected_sign(self.secret, ts)):
                return ["sign:mismatch"]
        elif self.kind == "Feishu":
            p = payload if isinstance(payload, dict) else {}
            ts, sign = str(p.get("timestamp", "")), str(p.get("sign", ""))
            if not self._fresh(ts, 1):
                return ["sign:timestamp-stale"]
            if not hmac.compare_digest(sign, _feishu_expected_sign(self.secret, ts)):
                return ["sign:mismatch"]
        elif self.kind == "Webhook":
            lower = {k.lower(): v for k, v in headers.items()}
            ts = lower.get("x-modalscale-timestamp", "")
            expected = "sha256=" + hmac.new(self.secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
            if not self._fresh(ts, 1) or not hmac.compare_digest(lower.get("x-modalscale-signature", ""), expected):
                return ["sign:mismatch"]
        return []

    def _check_shape(self, headers: dict[str, str], p: Any) -> list[str]:
        ctype = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
        if "application/json" not in ctype:
            return [f"content-type:{ctype or 'missing'}"]
        if not isinstance(p, dict):
            return ["payload:not-a-json-object"]
        errors: list[str] = []
        if self.kind == "Slack":
            if not isinstance(p.get("text"), str) and not isinstance(p.get("blocks"), list):
                errors.append("slack:no-text-or-blocks")
            for b in p.get("blocks", []):
                if b.get("type") not in ("header", "section", "context", "divider", "actions", "image"):
                    errors.append(f"slack:block-type:{b.get('type')}")
                if b.get("type") == "header" and len(b.get("text", {}).get("text", "")) > 150:
                    errors.append("slack:header-too-long")
                if len(b.get("fields", [])) > 10:
                    errors.append("slack:too-many-fields")
        elif self.kind == "Teams":
            atts = p.get("attachments")
            if p.get("type") != "message" or not isinstance(atts, list) or not atts:
                errors.append("teams:not-a-message-with-attachments")
            else:
                a = atts[0]
                if a.get("contentType") != "application/vnd.microsoft.card.adaptive":
                    errors.append("teams:attachment-not-adaptive-card")
                card = a.get("content") or {}
                if card.get("type") != "AdaptiveCard" or not isinstance(card.get("body"), list):
                    errors.append("teams:invalid-card")
        elif self.kind == "WeCom":
            content = (p.get("markdown") or {}).get("content")
            if p.get("msgtype") != "markdown" or not isinstance(content, str):
                errors.append("wecom:invalid-markdown")
            elif len(content.encode("utf-8")) > 4096:
                errors.append("wecom:content-over-4096-bytes")
        elif self.kind == "DingTalk":
            md = p.get("markdown") or {}
            if (p.get("msgtype") != "markdown" or not isinstance(md.get("title"), str)
                    or not isinstance(md.get("text"), str)):
                errors.append("dingtalk:invalid-markdown")
        elif self.kind == "Feishu":
            card = p.get("card") or {}
            if p.get("msg_type") != "interactive" or not isinstance(card.get("elements"), list):
                errors.append("feishu:invalid-card")
        else:
            alerts = p.get("alerts")
            if p.get("version") != "4" or p.get("status") not in ("firing", "resolved") or not isinstance(alerts, list):
                errors.append("webhook:not-alertmanager-v4")
            else:
                # Alertmanager's webhook format: a group (groupKey) of alerts, each identified by its fingerprint;
                # the group is "resolved" only when every alert in it is, and a resolved alert has its endsAt.
                if not isinstance(p.get("groupKey"), str) or not p["groupKey"] or not alerts:
                    errors.append("webhook:no-groupKey-or-alerts")
                statuses = {a.get("status") for a in alerts if isinstance(a, dict)}
                if p["status"] != ("firing" if "firing" in statuses else "resolved"):
                    errors.append("webhook:group-status-disagrees-with-alerts")
                for a in alerts:
                    if not isinstance(a.get("labels"), dict) or "alertname" not in a["labels"]:
                        errors.append("webhook:alert-without-alertname")
                    if a.get("status") not in ("firing", "resolved"):
                        errors.append("webhook:alert-status")
                    if not isinstance(a.get("fingerprint"), str) or not a["fingerprint"]:
                        errors.append("webhook:alert-without-fingerprint")
                    if not str(a.get("startsAt", "")).endswith("Z") or not str(a.get("endsAt", "")).endswith("Z"):
                        errors.append("webhook:startsAt-or-endsAt-not-rfc3339-utc")
                    if a.get("status") == "resolved" and a.get("endsAt") == "0001-01-01T00:00:00Z":
                        errors.append("webhook:resolved-without-endsAt")
        return errors

    def _answer(self, errors: list[str]) -> tuple[int, Any]:
        k = self.kind
        if not errors:
            return {
                "Slack": (200, "ok"),
                "Teams": (202, ""),
                "WeCom": (200, {"errcode": 0, "errmsg": "ok"}),
                "DingTalk": (200, {"errcode": 0, "errmsg": "ok"}),
                "Feishu": (200, {"StatusCode": 0, "StatusMessage": "success", "code": 0, "data": {}, "msg": "success"}),
                "Webhook": (200, ""),
            }[k]
        first = errors[0]
        if first == "token:invalid":
            return {
                "Slack": (404, "no_service"),
                "Teams": (404, {"error": {"code": "TriggerNotFound", "message": "workflow not found"}}),
                "WeCom": (200, {"errcode": 93000, "errmsg": "invalid webhook url"}),
                "DingTalk": (200, {"errcode": 300001, "errmsg": "token is not exist"}),
                "Feishu": (200, {"code": 19001, "msg": "param invalid: incoming webhook access token invalid",
                                 "data": {}}),
                "Webhook": (404, "not found"),
            }[k]
        if first.startswith("sign:"):
            return {
                "DingTalk": (200, {"errcode": 310000, "errmsg": "sign not match"}),
                "Feishu": (200, {"code": 19021, "msg": "sign match fail or timestamp is not within one hour from "
                                                     "current time", "data": {}}),
                "Webhook": (401, "bad signature"),
            }[k]
        return {
            "Slack": (400, "invalid_payload"),
            "Teams": (400, {"error": {"code": "InvalidRequestContent", "message": first}}),
            "WeCom": (200, {"errcode": 40008, "errmsg": "invalid message type"}),
            "DingTalk": (200, {"errcode": 40035, "errmsg": "missing parameter json"}),
            "Feishu": (200, {"code": 9499, "msg": "Bad Request", "data": {}}),  # the custom bot guide's answer
            "Webhook": (400, first),
        }[k]


__all__ = ["KINDS", "ChatReceiver", "Received", "Reply"]
