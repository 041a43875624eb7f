"""Resolving notification Secrets never raises: every unreadable notification becomes a failed receiver that names
the field (user report item 1: an empty ``urlKey`` raised ``KeyError: ''`` in every evaluation, so no alert was
ever sent and ``AlertDelivered`` froze), and the CRD and the parser refuse keys no Secret can hold.

The Secret reads go through a recording stand-in for ``CoreV1Api`` (STYLE C10: a fake client for an edge case;
the same path runs for real in tests/integration/operator/test_budget.py).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from modalscale.api.budgetpolicy import InvalidBudgetSpec, Notification, NotifierType, SecretRef, parse_budget_spec
from modalscale.operator.budget.observe import BudgetObserver

REPO = Path(__file__).resolve().parents[3]
CRD_PATHS = [REPO / "crds" / "budgetpolicies.modalscale.io.yaml",
             REPO / "charts" / "modalscale-crds" / "files" / "crds" / "budgetpolicies.modalscale.io.yaml"]


class _Response:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()


class _Core:
    """``read_namespaced_secret`` answering from a dict (name -> data, values already base64)."""

    def __init__(self, secrets: dict[str, dict[str, str]]) -> None:
        self.secrets = secrets
        self.reads: list[tuple[str, str]] = []

    def read_namespaced_secret(self, name: str, namespace: str, **_: Any) -> _Response:
        self.reads.append((namespace, name))
        return _Response({"metadata": {"name": name}, "data": self.secrets[name]})


def observer(secrets: dict[str, dict[str, str]]) -> BudgetObserver:
    obs = BudgetObserver.__new__(BudgetObserver)
    obs.core = _Core(secrets)  # type: ignore[assignment]
    return obs


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def notification(name: str = "room", **secret_ref: Any) -> Notification:
    """A Notification as an older CRD (without minLength) let through: built without the parser's checks."""
    ref = SecretRef.model_construct(name=secret_ref.get("name", "hook"), url_key=secret_ref.get("urlKey", "url"),
                                    signing_secret_key=secret_ref.get("signingSecretKey"))
    return Notification.model_construct(name=name, type=NotifierType.SLACK, secret_ref=ref)


def test_an_empty_url_key_is_a_failed_receiver_naming_the_field_not_a_key_error() -> None:
    obs = observer({"hook": {"url": b64("http://127.0.0.1:1/x")}})
    ok, problems = obs.read_receivers("ml", [notification(urlKey=""), notification("other")])
    assert [r.name for r in ok] == ["other"]  # the other receiver still gets the alert
    (p,) = problems
    assert (p.receiver, p.delivered, p.reason) == ("room", False, "SecretKeyMissing")
    assert "spec.notifications[0].secretRef.urlKey" in p.message and "empty" in p.message


def test_an_empty_signing_secret_key_names_its_field() -> None:
    obs = observer({"hook": {"url": b64("http://127.0.0.1:1/x")}})
    _, (p,) = obs.read_receivers("ml", [notification(signingSecretKey="")])
    assert p.reason == "SecretKeyMissing" and "spec.notifications[0].secretRef.signingSecretKey" in p.message


@pytest.mark.parametrize("value, says", [
    ("%%%not-base64", "not base64-encoded UTF-8"),
    (b64(b"\xff\xfe\xfa"), "not base64-encoded UTF-8"),
    (b64("   \n"), "is empty"),
], ids=["not-base64", "not-utf8", "blank"])
def test_a_secret_value_that_cannot_be_read_is_a_failed_receiver_never_an_exception(value: str, says: str) -> None:
    obs = observer({"hook": {"url": value}})
    ok, (p,) = obs.read_receivers("ml", [notification()])
    assert ok == []
    assert p.reason == "SecretUnreadable" and says in p.message
    assert "key url" in p.message and "spec.notifications[0].secretRef.urlKey" in p.message
    assert value not in p.message  # names the key and field, never the value


def test_a_readable_secret_resolves_url_and_signing_secret() -> None:
    obs = observer({"hook": {"endpoint": b64(" http://127.0.0.1:1/x\n"), "sec": b64("s3cret")}})
    (r,), problems = obs.read_receivers("ml", [notification(urlKey="endpoint", signingSecretKey="sec")])
    assert problems == [] and (r.url, r.secret) == ("http://127.0.0.1:1/x", "s3cret")
    assert "s3cret" not in repr(r) and "127.0.0.1" not in repr(r)


# ------------------------------------------------------------------ the parser (operator with an older CRD)
SPEC = {"period": "Daily", "limit": {"amount": "5"}, "thresholds": [{"percent": 50}]}


@pytest.mark.parametrize("patch, field", [
    ({"notifications": [{"name": "n", "type": "Slack", "secretRef": {"name": "s", "urlKey": ""}}]},
     "spec.notifications[0].secretRef.urlKey"),
    ({"notifications": [{"name": "n", "type": "Slack", "secretRef": {"name": "s", "signingSecretKey": ""}}]},
     "spec.notifications[0].secretRef.signingSecretKey"),
    ({"notifications": [{"name": "n", "type": "Slack", "secretRef": {"name": "s", "urlKey": "a/b"}}]},
     "spec.notifications[0].secretRef.urlKey"),
    ({"notifications": [{"name": "n", "type": "Slack", "secretRef": {"name": ""}}]},
     "spec.notifications[0].secretRef.name"),
    ({"notifications": [{"name": "", "type": "Slack", "secretRef": {"name": "s"}}]}, "spec.notifications[0].name"),
    ({"selector": {"matchExpressions": [{"key": "", "operator": "Exists"}]}},
     "spec.selector.matchExpressions[0].key"),
    ({"selector": {"matchLabels": {"": "x"}}}, "spec.selector.matchLabels"),
], ids=["urlKey", "signingSecretKey", "urlKey-slash", "secret-name", "notification-name", "expression-key",
        "label-key"])
def test_the_parser_refuses_keys_and_names_no_object_can_have(patch: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidBudgetSpec) as err:
        parse_budget_spec({**SPEC, **patch})
    assert err.value.field == field


# ------------------------------------------------------------------ the CRD (crds/ and the chart's copy)
def _strings(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, prop in (schema.get("properties") or {}).items():
        if prop.get("type") == "string":
            out.append((f"{path}.{name}", prop))
        if prop.get("type") == "object":
            out += _strings(prop, f"{path}.{name}")
        if prop.get("type") == "array" and (prop.get("items") or {}).get("type") == "object":
            out += _strings(prop["items"], f"{path}.{name}[]")
    return out


@pytest.mark.parametrize("crd", CRD_PATHS, ids=["crds", "chart"])
def test_every_key_and_name_string_of_the_budgetpolicy_spec_must_not_be_empty(crd: Path) -> None:
    spec = yaml.safe_load(crd.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    names = [(p, s) for p, s in _strings(spec, "spec") if p.rsplit(".", 1)[-1].lower().endswith(("name", "key"))]
    assert {p for p, _ in names} >= {"spec.notifications[].name", "spec.notifications[].secretRef.name",
                                     "spec.notifications[].secretRef.urlKey",
                                     "spec.notifications[].secretRef.signingSecretKey",
                                     "spec.selector.matchExpressions[].key"}
    # minLength >= 1, or a pattern that needs at least one character (``+`` or a first character class).
    empty_ok = [p for p, s in names if not (s.get("minLength", 0) >= 1 or str(s.get("pattern", "")).startswith(
        "^[") and not str(s.get("pattern", "")).startswith("^[]"))]
    assert empty_ok == []
    for key in ("urlKey", "signingSecretKey"):
        prop = spec["properties"]["notifications"]["items"]["properties"]["secretRef"]["properties"][key]
        assert prop["minLength"] == 1 and prop["pattern"] == "^[-._a-zA-Z0-9]+$"
    labels = spec["properties"]["selector"]["properties"]["matchLabels"]
    assert any("size(k) > 0" in r["rule"] for r in labels["x-kubernetes-validations"])


@pytest.mark.parametrize("url", ["not a url", "ftp://example.com/hook", "https://", "https://[::1/x",
                                 "hooks.slack.com/x"])
def test_a_value_that_is_no_http_url_is_a_failed_receiver_naming_the_secret_key_and_field(url: str) -> None:
    """Found by a new-user audit (6 Dec 2026): reported as ``bad-url: The webhook URL is not usable:
    UnsupportedProtocol``, naming neither the Secret nor the key (budgets.md promises both, as for the others)."""
    obs = observer({"hook": {"url": b64(url)}})
    ok, (p,) = obs.read_receivers("ml", [notification()])
    assert ok == [] and p.reason == "InvalidURL"
    assert p.message.startswith("Secret ml/hook: the value of key url (spec.notifications[0].secretRef.urlKey) is "
                                "not an http(s) URL with a host (notification room)")
    assert "example.com" not in p.message and "slack" not in p.message and "::1" not in p.message  # never the value


class _Forbidden(_Core):
    """``read_namespaced_secret`` answering 403 for names outside the chart's ``notifications.secretNames``
    (RBAC ``resourceNames``), as the API server does, and a 503 for ``flaky``."""

    def read_namespaced_secret(self, name: str, namespace: str, **kw: Any) -> _Response:
        from kubernetes.client.exceptions import ApiException
        if name == "flaky":
            raise ApiException(status=503, reason="Service Unavailable")
        if name not in self.secrets:
            raise ApiException(status=403, reason="Forbidden")
        return super().read_namespaced_secret(name, namespace, **kw)


def referring(notification_name: str, secret_name: str) -> Notification:
    ref = SecretRef.model_construct(name=secret_name, url_key="url", signing_secret_key=None)
    return Notification.model_construct(name=notification_name, type=NotifierType.SLACK, secret_ref=ref)


def test_a_secret_the_operator_may_not_read_names_the_notification_its_secret_ref_and_the_fix() -> None:
    """New-user trial (7 Dec 2026): a notification ``missing`` with ``secretRef: {name: trial-missing}``, a Secret
    not in the chart's ``notifications.secretNames``, reported ``Secret default/trial-missing could not be read
    (HTTP 403)``: neither the field nor the fix (budgets.md: bad input gets an error naming both)."""
    obs = BudgetObserver.__new__(BudgetObserver)
    obs.core = _Forbidden({"hook": {"url": b64("http://127.0.0.1:1/x")}})  # type: ignore[assignment]
    ok, (p,) = obs.read_receivers("default", [notification("room"), referring("missing", "trial-missing")])
    assert [r.name for r in ok] == ["room"]
    assert (p.receiver, p.reason) == ("missing", "SecretUnreadable")
    assert "Secret default/trial-missing" in p.message and "HTTP 403" in p.message
    assert "spec.notifications[1].secretRef.name" in p.message and "notification missing" in p.message
    assert "notifications.secretNames" in p.message and "helm upgrade" in p.message
    assert "grant the operator get on it" in p.message


def test_a_secret_read_that_fails_otherwise_names_the_notification_and_its_secret_ref() -> None:
    obs = BudgetObserver.__new__(BudgetObserver)
    obs.core = _Forbidden({})  # type: ignore[assignment]
    _, (p,) = obs.read_receivers("default", [referring("room", "flaky")])
    assert p.reason == "SecretUnreadable" and "HTTP 503" in p.message
    assert "spec.notifications[0].secretRef.name" in p.message and "notification room" in p.message
    assert "secretNames" not in p.message  # not a permission problem
