"""``modalscale cost export``: the spend recorded in BudgetPolicy ledgers as a FOCUS 1.0 CSV; ``modalscale cost
diff``: the monthly cost a change to InferenceService manifests adds (see ``modalscale.operator.cost_diff``);
``modalscale cost showback``: last window's spend per tenant and modality (see ``modalscale.operator.showback``).

Why a module: FinOps tools read FOCUS (``modalscale.costmodel.focus``); the ledgers live in the status of the
BudgetPolicies. This command reads them (read-only: ``list`` on budgetpolicies and inferenceservices) and
writes one row per InferenceService with its period-to-date spend ``[status.periodStart,
status.ledger.observedTime)``; the billing period is the budget period.

A service selected by several policies would be counted once per policy, and a FOCUS consumer sums
``BilledCost``; so each service is exported once, from the policy whose ledger covers the longest window
(a Monthly ledger over a Daily one; ties: the first policy by namespace/name). The policy is named in the
``Tags`` column (``modalscale.io/budgetpolicy``). Policies not evaluated yet are skipped and listed on stderr.

``--by-tenant`` splits each service's row over the tenants and modalities of its requests plus an idle row
(``modalscale.costmodel.focus.split_by_tenant``: showback's allocation, tags ``modalscale.io/tenant``,
``modalscale.io/modality``, ``modalscale.io/allocation``), reading the gateway's counters and the ledger's
replica-seconds over each row's window from Prometheus (``modalscale.operator.showback.PrometheusShowback``). A
service without usage there keeps its one row (a note on stderr says why); Prometheus unreachable is exit 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from modalscale.api.conditions import READY
from modalscale.costmodel.budget.status import read_budget_status
from modalscale.costmodel.catalog import PricingTier
from modalscale.costmodel.focus import FOCUS_VERSION, CostRecord, focus_rows, split_by_tenant, write_focus_csv
from modalscale.costmodel.showback import ShowbackInputError, TenantUsage
from modalscale.operator import showback

if TYPE_CHECKING:
    from kubernetes.client import ApiClient  # imported lazily at run time (CLI start-up)

POLICY_TAG = "modalscale.io/budgetpolicy"


@dataclass(frozen=True)
class Export:
    """Rows to write and what was left out (``"ns/name: why"``)."""

    rows: list[dict[str, str]]
    skipped: list[str]
    policies: int
    notes: list[str] = field(default_factory=list)


ServiceUsage = Mapping[tuple[str, str], tuple[Decimal, Sequence[TenantUsage]]]
"""(namespace, name) -> (replica-seconds available, per (tenant, modality) usage) over one window."""
UsageReader = Callable[[dt.datetime, dt.datetime], ServiceUsage]
"""Reads :data:`ServiceUsage` over ``[start, end)``; raises ``showback.ShowbackUnavailable``."""


def export_rows(policies: Sequence[Mapping[str, Any]], tiers: Mapping[tuple[str, str], PricingTier] | None = None,
                billing_account_id: str = "modalscale", usage: UsageReader | None = None) -> Export:
    """FOCUS rows from BudgetPolicy bodies (pure but for ``usage``).

    Args:
        policies: BudgetPolicies as read from the API (camelCase dicts with ``status``).
        tiers: (namespace, name) of an InferenceService -> its pricing tier (OnDemand when missing).
        billing_account_id: ``BillingAccountId`` of every row (e.g. the cluster name).
        usage: With ``--by-tenant``: reads the usage of a window (called once per distinct window); each
            service's row is split by tenant and modality (module docstring).
    Returns:
        :class:`Export`: one row per InferenceService (deduplicated, see the module docstring), sorted by
        (namespace, name).
    """
    best: dict[tuple[str, str], tuple[float, str, CostRecord, tuple[Any, Any]]] = {}
    skipped: list[str] = []
    used = 0
    for p in sorted(policies, key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"]["name"])):
        ref = f"{p['metadata'].get('namespace', '')}/{p['metadata']['name']}"
        status = read_budget_status(p)
        ledger, end = status.ledger, status.period_end
        if ledger is None:
            skipped.append(f"{ref}: {status.problem}")
            continue
        if ledger.period_start is None or ledger.observed_time is None or end is None:
            unreadable = status.problem or next(iter(status.display_problems), None)
            skipped.append(f"{ref}: {unreadable or _why_no_ledger(p)}")
            continue
        used += 1
        window = (ledger.observed_time - ledger.period_start).total_seconds()
        for e in ledger.entries:
            record = CostRecord(e.namespace, e.name, ledger.period_start, ledger.observed_time, e.spent_usd,
                                tier=(tiers or {}).get(e.key, PricingTier.ON_DEMAND), tags={POLICY_TAG: ref})
            old = best.get(e.key)
            if old is None or window > old[0]:
                best[e.key] = (window, ref, record, (ledger.period_start, end))
    rows: list[dict[str, str]] = []
    notes: list[str] = []
    read: dict[tuple[dt.datetime, dt.datetime], ServiceUsage] = {}
    for key in sorted(best):
        _, _, record, period = best[key]
        records = [record]
        if usage is not None:
            span = (record.start, record.end)
            if span not in read:
                read[span] = usage(*span)
            found = read[span].get(key)
            try:
                records = split_by_tenant(record, found[1], found[0]) if found else records
            except ShowbackInputError as exc:
                notes.append(f"{key[0]}/{key[1]}: not split by tenant: {exc}")
            if not found:
                notes.append(f"{key[0]}/{key[1]}: not split by tenant: no gateway usage or ledger replica-seconds "
                             f"in Prometheus over its window")
        rows += focus_rows(records, billing_period=period, billing_account_id=billing_account_id)
    return Export(rows, skipped, used, notes)


def _why_no_ledger(policy: Mapping[str, Any]) -> str:
    """Why a policy has no ledger to export: the operator refused it (Ready=False, e.g. ``InvalidSpec``, with its
    message naming the field), or it was not evaluated yet (no status at all: no operator watches it)."""
    status = policy.get("status")
    ready = next((c for c in read_budget_status(policy).conditions if c.get("type") == READY), None)
    if ready is not None and ready.get("status") == "False":
        return (f"not evaluated: Ready=False/{ready.get('reason')}: {ready.get('message', '')} (fix the policy; "
                f"it has no ledger until it is valid)")
    if not status:
        return "not evaluated yet (no status: is an operator running and watching its namespace?)"
    return "not evaluated yet (no ledger)"


def add_parser(sub: Any) -> None:
    """Register ``cost`` (with ``export``, ``diff`` and ``showback``) on ``sub`` (an argparse subparsers action)."""
    p = sub.add_parser("cost", help="cost reports from BudgetPolicy ledgers")
    csub = p.add_subparsers(dest="cost_command", metavar="COMMAND")
    e = csub.add_parser("export", help=f"write period-to-date spend as FOCUS {FOCUS_VERSION} CSV")
    e.add_argument("--namespace", "-n", default=None, help="only BudgetPolicies in this namespace (default: all)")
    e.add_argument("--output", "-o", default="-", help="CSV file to write (default: standard output)")
    e.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or in-cluster)")
    e.add_argument("--billing-account", default="modalscale", help="BillingAccountId of every row")
    e.add_argument("--by-tenant", action="store_true",
                   help="split each service's row by tenant and modality (tags), plus an idle row, from the "
                        "gateway's counters in Prometheus (showback's allocation)")
    e.add_argument("--prometheus-url", default=None,
                   help="Prometheus base URL for --by-tenant (default: $MODALSCALE_PROMETHEUS_URL)")
    e.set_defaults(func=run_export, prog=e.prog)
    d = csub.add_parser("diff", help="monthly cost of InferenceService changes between two manifest sets",
                        description="Compare the InferenceServices of BASE and HEAD (files, folders, or git refs REF "
                                    "or REF:PATH) at catalog prices: monthly cost at min, expected and max replicas "
                                    "(730 h/month) and the delta. Exit 1 when --fail-above is exceeded, 2 on errors "
                                    "and, with --fail-above, when a document that may be an InferenceService (a "
                                    "typo'd kind or apiVersion, a Helm template) was not priced (unless "
                                    "--allow-not-priced).")
    d.add_argument("base", metavar="BASE", help="file, folder, REF or REF:PATH of the manifests before the change")
    d.add_argument("head", metavar="HEAD", help="file, folder, REF or REF:PATH of the manifests after the change")
    d.add_argument("--format", choices=("table", "markdown", "json"), default="table", help="output format")
    d.add_argument("--fail-above", type=str, default=None, metavar="USD",
                   help="exit 1 when the total max monthly delta exceeds this many USD; exit 2 when a document "
                        "of either side that may be an InferenceService was not priced")
    d.add_argument("--allow-not-priced", action="store_true",
                   help="with --fail-above: accept documents not priced (warned on stderr) and gate on the priced "
                        "delta alone")
    d.add_argument("--catalog", type=Path, default=None,
                   help="pricing catalog override YAML (as MODALSCALE_PRICING_CATALOG; default: packaged catalog)")
    d.add_argument("--trace", type=Path, default=None, help="trace CSV for expected replicas (needs --profile)")
    d.add_argument("--profile", type=Path, default=None,
                   help="service-time model artifact from `modalscale profile` (needs --trace)")
    d.add_argument("--repo", type=Path, default=Path.cwd(), help="git repository for REF inputs (default: .)")
    d.add_argument("--prometheus-url", default=None,
                   help="Prometheus base URL: also name the top tenants and modalities behind each service's "
                        "spend now (showback's allocation; nothing said about tenants without it)")
    d.add_argument("--since", default="1h", help="showback window for --prometheus-url (default: 1h)")
    d.set_defaults(func=run_diff, prog=d.prog)
    showback.add_parser(csub)
    p.set_defaults(func=lambda _a: (p.print_help(), 2)[1])


def _client(kubeconfig: str | None) -> ApiClient:
    """An API client from ``--kubeconfig``, else in-cluster, else ``$KUBECONFIG`` / ``~/.kube/config``.

    Raises:
        UsageError: No usable kubeconfig (the flag or variable named, with the fix).
    """
    import os

    import yaml
    from kubernetes import client, config

    from modalscale.cli import UsageError

    if kubeconfig:
        if not Path(kubeconfig).is_file():
            raise UsageError("--kubeconfig", f"{kubeconfig}: no such file; give the kubeconfig of the cluster")
        try:
            api: ApiClient = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]  # kubernetes.config is untyped
            return api
        except (config.ConfigException, ValueError, TypeError, AttributeError, OSError, yaml.YAMLError) as exc:
            raise UsageError("--kubeconfig", f"{kubeconfig} is not a kubeconfig the client can read "
                                             f"({_first_line(exc)}); give the cluster's kubeconfig") from None
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]  # kubernetes.config is untyped
    except config.ConfigException:
        files = os.environ.get("KUBECONFIG") or None  # as set now (the client read it once, at its import)
        try:
            config.load_kube_config(config_file=files)  # type: ignore[no-untyped-call]  # kubernetes.config is untyped
        except yaml.YAMLError as exc:
            raise UsageError("KUBECONFIG", f"{files or '~/.kube/config'}: not a usable kubeconfig "
                                           f"({_first_line(exc)}); fix the file or give --kubeconfig FILE") from None
        except (config.ConfigException, ValueError, TypeError, AttributeError, OSError) as exc:
            raise UsageError("KUBECONFIG", f"no usable kubeconfig ({_first_line(exc)}); "
                                    "export KUBECONFIG=FILE or give --kubeconfig FILE (for the local cluster: "
                                    "`modalscale cluster up` prints the export)") from None
    return client.ApiClient()


def _first_line(exc: BaseException) -> str:
    """``exc`` as one line (:func:`modalscale.cli.first_line`); quotes removed only where they wrap the whole message
    (a KeyError's or ConfigException's repr), never a quote of the message's own."""
    from modalscale.cli import first_line

    text = first_line(exc).strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"" and text[0] not in text[1:-1]:
        text = text[1:-1]
    return text or type(exc).__name__


def run_export(args: argparse.Namespace) -> int:
    """Read the BudgetPolicies (and InferenceService tiers) and write the CSV; returns the exit code."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from modalscale import GROUP, VERSION
    from modalscale.cli import UsageError

    reader = _usage_reader(args) if args.by_tenant else None
    if args.output != "-" and not Path(args.output).parent.is_dir():
        raise UsageError("--output", f"{args.output}: the folder {Path(args.output).parent} does not exist; create "
                                     "it or write elsewhere (- for standard output)")
    api = _client(args.kubeconfig)
    custom = client.CustomObjectsApi(api)
    try:
        if args.namespace:
            policies = custom.list_namespaced_custom_object(GROUP, VERSION, args.namespace, "budgetpolicies")
            isvcs = custom.list_namespaced_custom_object(GROUP, VERSION, args.namespace, "inferenceservices")
        else:
            policies = custom.list_cluster_custom_object(GROUP, VERSION, "budgetpolicies")
            isvcs = custom.list_cluster_custom_object(GROUP, VERSION, "inferenceservices")
    except ApiException as exc:
        print(f"modalscale cost export: listing failed: HTTP {exc.status} {exc.reason}", file=sys.stderr)
        return 1
    except HTTPError as exc:  # urllib3: connection refused, DNS, TLS, timeout
        reason = getattr(exc, "reason", None) or exc
        print(f"modalscale cost export: cannot reach the API server {api.configuration.host}: "
              f"{str(reason).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        api.close()  # type: ignore[no-untyped-call]  # kubernetes' ApiClient is untyped
    tiers = {}
    for i in cast("dict[str, Any]", isvcs).get("items") or []:  # the client types a list as object
        try:
            tiers[(i["metadata"]["namespace"], i["metadata"]["name"])] = PricingTier(
                ((i.get("spec") or {}).get("pricing") or {}).get("tier", "OnDemand"))
        except ValueError:
            continue
    try:
        result = export_rows(cast("dict[str, Any]", policies).get("items") or [], tiers, args.billing_account,
                             reader)
    except showback.ShowbackUnavailable as exc:
        print(f"modalscale cost export: --by-tenant: {exc}", file=sys.stderr)
        return 1
    out: IO[str]
    if args.output == "-":
        count = write_focus_csv(result.rows, sys.stdout)
    else:
        try:
            with open(args.output, "w", newline="", encoding="utf-8") as out:
                count = write_focus_csv(result.rows, out)
        except OSError as exc:
            raise UsageError("--output", f"{args.output}: {exc.strerror or exc}; write elsewhere") from None
    for s in result.skipped:
        print(f"skipped {s}", file=sys.stderr)
    for n in result.notes:
        print(f"note: {n}", file=sys.stderr)
    print(f"Wrote {count} FOCUS {FOCUS_VERSION} rows from {result.policies} BudgetPolicies", file=sys.stderr)
    return 0


def _usage_reader(args: argparse.Namespace) -> UsageReader:
    """``--by-tenant``'s reader: showback's inputs over a window from Prometheus (raises ``ShowbackUnavailable``)."""
    import os

    from modalscale.cli import UsageError

    url = args.prometheus_url or os.environ.get("MODALSCALE_PROMETHEUS_URL", "")
    if not url:
        raise UsageError("--prometheus-url", "--by-tenant reads the gateway's counters from Prometheus; give "
                                             "--prometheus-url URL or set MODALSCALE_PROMETHEUS_URL")
    if not url.startswith(("http://", "https://")):
        raise UsageError("--prometheus-url", "it is not an http:// or https:// URL (e.g. http://localhost:9090)")
    source = showback.PrometheusShowback(url)

    def read(start: dt.datetime, end: dt.datetime) -> ServiceUsage:
        window_s = int((end - start).total_seconds())
        if window_s <= 0:
            return {}
        ledger, usage = source.read(window_s, end)
        return {k: (lw.available_replica_s, usage.get(k, [])) for k, lw in ledger.items()}

    return read


def _with_showback(result: Any, url: str, since: str) -> Any:
    """``result`` (a ``CostDiff``) with the top tenants and modalities of its services over the last ``since``;
    Prometheus unreachable: ``result`` unchanged and a note on stderr (the diff stands; no tenant is named). None:
    ``--since`` does not parse (said on stderr)."""
    import datetime as dt

    from modalscale.costmodel.showback import ServiceWindow
    from modalscale.operator.cost_diff import with_drivers
    from modalscale.operator.showback import PrometheusShowback, ShowbackUnavailable, parse_since

    try:
        window_s = parse_since(since)
    except ValueError as exc:
        print(f"modalscale cost diff: --since: {exc}", file=sys.stderr)
        return None
    try:
        ledger, usage = PrometheusShowback(url).read(window_s, dt.datetime.now(dt.UTC).replace(microsecond=0))
    except ShowbackUnavailable as exc:
        print(f"modalscale cost diff: note: tenants not named ({exc})", file=sys.stderr)
        return result
    windows = {k: ServiceWindow(k[0], k[1], lw.spend_usd, lw.available_replica_s) for k, lw in ledger.items()}
    return with_drivers(result, windows, usage, f"showback over the last {since}")


def run_diff(args: argparse.Namespace) -> int:
    """Price both sides, print the diff; 0, 1 (``--fail-above`` exceeded) or 2 (bad input, named on stderr; with
    ``--fail-above`` and without ``--allow-not-priced``, also a document not priced: the delta is not known)."""
    from modalscale.costmodel.catalog import CatalogError, load_catalog
    from modalscale.operator.cost_diff import (
        NOT_PRICED_FIX,
        CostDiffError,
        changed_not_priced,
        diff,
        price_side,
        read_manifests,
        render,
        simulator_expected,
    )

    try:
        limit = Decimal(args.fail_above) if args.fail_above is not None else None
        if limit is not None and not limit.is_finite():
            raise InvalidOperation
    except InvalidOperation:
        print(f"modalscale cost diff: --fail-above: {args.fail_above!r} is not an amount in USD (e.g. 500)",
              file=sys.stderr)
        return 2
    if (args.trace is None) != (args.profile is None):
        print("modalscale cost diff: --trace and --profile go together (expected replicas come from the simulator "
              "replaying the trace with the profiled model)", file=sys.stderr)
        return 2
    try:
        catalog = load_catalog(args.catalog) if args.catalog is not None else load_catalog()
    except CatalogError as exc:
        print(f"modalscale cost diff: {'--catalog: ' if args.catalog is not None else ''}{exc}", file=sys.stderr)
        return 2
    try:
        expected = simulator_expected(args.trace, args.profile) if args.trace is not None else None
        base, skipped_base = price_side(read_manifests(args.base, args.repo), catalog, expected)
        head, skipped_head = price_side(read_manifests(args.head, args.repo), catalog, expected)
    except (CostDiffError, CatalogError) as exc:
        print(f"modalscale cost diff: {exc}", file=sys.stderr)
        return 2
    source = (f"the simulator's predictive policy replaying {args.trace} with {args.profile}" if expected
              else "unknown (give --trace and --profile), except Fixed mode")
    result = diff(base, head, args.base, args.head, source, skipped_base + skipped_head)
    if args.prometheus_url:
        result = _with_showback(result, args.prometheus_url, args.since)
        if result is None:
            return 2
    print(render(result, args.format))
    # A typo'd kind or apiVersion (kubectl would refuse it) or a Helm template: the gate must not hide it, nor pass
    # a delta that leaves out a part of the change unless told to; one the same on both sides adds nothing to it.
    changed = changed_not_priced(skipped_base, skipped_head)
    changed_ids = {id(s) for s in changed}
    blind = limit is not None and not args.allow_not_priced and bool(changed)
    said: set[tuple[str, str, str, str]] = set()
    for s in result.not_priced:
        if id(s) in changed_ids:
            print(f"modalscale cost diff: {'--fail-above' if blind else 'warning'}: {s.origin}: {s.what} not priced: "
                  f"{s.why}", file=sys.stderr)
        elif (key := (s.what, s.kind, s.api_version, s.content)) not in said:  # once, not once per side
            said.add(key)
            print(f"modalscale cost diff: warning: {s.origin}: {s.what} not priced: {s.why} (the same in BASE and "
                  "HEAD: not part of the change)", file=sys.stderr)
    if blind:
        print(f"modalscale cost diff: --fail-above: {len(changed)} document(s) of the change above may be "
              f"InferenceServices but were not priced, so the delta is not known; {NOT_PRICED_FIX}", file=sys.stderr)
        return 2
    if limit is not None and result.total_monthly_delta_usd.max > limit:
        print(f"modalscale cost diff: the max monthly delta {result.total_monthly_delta_usd.max:.2f} USD exceeds "
              f"--fail-above {limit} USD", file=sys.stderr)
        return 1
    return 0
