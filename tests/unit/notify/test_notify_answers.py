"""What a platform's answer means (pure classification), redaction, the client-side window, and the rule that
everything in ``modalscale.notify`` but the sender imports no HTTP or Kubernetes library."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone

import pytest

from modalscale.api.budgetpolicy import NotifierType
from modalscale.notify.answers import classify, retry_after_s, sensitive_parts
from modalscale.notify.limits import RateLimit, SlidingWindow
from modalscale.redaction import redact

N = NotifierType


@pytest.mark.parametrize(
    ("kind", "status", "body", "delivered", "reason", "retryable", "code"),
    [(N.SLACK, 200, "ok", True, "Delivered", False, None),
     (N.SLACK, 400, "invalid_payload", False, "RejectedByPlatform", False, "invalid_payload"),
     (N.TEAMS, 202, "", True, "Delivered", False, None),
     (N.TEAMS, 400, "bad", False, "RejectedByPlatform", False, None),
     (N.WECOM, 200, '{"errcode": 0, "errmsg": "ok"}', True, "Delivered", False, 0),
     (N.WECOM, 200, '{"errcode": 93000, "errmsg": "invalid webhook url"}', False, "RejectedByPlatform", False, 93000),
     (N.WECOM, 200, '{"errcode": 45009, "errmsg": "api freq out of limit"}', False, "RateLimited", True, 45009),
     (N.DINGTALK, 200, '{"errcode": 130101, "errmsg": "send too fast"}', False, "RateLimited", True, 130101),
     (N.FEISHU, 200, '{"code": 0, "msg": "success"}', True, "Delivered", False, 0),
     (N.FEISHU, 200, '{"StatusCode": 0}', True, "Delivered", False, 0),
     (N.FEISHU, 200, '{"code": 19021, "msg": "sign match fail"}', False, "RejectedByPlatform", False, 19021),
     (N.FEISHU, 200, "not json", False, "RejectedByPlatform", False, None),
     (N.WEBHOOK, 204, "", True, "Delivered", False, None),
     (N.WEBHOOK, 401, "bad signature", False, "RejectedByPlatform", False, None),
     (N.WEBHOOK, 503, "busy", False, "ServerError", True, "busy"),
     (N.SLACK, 429, "rate_limited", False, "RateLimited", True, None)],
    ids=["slack-ok", "slack-400", "teams-202", "teams-400", "wecom-ok", "wecom-93000", "wecom-45009",
         "dingtalk-130101", "feishu-ok", "feishu-old-ok", "feishu-19021", "feishu-not-json", "webhook-204",
         "webhook-401", "webhook-503", "slack-429"],
)
def test_classify_reads_each_platforms_answer(kind, status, body, delivered, reason, retryable, code) -> None:
    out = classify(kind, status, body, None)
    assert (out.delivered, out.reason, out.retryable, out.status_code, out.platform_code) == (
        delivered, reason, retryable, status, code)


def test_a_rate_limit_code_waits_at_least_the_platforms_window_or_the_retry_after() -> None:
    assert classify(N.DINGTALK, 200, '{"errcode": 130101, "errmsg": "x"}', None).retry_after_s == 600.0
    assert classify(N.WECOM, 200, '{"errcode": 45009, "errmsg": "x"}', 7.0).retry_after_s == 7.0
    assert classify(N.SLACK, 429, "", 2.0).retry_after_s == 2.0


def test_retry_after_reads_seconds_and_http_dates_and_never_goes_negative() -> None:
    now = datetime(2026, 5, 1, 9, 30, tzinfo=timezone.utc)
    assert retry_after_s("3", now) == 3.0
    assert retry_after_s("Fri, 01 May 2026 09:30:10 GMT", now) == 10.0
    assert retry_after_s("Fri, 01 May 2026 09:29:00 GMT", now) == 0.0
    assert retry_after_s("soon", now) is None and retry_after_s(None, now) is None


def test_redaction_removes_the_url_its_tokens_and_the_secret() -> None:
    url = "https://oapi.dingtalk.com/robot/send?access_token=TOKENSECRET1"
    parts = sensitive_parts(url, "SECsigning")
    text = redact(f"POST {url} failed; token TOKENSECRET1; secret SECsigning", parts)
    assert "TOKENSECRET1" not in text and "SECsigning" not in text and "dingtalk.com/robot" not in text
    assert text.count("<redacted>") == 3


def test_the_sliding_window_makes_the_next_message_wait_for_a_slot() -> None:
    window, limits = SlidingWindow(), (RateLimit(2, 60.0), RateLimit(1, 1.0))
    assert window.wait_s("k", limits, 0.0) == 0.0
    window.record("k", 0.0)
    assert window.wait_s("k", limits, 0.5) == pytest.approx(0.5)  # 1 per second
    window.record("k", 1.0)
    assert window.wait_s("k", limits, 2.0) == pytest.approx(58.0)  # 2 per minute: the first leaves at 60 s
    assert window.wait_s("other", limits, 2.0) == 0.0  # per webhook


def test_the_pure_notify_modules_load_no_http_or_kubernetes_library() -> None:
    # The sender is the one module that does I/O; payloads, signatures, answers and limits must stay importable
    # (and testable) without httpx, kopf or kubernetes.
    code = ("import sys\n"
            "import modalscale.notify, modalscale.notify.payloads, modalscale.notify.signing, "
            "modalscale.notify.answers, modalscale.notify.limits\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('httpx', 'httpcore', 'kopf', 'kubernetes', 'aiohttp'))\n"
            "print(bad)\n"
            "import modalscale.notify.sender\n"
            "print('httpx' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split("\n")[:2] == ["[]", "True"]  # the check can see httpx when it is loaded


@pytest.mark.parametrize(
    ("body", "reason", "retryable"),
    [('{"code": 9499, "msg": "Bad Request", "data": {}}', "RejectedByPlatform", False),
     ('{"code": 9499, "msg": "Bad Request: fail to parse content"}', "RejectedByPlatform", False),
     ('{"StatusCode": 9499, "StatusMessage": "Bad Request"}', "RejectedByPlatform", False),
     ('{"code": 9499, "msg": "too many request", "data": {}}', "RateLimited", True),
     ('{"code": 11232, "msg": "frequency limited psm[lark.oapi.app_platform_runtime]appID[1500]"}', "RateLimited",
      True),
     ('{"code": 19024, "msg": "Key Words Not Found"}', "RejectedByPlatform", False)],
    ids=["9499-bad-request", "9499-parse", "9499-old-shape", "9499-too-many", "11232", "19024"],
)
def test_feishu_9499_is_its_bad_request_and_11232_its_rate_limit(body, reason, retryable) -> None:
    """Feishu's custom bot guide (https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot): a malformed
    or oversized body (over 20 KB) is answered ``{"code": 9499, "msg": "Bad Request"}``, and the rate limit (100/min,
    5/s) with ``11232``. 9499 was read as a rate limit: a body Feishu refuses was sent again 5 times within the
    round, 1 s apart, and reported ``RateLimited``. Feishu's gateway also answers 9499 "too many request" (seen by
    kubesphere/notification-manager#126), so a 9499 whose message says so stays a rate limit."""
    out = classify(N.FEISHU, 200, body, None)
    assert (out.reason, out.retryable) == (reason, retryable), out
    assert (out.retry_after_s is not None) == retryable
