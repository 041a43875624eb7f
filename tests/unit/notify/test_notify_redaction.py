"""User info of a webhook URL never leaves the sender, in any form httpx writes it (issue 22 s1 fault 4).

Tokens in paths and query strings were redacted, but the password of ``https://user:pass@host/...`` reached
results, status, Events and logs whenever an error text showed the URL as httpx normalised it (host lower-cased,
``:443`` dropped, the password percent-encoded): only the raw URL was a sensitive string. The texts below are
httpx's own (``httpx.URL``, the ``HTTPStatusError`` message, the request line it logs), built without a network;
``tests/integration/test_notify_delivery.py`` adds the ones from a real closed port and a real receiver.
(Alertmanager redacts user info the same way: prometheus/alertmanager PR #1822.)
"""

from __future__ import annotations

import base64
import urllib.parse

import httpx
import pytest

from modalscale.notify.answers import sensitive_parts
from modalscale.redaction import REDACTED, redact

# (id, URL as stored in the Secret, the user-info secrets that must never be shown, decoded)
URLS = [
    ("plain", "https://alice:hunter2pass@hooks.example.com/services/x", ["hunter2pass"]),
    ("upper-host-443", "https://alice:hunter2pass@Hooks.EXAMPLE.com:443/x", ["hunter2pass"]),
    ("http-80", "http://alice:hunter2pass@HOOKS.example.com:80/x", ["hunter2pass"]),
    ("percent-encoded", "https://alice:p%40ss%2Fw0rd@hooks.example.com/x", ["p@ss/w0rd"]),
    ("raw-at-in-password", "https://alice:p@ssw0rd@hooks.example.com/x", ["p@ssw0rd"]),
    ("space-in-password", "https://alice:pa ss w0rd@hooks.example.com/x", ["pa ss w0rd"]),
    ("ipv6-port", "http://alice:hunter2pass@[::1]:8080/hook", ["hunter2pass"]),
    ("ipv4-port", "http://alice:hunter2pass@127.0.0.1:9/hook", ["hunter2pass"]),
    ("token-as-user", "https://xoxb-TOKENVALUE123@hooks.example.com/x", ["xoxb-TOKENVALUE123"]),
    ("unicode-password", "https://alice:pässwörd1@hooks.example.com/x", ["pässwörd1"]),
    ("query-and-userinfo", "https://alice:hunter2pass@hooks.example.com/x?token=QUERYTOKEN1", ["hunter2pass",
                                                                                            "QUERYTOKEN1"]),
]


def httpx_texts(url: str) -> list[str]:
    """What httpx itself writes about a request to ``url``: the URL, its repr, the 404 error, the log line."""
    request = httpx.Request("POST", url)
    texts = [str(request.url), repr(request.url), f'HTTP Request: POST {request.url} "HTTP/1.1 404 Not Found"']
    try:
        httpx.Response(404, request=request).raise_for_status()
    except httpx.HTTPStatusError as exc:
        texts.append(f"{type(exc).__name__}: {exc}")
    return texts


def forms(secret: str) -> set[str]:
    """A secret as it may appear: decoded, percent-encoded (urllib and httpx styles)."""
    return {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret), str(httpx.URL(
        "http://h/", params={"q": secret}).params["q"])}


@pytest.mark.parametrize(("url", "secrets"), [u[1:] for u in URLS], ids=[u[0] for u in URLS])
def test_the_user_info_of_a_url_is_redacted_in_every_form_httpx_writes_it(url: str, secrets: list[str]) -> None:
    parts = sensitive_parts(url, None)
    request_url = httpx.URL(url)
    for text in httpx_texts(url):
        shown = redact(text, parts)
        assert REDACTED in shown, (text, shown)
        for secret in secrets:
            for form in forms(secret):
                assert form not in shown, (form, shown)
        assert f"{request_url.username}:" not in shown or not request_url.password


@pytest.mark.parametrize(("url", "secrets"), [u[1:] for u in URLS], ids=[u[0] for u in URLS])
def test_the_basic_credentials_httpx_sends_for_the_user_info_are_redacted(url: str, secrets: list[str]) -> None:
    u = httpx.URL(url)
    token = base64.b64encode(f"{u.username}:{u.password}".encode()).decode()
    shown = redact(f"receiver answered 401: bad Authorization: Basic {token}", sensitive_parts(url, None))
    assert token not in shown and REDACTED in shown


def test_user_info_in_any_url_of_a_text_is_redacted_even_when_not_a_known_part() -> None:
    # e.g. a receiver's error body naming another URL, or a redirect target: the rule is the URL form itself.
    text = "upstream https://bob:0ther-secret@[2001:db8::1]:8443/api failed; see http://carol:pw@x.test:80/"
    shown = redact(text, [])
    assert "0ther-secret" not in shown and ":pw@" not in shown and "bob" not in shown
    assert shown == f"upstream https://{REDACTED}@[2001:db8::1]:8443/api failed; see http://{REDACTED}@x.test:80/"


def test_text_without_user_info_is_left_alone() -> None:
    text = "Connection to Webhook failed: ConnectError: All connection attempts failed; mail ops@example.com"
    assert redact(text, sensitive_parts("https://hooks.example.com/x", None)) == text
