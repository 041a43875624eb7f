"""One grammar for ``BudgetPolicy.spec``: the real apiserver and :func:`modalscale.api.budgetpolicy.parse_budget_spec`
accept and refuse the same objects (issue 23 item 3).

An object stored under an older CRD, or written where the schema was not enforced, reaches the operator, so the parser
holds every spec to the CRD's rules again (types, patterns, bounds, list types, CEL rules, pruned nulls). Each case of
the table in ``tests/unit/api/test_api_budgetpolicy_grammar.py`` (hostile amounts such as ``1e999``, ``1E+30``,
``0.0000001``, ``100.``, `` 100``, ``1_000``, ``0``, 13 digits; periods, time zones, threshold percents and actions,
notifications, enforcement, selector) goes to a real kube-apiserver holding the CRD of ``crds/`` as a dry-run create
(nothing is stored): its verdict must be the one the table records (which the unit test holds the parser to), and must
equal the parser's, except for the zone names the tz database does not know (``APISERVER_ONLY``: the CRD checks a
zone's shape only). A KWOK-only control plane is enough (no pod runs).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.unit.api.test_api_budgetpolicy_grammar import APISERVER_ONLY, CASES, ISSUE_AMOUNTS, Verdict, parser_verdict

GROUP, VERSION, PLURAL, NS = "modalscale.io", "v1alpha1", "budgetpolicies", "default"


def apiserver_verdict(api: Any, spec: dict[str, Any]) -> Verdict:
    """Dry-run create (nothing is stored): admitted, or refused with the apiserver's message (422, or 400)."""
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "BudgetPolicy", "metadata": {"name": "grammar"}, "spec": spec}
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body, dry_run="All",
                                                                     field_validation="Strict")
    except ApiException as exc:
        if exc.status not in (400, 422):
            raise
        return Verdict(False, str(exc.body))
    return Verdict(True, "")


def test_the_apiserver_and_the_parser_admit_and_refuse_the_same_specs(api: Any, crds_installed: list[str]) -> None:
    assert {f"limit.amount={ascii(a)}" for a in ISSUE_AMOUNTS} <= {c.id for c in CASES}
    recorded, differ, unnamed = [], [], []
    for case in CASES:
        spec = case.spec()
        server, parser = apiserver_verdict(api, spec), parser_verdict(spec)
        if server.accepted != case.admitted:
            recorded.append(f"{case.id[:100]}: apiserver {'admits' if server.accepted else 'refuses'} "
                            f"({server.message[:300]}), the table says the opposite")
        if case.id in APISERVER_ONLY:
            if (server.accepted, parser.accepted) != (True, False):
                differ.append(f"{case.id[:100]}: expected apiserver admits, parser refuses; got {server}, {parser}")
        elif server.accepted != parser.accepted:
            differ.append(f"{case.id[:100]}: apiserver {'admits' if server.accepted else 'refuses'} "
                          f"({server.message[:300]}), parser {'admits' if parser.accepted else 'refuses'} "
                          f"({parser.message[:200]})")
        elif not server.accepted and case.field not in server.message:
            unnamed.append(f"{case.id[:100]}: the apiserver's refusal does not name {case.field}: "
                           f"{server.message[:300]}")
    assert recorded == [], f"{len(recorded)} of {len(CASES)} recorded verdicts are wrong:\n" + "\n".join(recorded)
    assert differ == [], f"{len(differ)} of {len(CASES)} cases differ:\n" + "\n".join(differ)
    assert unnamed == [], "\n".join(unnamed)
