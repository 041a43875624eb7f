"""Redaction of credentials in any text that leaves the operator: conditions, Events, status, logs, results.

Why a module of its own: webhook URLs (``modalscale.notify``) and the operator's configured Prometheus and OpenCost
URLs (``MODALSCALE_PROMETHEUS_URL``, ``MODALSCALE_OPENCOST_URL``) may all carry user info
(``https://user:password@host``), and every package that shows a URL or an HTTP library's error text must redact
it the same way. Pure (standard library only), so the pure decision packages and the notify contracts may import
it (import-linter contracts in ``pyproject.toml``). Alertmanager redacts user info the same way
(prometheus/alertmanager PR #1822).
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Sequence

REDACTED = "<redacted>"

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#'\"]*@")
"""``scheme://<user info>@`` in any text: up to the last ``@`` before the path, query, fragment, a space or a quote,
so a raw ``@`` in a password is covered; the host (name, IPv4, ``[IPv6]``) and port after it stay."""


def _netloc(url: str) -> str:
    """The authority of ``url``; for a value without ``scheme://`` (a mistyped setting such as
    ``user:pass@prom:9090``), the text before the first ``/``, ``?`` or ``#``."""
    if "://" in url:
        return urllib.parse.urlsplit(url).netloc
    return re.split(r"[/?#]", url, maxsplit=1)[0]


def userinfo_parts(url: str) -> list[str]:
    """The user info of ``url`` in each form it may be shown: raw and decoded, percent-encoded (httpx and urllib
    styles), the password alone (4+ characters) and the user alone (8+: then it is a token), and the base64 of
    ``user:password`` that httpx and requests send as HTTP Basic credentials; [] when ``url`` has none."""
    netloc = _netloc(url)
    if "@" not in netloc:
        return []
    userinfo = netloc.rpartition("@")[0]
    user_raw, _, password_raw = userinfo.partition(":")
    user, password = urllib.parse.unquote(user_raw), urllib.parse.unquote(password_raw)
    parts = [userinfo, urllib.parse.unquote(userinfo)]
    for value, least in ((password_raw, 4), (password, 4), (user_raw, 8), (user, 8)):
        if len(value) >= least:
            parts += [value, urllib.parse.quote(value, safe=""), urllib.parse.quote(value, safe="!$&'()*+,;=:")]
    for name, secret in ((user, password), (user_raw, password_raw)):
        for encoding in ("utf-8", "latin-1"):
            try:
                parts.append(base64.b64encode(f"{name}:{secret}".encode(encoding)).decode("ascii"))
            except UnicodeEncodeError:
                continue
    return sorted({p for p in parts if p}, key=len, reverse=True)


def redact(text: str, sensitive: Sequence[str]) -> str:
    """Replace every sensitive string (URLs, tokens, secrets) in ``text`` by ``<redacted>``, then the user info of
    every URL left in it (``scheme://user:password@host`` -> ``scheme://<redacted>@host``), whatever its host,
    port or encoding: the one redaction for everything that leaves the operator (results, status, Events, logs)
    and for any other URL a message shows (prometheus/alertmanager PR #1822 does the same for its config)."""
    for part in sensitive:
        if part:
            text = text.replace(part, REDACTED)
    return _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def redact_url(url: str) -> str:
    """``url`` as it may be shown: its user info replaced by ``<redacted>`` (``https://<redacted>@prom:9090``),
    host, port and path kept; unchanged when it has none."""
    netloc = _netloc(url)
    if "@" not in netloc:
        return url
    return url.replace(netloc, f"{REDACTED}@{netloc.rpartition('@')[2]}", 1)


def redact_for_url(text: str, url: str) -> str:
    """``text`` (an error message, an exception's text) with the user info of ``url`` redacted in every form it
    may take (:func:`userinfo_parts`) and of any other URL in it (:func:`redact`)."""
    return redact(text, userinfo_parts(url))


__all__ = ["REDACTED", "redact", "redact_for_url", "redact_url", "userinfo_parts"]
