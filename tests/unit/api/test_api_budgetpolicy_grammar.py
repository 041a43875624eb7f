"""``BudgetPolicy.spec``: the parser admits exactly what the CRD admits, case by case (issue 23 item 3).

One table of hostile and edge values, each changing one field of a valid spec, with the verdict of the real
kube-apiserver holding the CRD (``admitted``). Here the parser is held to it (fast, no cluster);
``tests/integration/test_budget_spec_grammar.py`` submits every case to a real apiserver, so the recorded verdicts
cannot drift from the CRD. One difference is by design (:data:`APISERVER_ONLY`): a zone name of the CRD's shape that
the tz database does not know passes the CRD's rule (a regex), which cannot consult the tz database, and the parser
refuses it (the operator reports ``InvalidSpec`` naming ``spec.timeZone``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from modalscale.api.budgetpolicy import InvalidBudgetSpec, parse_budget_spec
from tests.unit.operator.test_budget_amount_grammar import HOSTILE, VALID

BASE: dict[str, Any] = {
    "period": "Daily",
    "timeZone": "Europe/Berlin",
    "limit": {"amount": "10", "currency": "USD"},
    "thresholds": [{"percent": 50}, {"percent": 100, "actions": ["Alert", "ScaleDown"]}],
    "notifications": [{"name": "ops", "type": "Slack", "secretRef": {"name": "chat-hooks"}}],
}
"""A valid spec; each case changes one field of a copy."""


@dataclass(frozen=True)
class Case:
    id: str
    field: str
    """The field path both sides name when they refuse (``spec.limit.amount``)."""
    change: Callable[[dict[str, Any]], None]
    admitted: bool
    """The real apiserver's verdict (dry-run create with the CRD of ``crds/``)."""

    def spec(self) -> dict[str, Any]:
        spec = copy.deepcopy(BASE)
        self.change(spec)
        return spec


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change that sets ``path`` (dots and ``[i]``, below ``spec``) to ``value``, creating missing objects."""
    parts: list[str | int] = []
    for name in path.split("."):
        head, *indices = name.replace("]", "").split("[")
        parts += [head, *map(int, indices)]

    def change(spec: dict[str, Any]) -> None:
        here: Any = spec
        for part in parts[:-1]:
            here = here.setdefault(part, {}) if isinstance(part, str) else here[part]
        here[parts[-1]] = copy.deepcopy(value)

    return change


def _case(path: str, value: Any, label: str | None = None, field: str | None = None, ok: bool = False) -> Case:
    return Case(f"{path}={label if label is not None else ascii(value)}", field or f"spec.{path}", _set(path, value),
                ok)


def _cases(path: str, admitted: list[Any], refused: list[Any]) -> list[Case]:
    return [_case(path, v, ok=True) for v in admitted] + [_case(path, v) for v in refused]


def _notification(name: str = "ops", type_: str = "Slack") -> dict[str, Any]:
    return {"name": name, "type": type_, "secretRef": {"name": "chat-hooks"}}


ISSUE_AMOUNTS = ["1e999", "1E+30", "0.0000001", "100.", " 100", "1_000", "0", "0.000000", "1234567890123"]
"""The amounts issue 23 names first; then the amount grammar's whole table and values of other JSON types."""
UNKNOWN_ZONES = ["Europe/Nowhere", "Etc/GMT+15", "Europe/" + "B" * 57]
"""Of the CRD's shape (an area of the tz database; the last at its maxLength, 64) but not in the tz database."""

CASES: list[Case] = [
    Case("valid-base", "spec", lambda spec: None, True),
    *_cases("limit.amount", VALID, list({ascii(a): a for a in [*ISSUE_AMOUNTS, *HOSTILE, 250, 12.5, True, None,
                                                                ["250"]]}.values())),
    *_cases("limit.currency", [None], ["EUR", "usd"]),
    # period: an enum of three; a null is pruned, and period is required
    *_cases("period", ["Weekly", "Monthly"], ["daily", "Yearly", "", " Daily", "Daily\n", None, 1]),
    # timeZone: the CRD's rule (a regex) and maxLength, then the tz database (parser only). Every name of the tz
    # database (GMT, EST5EDT: refused before 7 Dec 2026, user trial); not the host's files that are no zone (localtime,
    # posixrules, posix/ and right/ copies) nor a name of another case.
    *_cases("timeZone", ["UTC", "Etc/UTC", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "America/Port-au-Prince",
                         "GMT", "EST", "EST5EDT", "Etc/GMT-14", "GMT+0", "NZ-CHAT", "W-SU",
                         "America/North_Dakota/New_Salem", None, *UNKNOWN_ZONES],
            ["utc", "gmt", "Gmt", "Foo", "Mars/Olympus", "localtime", "posixrules", "posix/Europe/Berlin",
             "right/UTC", "GMT+5", "Europe/Berlin ", "Europe/Berlin\n", "", "Not a zone!", "Europe//Berlin",
             "../etc/passwd", "Europe/" + "B" * 58, 0]),
    # thresholds: percent an integer 1..200 (a JSON number without a fraction), strictly ascending, 1..10 of them
    *_cases("thresholds[0].percent", [1, 99], [0, -1, 201, 50.5, "50", True, None, 2**63]),
    _case("thresholds[1].percent", 200, ok=True),
    _case("thresholds[1].percent", 50, field="spec.thresholds"),
    _case("thresholds[1].percent", 40, field="spec.thresholds"),
    _case("thresholds", [], "[]"),
    _case("thresholds", [{"percent": p} for p in range(1, 12)], "eleven"),
    _case("thresholds", [{"percent": p} for p in range(1, 11)], "ten", ok=True),
    # actions: a set of 1..5 of the enum; a null is pruned (default [Alert])
    _case("thresholds[0].actions", None, ok=True),
    _case("thresholds[0].actions", [], "[]"),
    _case("thresholds[0].actions", ["Alert", "Alert"]),
    _case("thresholds[0].actions", ["Delete"]),
    _case("thresholds[0].actions", ["alert"]),
    _case("thresholds[0].actions", ["Alert", "CapReplicas"], field="spec.thresholds[0].capReplicas"),
    _case("thresholds[0]", {"percent": 50, "actions": ["CapReplicas"], "capReplicas": 0}, "cap-0", ok=True),
    _case("thresholds[0]", {"percent": 50, "actions": ["CapReplicas"], "capReplicas": 1001}, "cap-1001",
          field="spec.thresholds[0].capReplicas"),
    _case("thresholds[0]", {"percent": 50, "actions": ["SwitchToSpot"]}, "spot-without-priority",
          field="spec.thresholds[0].spotMaxPriority"),
    # an action's own field without its action would never be applied (user trial, 7 Dec 2026): refused
    _case("thresholds[0]", {"percent": 50, "actions": ["Alert"], "capReplicas": 0}, "cap-without-action",
          field="spec.thresholds[0].capReplicas"),
    _case("thresholds[0]", {"percent": 50, "capReplicas": 3}, "cap-with-default-actions",
          field="spec.thresholds[0].capReplicas"),
    _case("thresholds[0]", {"percent": 50, "actions": ["ScaleDown"], "capReplicas": 3}, "cap-with-scale-down",
          field="spec.thresholds[0].capReplicas"),
    _case("thresholds[0]", {"percent": 50, "actions": ["Alert", "CapReplicas"], "spotMaxPriority": 50},
          "spot-priority-without-action", field="spec.thresholds[0].spotMaxPriority"),
    _case("thresholds[0]", {"percent": 50, "actions": ["CapReplicas", "SwitchToSpot"], "capReplicas": 2,
                            "spotMaxPriority": 10}, "cap-and-spot-with-their-actions", ok=True),
    # notifications: a list-map keyed by name (a DNS label), at most 10; the Secret only referenced
    *_cases("notifications[0].name", ["a" * 63], ["a" * 64, "Ops", "ops_team", "-ops", "ops-", "", "o.ps", None]),
    *_cases("notifications[0].type", [], ["Telegram", "slack"]),
    _case("notifications", [_notification(), _notification()], "same-name-twice"),
    _case("notifications", [_notification(f"n{i}") for i in range(11)], "eleven"),
    _case("notifications", [_notification(f"n{i}") for i in range(10)], "ten", ok=True),
    _case("notifications", [], "[]", ok=True),
    _case("notifications", [{"name": "ops", "type": "Slack"}], "no-secretRef",
          field="spec.notifications[0].secretRef"),
    *_cases("notifications[0].secretRef.name", ["chat.hooks", "a" * 253], ["Chat_Hooks", "", "a" * 254]),
    *_cases("notifications[0].secretRef.urlKey", ["webhook.url"], ["url key", "", "a" * 254]),
    *_cases("notifications[0].secretRef.signingSecretKey", ["sig_1"], ["sig/1"]),
    # enforcement, forecast, interval: integer bounds and booleans (a JSON boolean, never "true" or 1)
    *_cases("enforcement.dryRun", [True], ["true", 1]),
    *_cases("enforcement.floorReplicas", [0], [-1, "1"]),
    *_cases("enforcement.order", ["HighestCostFirst"], ["Random"]),
    *_cases("enforcement.spotPendingTimeoutSeconds", [10], [9]),
    *_cases("forecast.alertAtPercent", [200], [201]),
    *_cases("forecast.enabled", [False], ["false", 0]),
    *_cases("evaluationIntervalSeconds", [1, 3600], [0, 3601, "60"]),
    # selector: namespaces a set of DNS labels (at most 100), labels and expressions bounded
    *_cases("selector.namespaces", [["ml", "ml-prod"]], [["ml", "ml"], ["ML"], ["a" * 64],
                                                          [f"n{i}" for i in range(101)]]),
    *_cases("selector.matchLabels", [{"team": "a" * 63}, {f"k{i}": "v" for i in range(32)}],
            [{"team": "a" * 64}, {f"k{i}": "v" for i in range(33)}]),
    # a JSON number without a fraction where an integer is due (OpenAPI admits it; a CEL rule reading it does not)
    _case("thresholds[0].percent", 50.0, field="spec.thresholds"),
    _case("thresholds[1].percent", 100.0, field="spec.thresholds"),
    _case("thresholds[0]", {"percent": 50, "actions": ["CapReplicas"], "capReplicas": 2.0}, "cap-2.0"),
    _case("thresholds[0]", {"percent": 50, "actions": ["SwitchToSpot"], "spotMaxPriority": 5.0}, "spot-5.0"),
    _case("enforcement.floorReplicas", 1.0, ok=True),
    _case("enforcement.spotPendingTimeoutSeconds", 300.0, ok=True),
    _case("forecast.alertAtPercent", 100.0, ok=True),
    _case("evaluationIntervalSeconds", 60.0, ok=True),
    # unknown fields: refused by strict field validation (kubectl's default), as by the parser
    _case("unknownField", 1),
    _case("selector.match_labels", {"team": "a"}),
    _case("thresholds[0].capReplica", 1),
    _case("notifications[0].url", "https://hooks.example/T0/B0/x"),
    _case("limit.Amount", "10"),
    *_cases("selector.matchExpressions", [[{"key": "team", "operator": "In", "values": ["a"]}]],
            [[{"key": "team", "operator": "In"}], [{"key": "team", "operator": "Exists", "values": ["a"]}],
             [{"key": "team", "operator": "Near"}], [{"key": "team", "operator": "Exists"}] * 17]),
]

APISERVER_ONLY = {f"timeZone={ascii(z)}" for z in UNKNOWN_ZONES}
"""Cases the apiserver admits and the parser refuses, by design (see the module docstring)."""


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    message: str


def parser_verdict(spec: dict[str, Any]) -> Verdict:
    try:
        parse_budget_spec(spec)
    except InvalidBudgetSpec as exc:
        return Verdict(False, str(exc))
    return Verdict(True, "")


def test_the_case_table_holds_the_issues_amounts_and_every_ruled_field() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert {f"limit.amount={ascii(a)}" for a in ISSUE_AMOUNTS} <= set(ids)
    for prefix in ("period=", "timeZone=", "thresholds[0].percent=", "notifications", "enforcement.", "selector."):
        assert any(i.startswith(prefix) for i in ids), prefix
    assert APISERVER_ONLY <= {c.id for c in CASES if c.admitted}
    assert 40 < sum(c.admitted for c in CASES) < len(CASES) - 40  # both kinds, many of each


@pytest.mark.parametrize("case", CASES, ids=[c.id[:80] for c in CASES])
def test_the_parser_admits_what_the_apiserver_admits_and_names_the_field_it_refuses(case: Case) -> None:
    verdict = parser_verdict(case.spec())
    assert verdict.accepted == (case.admitted and case.id not in APISERVER_ONLY), verdict
    if not verdict.accepted:
        assert case.field in verdict.message, verdict


def test_a_label_key_that_is_not_a_string_is_named_as_the_key_it_is() -> None:
    """Found by an adversarial probe (6 Dec 2026): the field read ``spec.selector.matchLabels[1].[key]``, an index
    and pydantic's own marker, for the map key 1 (a YAML ``1: a``)."""
    from modalscale.api.budgetpolicy import InvalidBudgetSpec, parse_budget_spec

    spec = {"selector": {"matchLabels": {1: "a"}}, "period": "Daily", "limit": {"amount": "5"},
            "thresholds": [{"percent": 50, "actions": ["Alert"]}]}
    with pytest.raises(InvalidBudgetSpec) as info:
        parse_budget_spec(spec)
    assert info.value.field == "spec.selector.matchLabels (key 1)"


@pytest.mark.parametrize("zone", ["America/Indiana", "America/Argentina", "America/Kentucky", "America/North_Dakota"])
def test_a_tz_database_folder_of_the_crds_shape_is_refused_naming_the_field_never_raised(zone: str) -> None:
    """A folder of the tz database (``America/Indiana`` holds ``Indianapolis``, ...) matches the CRD's rule, so
    the apiserver admits it; ``ZoneInfo`` then raises ``IsADirectoryError``, which escaped the parser (an OSError,
    not one of the errors it caught) and failed every evaluation of the policy with a traceback instead of
    ``Ready=False``/``InvalidSpec`` naming ``spec.timeZone``."""
    from modalscale.api.budgetpolicy import InvalidTimeZone, resolve_zone

    spec = copy.deepcopy(BASE)
    spec["timeZone"] = zone
    verdict = parser_verdict(spec)
    assert not verdict.accepted
    assert "spec.timeZone" in verdict.message and zone in verdict.message, verdict
    with pytest.raises(InvalidTimeZone, match="spec.timeZone"):
        resolve_zone(zone)


def test_every_budgetpolicy_example_manifest_parses() -> None:
    """The BudgetPolicy examples under crds/examples (README and docs/budgets.md point users at them) parse with the
    operator's own parser, as every InferenceService example does (test_api_inferenceservice)."""
    from pathlib import Path

    import yaml

    from modalscale.api.budgetpolicy import parse_budget_spec

    paths = sorted((Path(__file__).resolve().parents[3] / "crds" / "examples").glob("budgetpolicy-*.yaml"))
    assert len(paths) >= 2
    for path in paths:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "BudgetPolicy"]
        assert docs, path
        for doc in docs:
            parse_budget_spec(doc["spec"])


ACTION_FIELDS = {"capReplicas": "CapReplicas", "spotMaxPriority": "SwitchToSpot"}
"""Each threshold field that only one action reads, and that action."""


@pytest.mark.parametrize(("field", "action"), list(ACTION_FIELDS.items()))
def test_an_action_field_without_its_action_is_refused_naming_the_field_and_the_fix(field: str, action: str) -> None:
    """Found by a user trial (7 Dec 2026): ``thresholds: [{percent: 50, actions: [Alert], capReplicas: 0}]`` was
    admitted, and the cap was silently never applied (only the CapReplicas action reads capReplicas); the same for
    spotMaxPriority without SwitchToSpot. The parser and the CRD's CEL rule refuse both, at the field's path."""
    from tests.unit.test_crd_schema import CRDS

    spec = copy.deepcopy(BASE)
    spec["thresholds"][1] = {"percent": 100, "actions": ["Alert", "ScaleDown"], field: 0}
    with pytest.raises(InvalidBudgetSpec) as info:
        parse_budget_spec(spec)
    assert info.value.field == f"spec.thresholds[1].{field}"
    assert f"add {action} to actions" in info.value.message and f"remove {field}" in info.value.message
    (version,) = CRDS["BudgetPolicy"]["spec"]["versions"]
    item = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["thresholds"]["items"]
    (rule,) = [r for r in item["x-kubernetes-validations"]
               if r["rule"] == f"!has(self.{field}) || (has(self.actions) && '{action}' in self.actions)"]
    assert rule["fieldPath"] == f".{field}" and f"add {action} to actions" in rule["message"]
    assert set(ACTION_FIELDS) == set(item["properties"]) - {"percent", "actions"}, "a new action field: add it here"


def _tz_database_names() -> list[str]:
    """Every zone name of the tz database (the ``tzdata`` package's list: a dependency; the host's
    ``/usr/share/zoneinfo`` may add files that are no zone, such as ``localtime``)."""
    from importlib.resources import files

    return files("tzdata").joinpath("zones").read_text().split()


def test_every_tz_database_name_is_a_good_time_zone_and_the_crd_has_the_parsers_pattern() -> None:
    """Found by a user trial (7 Dec 2026): ``timeZone: GMT`` was refused with "'GMT' is not an IANA time zone
    name", but GMT (and EST5EDT, UTC's own aliases, ...) are tz database names; the pattern took only UTC and
    Area/Location. It now lists the tz database's areas and its names without one, so the CRD admits each name the
    parser resolves, and still refuses a name of no area or of another case at admission."""
    import re

    from modalscale.api.budgetpolicy import (
        TIME_ZONE_AREAS,
        TIME_ZONE_MAX_CHARS,
        TIME_ZONE_NAMES_WITHOUT_AREA,
        TIME_ZONE_PATTERN,
    )
    from tests.unit.test_crd_schema import CRDS

    names = _tz_database_names()
    assert len(names) > 500 and {"GMT", "EST5EDT", "Etc/GMT+5", "Europe/Berlin"} <= set(names)
    assert set(TIME_ZONE_AREAS) == {n.split("/")[0] for n in names if "/" in n}
    assert set(TIME_ZONE_NAMES_WITHOUT_AREA) == {n for n in names if "/" not in n}
    refused = []
    for name in names:
        spec = copy.deepcopy(BASE)
        spec["timeZone"] = name
        verdict = parser_verdict(spec)
        if not verdict.accepted or len(name) > TIME_ZONE_MAX_CHARS or not re.fullmatch(TIME_ZONE_PATTERN, name):
            refused.append(f"{name}: {verdict.message}")
    assert refused == []
    (version,) = CRDS["BudgetPolicy"]["spec"]["versions"]
    zone = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["timeZone"]
    (rule,) = zone["x-kubernetes-validations"]
    assert (rule["rule"], zone["maxLength"]) == (f"self.matches('{TIME_ZONE_PATTERN}')", TIME_ZONE_MAX_CHARS)


def test_the_crd_refuses_a_time_zone_with_a_short_message_in_words_not_its_regex() -> None:
    """Before: ``timeZone: europe/berlin`` was refused by the apiserver with the CRD's whole ``pattern`` printed
    (hundreds of characters of alternation), which names no fix. The CRD checks the same regex by a CEL
    rule (``maxLength`` kept: CEL's cost estimate needs it) whose message says what the field takes, with examples."""
    from modalscale.api.budgetpolicy import TIME_ZONE_PATTERN
    from tests.unit.test_crd_schema import CRDS

    (version,) = CRDS["BudgetPolicy"]["spec"]["versions"]
    zone = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["timeZone"]
    assert "pattern" not in zone  # the apiserver prints a pattern whole in its refusal
    (rule,) = zone["x-kubernetes-validations"]
    message = rule["message"]
    assert len(message) <= 200 and TIME_ZONE_PATTERN not in message and "|" not in message
    for words in ("tz database name", "case-sensitive", "UTC", "Europe/Berlin", "Area/Location", "EST5EDT"):
        assert words in message, words
    # the value typed, quoted, before the same words (the apiserver prints `Invalid value: "string"` for a rule)
    expression = rule["messageExpression"]
    assert expression.startswith("'\\'' + self + '\\' is not a tz database name: it must be one, case-sensitive")
    assert TIME_ZONE_PATTERN not in expression and "Europe/Berlin" in expression


@pytest.mark.parametrize("zone", ["gmt", "Foo", "posix/Europe/Berlin", "localtime"])
def test_a_refused_time_zone_is_told_which_names_are_accepted(zone: str) -> None:
    spec = copy.deepcopy(BASE)
    spec["timeZone"] = zone
    with pytest.raises(InvalidBudgetSpec) as info:
        parse_budget_spec(spec)
    assert info.value.field == "spec.timeZone"
    for words in ("tz database", "case-sensitive", "Europe/Berlin", "GMT", "EST5EDT", "Etc/GMT-2"):
        assert words in info.value.message, words
