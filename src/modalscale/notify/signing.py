"""Request signing of the chat platforms that sign, and of our generic webhook (pure: no I/O, no clock).

Why a module: a signature is a known-answer function of a secret and a timestamp, written once from each
platform's document and tested byte for byte; the payload builder (:mod:`modalscale.notify.payloads`) applies it
to a request and the sender re-signs on every attempt (DingTalk and Feishu reject timestamps older than one hour).

* DingTalk custom robot: ``sign = urlencode(base64(HmacSHA256(key=secret, msg=f"{timestamp_ms}\\n{secret}")))``
  appended to the URL as ``&timestamp=...&sign=...``
  (https://open.dingtalk.com/document/robots/customize-robot-security-settings).
* Feishu/Lark custom bot: ``sign = base64(HmacSHA256(key=f"{timestamp_s}\\n{secret}", msg=b""))`` sent in the JSON
  body with ``timestamp`` (seconds, valid for 1 hour) (https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot).
* Generic webhook (our own scheme, in the style of Slack's request signing): ``X-Modalscale-Timestamp`` and
  ``X-Modalscale-Signature: sha256=<hex HMAC-SHA256(secret, f"{ts}." + body)>``.

The secret only ever enters an HMAC; nothing here returns or logs it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse

WEBHOOK_SIGNATURE_HEADER = "X-Modalscale-Signature"
WEBHOOK_TIMESTAMP_HEADER = "X-Modalscale-Timestamp"


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk ``sign`` query value (already URL-encoded).

    ``urlencode(base64(HmacSHA256(key=secret, msg=f"{timestamp_ms}\\n{secret}")))`` (UTF-8), per
    https://open.dingtalk.com/document/robots/customize-robot-security-settings.
    """
    digest = hmac.new(secret.encode("utf-8"), f"{timestamp_ms}\n{secret}".encode("utf-8"), hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest).decode("ascii"))


def dingtalk_signed_url(url: str, secret: str, timestamp_ms: int) -> str:
    """The webhook URL with ``timestamp`` and ``sign`` appended to its query (other parameters kept)."""
    parts = urllib.parse.urlsplit(url)
    extra = f"timestamp={timestamp_ms}&sign={dingtalk_sign(secret, timestamp_ms)}"
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def feishu_sign(secret: str, timestamp_s: int) -> str:
    """Feishu/Lark ``sign`` body value.

    ``base64(HmacSHA256(key=f"{timestamp_s}\\n{secret}", msg=b""))``: the string to sign is the *key* and the
    message is empty, per https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot.
    """
    digest = hmac.new(f"{timestamp_s}\n{secret}".encode("utf-8"), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def webhook_signature(secret: str, timestamp_s: int, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256(key=secret, msg=f"{timestamp_s}." + body) for the generic webhook."""
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp_s}.".encode("ascii") + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


__all__ = ["WEBHOOK_SIGNATURE_HEADER", "WEBHOOK_TIMESTAMP_HEADER", "dingtalk_sign", "dingtalk_signed_url",
           "feishu_sign", "webhook_signature"]
