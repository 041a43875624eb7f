"""``kubectl-modalscale``: the executable kubectl runs for ``kubectl modalscale ...`` (a kubectl plugin).

Commands (read-only: ``get`` on inferenceservices, ``list`` on budgetpolicies)::

    kubectl modalscale why NAME [-n NS] [--last N]   the last autoscaling decisions, their reasons and features
    kubectl modalscale cost NAME [-n NS]             burn rate now and spend per BudgetPolicy that counts it
    kubectl modalscale budget NAME [-n NS]           a BudgetPolicy: spend vs limit, thresholds, next action
    kubectl modalscale cost diff BASE HEAD [...]     `modalscale cost diff` with the same arguments

Kube access as kubectl has it: ``--kubeconfig``, else ``$KUBECONFIG`` (paths joined by ``:`` are merged), else
``~/.kube/config``, else the in-cluster service account; ``--context`` picks a context; the namespace is ``-n``,
else the context's, else the pod's (in cluster), else ``default``. ``-o json|yaml`` prints the report as data.

Errors exit 1 with one line on stderr naming what is missing and the fix (an object or CRD not found, no
kubeconfig, API server unreachable, forbidden), never a traceback; bad usage exits 2 (argparse). A service called
``diff``: ``kubectl modalscale cost -- diff``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROG = "kubectl modalscale"
GROUP, VERSION = "modalscale.io", "v1alpha1"
SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class PluginError(Exception):
    """A one-line failure for the user (what is missing or wrong, and the fix); exits 1."""


@dataclass(frozen=True)
class Kind:
    """A CRD the plugin reads: names for messages and the fix when it is missing."""

    kind: str
    plural: str
    short: str

    @property
    def crd(self) -> str:
        return f"{self.plural}.{GROUP}"


ISVC = Kind("InferenceService", "inferenceservices", "msvc")
BUDGET = Kind("BudgetPolicy", "budgetpolicies", "mbudget")
CRD_FIX = ("install the CRDs: helm install modalscale-crds charts/modalscale-crds, or kubectl apply -f crds/ from the "
           "modalscale repository")


# ------------------------------------------------------------------------------------------------ kube access
@dataclass
class Kube:
    """An API client and the namespace commands default to."""

    api: Any
    namespace: str
    host: str



def _positive_int(text: str) -> int:
    """argparse type of a count: a whole number >= 1 (``--last -3`` showed nothing and exited 0)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a count: give 1 or more")
    return value

def _first_line(exc: BaseException) -> str:
    """``exc`` as one line (:func:`modalscale.cli.first_line`: a KeyError's key, a YAML error's problem and where);
    quotes are removed only where they wrap the whole message (a repr), never a quote of the message's own (the
    path in ``Is a directory: '/tmp/x'``)."""
    from modalscale.cli import first_line

    text = first_line(exc).strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"" and text[0] not in text[1:-1]:
        text = text[1:-1]
    return text or type(exc).__name__


def connect(kubeconfig: str | None, context: str | None, namespace: str | None,
            env: Mapping[str, str] | None = None) -> Kube:
    """An API client as kubectl would build it (see the module docstring for the order).

    Raises:
        PluginError: The kubeconfig file does not exist or does not load, the context is not in it, or there is
            no kubeconfig and no in-cluster service account.
    """
    import yaml
    from kubernetes import client
    from kubernetes import config as _config

    config: Any = _config  # the loaders carry no annotations
    env = os.environ if env is None else env
    default = Path.home() / ".kube" / "config"
    if kubeconfig and not Path(kubeconfig).is_file():
        raise PluginError(f"--kubeconfig {kubeconfig}: no such file; give the kubeconfig of the cluster")
    if kubeconfig or env.get("KUBECONFIG") or default.is_file():
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else (
            f"KUBECONFIG={env['KUBECONFIG']}" if env.get("KUBECONFIG") else str(default))
        files = kubeconfig or env.get("KUBECONFIG") or str(default)  # the loader merges paths joined by ':'
        try:
            api = config.new_client_from_config(config_file=files, context=context)
            contexts, active = config.list_kube_config_contexts(config_file=files)
        except (config.ConfigException, ValueError, TypeError, KeyError, AttributeError, OSError,
                yaml.YAMLError) as exc:
            raise PluginError(f"{where}: cannot use it ({_first_line(exc)}); check the file"
                              + (f" and that context {context!r} is in it (kubectl config get-contexts)"
                                 if context else "")) from None
        chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
        ns = namespace or ((chosen or {}).get("context") or {}).get("namespace") or "default"
        return Kube(api, ns, api.configuration.host)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        raise PluginError("no kubeconfig: give --kubeconfig FILE or export KUBECONFIG=FILE (~/.kube/config does "
                          "not exist and this is not a pod with a service account)") from None
    api = client.ApiClient()
    ns = namespace
    if ns is None:
        try:
            ns = SA_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or "default"
        except OSError:
            ns = "default"
    return Kube(api, ns, api.configuration.host)


def _api_error(exc: Any, kind: Kind, namespace: str | None, name: str | None, host: str) -> PluginError:
    """One line for an ``ApiException`` on ``kind`` (404 object, 404 CRD, 401, 403, other)."""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    body = body if isinstance(body, dict) else {}
    where = f" in namespace {namespace}" if namespace else " in any namespace"
    if exc.status == 404 and name and (body.get("details") or {}).get("name") == name:
        return PluginError(f"{kind.kind} {namespace}/{name} not found; kubectl get {kind.short} -n {namespace} "
                           f"lists them")
    if exc.status == 404:  # the resource type itself: the apiserver answers a plain 404 page
        return PluginError(f"the {kind.kind} CRD ({kind.crd}) is not installed on {host}; {CRD_FIX}")
    if exc.status == 401:
        return PluginError(f"the API server {host} refused the credentials (401 Unauthorized); log in again or "
                           f"check the kubeconfig's user")
    if exc.status == 403:
        return PluginError(f"forbidden: {body.get('message') or exc.reason} (this command needs get/list on "
                           f"{kind.crd}{where}; ask for that RBAC)")
    return PluginError(f"reading {kind.crd}{where} failed: HTTP {exc.status} {exc.reason}: "
                       f"{body.get('message', '')}".rstrip(": "))


def _call(kube: Kube, kind: Kind, namespace: str | None, name: str | None, fn: Callable[[], Any]) -> Any:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return fn()
    except ApiException as exc:
        raise _api_error(exc, kind, namespace, name, kube.host) from None
    except HTTPError as exc:  # connection refused, DNS, TLS, timeout
        reason = getattr(exc, "reason", None) or exc
        raise PluginError(f"cannot reach the API server {kube.host}: {_first_line(reason)}; check --kubeconfig "
                          f"and --context (kubectl cluster-info)") from None


def get_object(kube: Kube, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
    """One object of ``kind``; raises :class:`PluginError` (not found, CRD missing, forbidden, unreachable)."""
    from kubernetes import client

    custom = client.CustomObjectsApi(kube.api)
    return dict(_call(kube, kind, namespace, name, lambda: custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, kind.plural, name, _request_timeout=30)))


def list_policies(kube: Kube, namespace: str) -> tuple[list[dict[str, Any]], str]:
    """BudgetPolicies of every namespace (a policy may select other namespaces), or of ``namespace`` alone when
    listing all is forbidden; returns ``(items, scope)`` with the scope in words."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(kube.api)
    try:
        items: Any = custom.list_cluster_custom_object(GROUP, VERSION, BUDGET.plural, _request_timeout=30)
        return list(items.get("items") or []), "all namespaces"
    except ApiException as exc:
        if exc.status != 403:
            raise _api_error(exc, BUDGET, None, None, kube.host) from None
    items = _call(kube, BUDGET, namespace, None, lambda: custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, BUDGET.plural, _request_timeout=30))
    return list(items.get("items") or []), f"namespace {namespace} (listing all namespaces is forbidden)"


# ------------------------------------------------------------------------------------------------ commands
def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _emit(report: Mapping[str, Any], fmt: str, text: Callable[[Mapping[str, Any]], str]) -> None:
    if fmt == "json":
        print(json.dumps(report, indent=2, default=str))
    elif fmt == "yaml":
        import yaml

        print(yaml.safe_dump(json.loads(json.dumps(report, default=str)), sort_keys=False), end="")
    else:
        print(text(report))


def run_why(args: argparse.Namespace) -> int:
    from modalscale.kubectl.render import render_why, why_report

    kube = connect(args.kubeconfig, args.context, args.namespace)
    isvc = get_object(kube, ISVC, kube.namespace, args.name)
    _emit(why_report(isvc, _now(), last=args.last), args.output, render_why)
    return 0


def run_cost(args: argparse.Namespace) -> int:
    from modalscale.kubectl.render import cost_report, render_cost

    kube = connect(args.kubeconfig, args.context, args.namespace)
    isvc = get_object(kube, ISVC, kube.namespace, args.name)
    policies, scope = list_policies(kube, kube.namespace)
    _emit(cost_report(isvc, policies, _now(), scope), args.output, render_cost)
    return 0


def run_budget(args: argparse.Namespace) -> int:
    from modalscale.kubectl.render import budget_report, render_budget

    kube = connect(args.kubeconfig, args.context, args.namespace)
    policy = get_object(kube, BUDGET, kube.namespace, args.name)
    _emit(budget_report(policy, _now()), args.output, render_budget)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree (``cost diff`` is dispatched before parsing, see :func:`main`)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", default=None,
                        help="namespace of NAME (default: the context's namespace, else default)")
    common.add_argument("--kubeconfig", default=None,
                        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
    common.add_argument("--context", default=None, help="kubeconfig context (default: the current context)")
    common.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table",
                        help="table (default), or the report as json or yaml")
    parser = argparse.ArgumentParser(prog=PROG, description="Explain modalscale's autoscaling and budget decisions "
                                     "from the status the operator writes.",
                                     epilog="`kubectl modalscale COMMAND --help` lists a command's options.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    w = sub.add_parser("why", parents=[common], help="an InferenceService's last scaling decisions and why",
                       description="The autoscaler's latest decision (reason, message, features: arrival rate, "
                                   "service times, load), the last replica changes, and the conditions.")
    w.add_argument("name", metavar="NAME", help="InferenceService name")
    w.add_argument("--last", type=_positive_int, default=10,
                   help="replica changes to show, newest first (default 10)")
    w.set_defaults(func=run_why)
    c = sub.add_parser("cost", parents=[common], help="an InferenceService's burn rate and spend per BudgetPolicy",
                       description="Burn rate now (status.costUSDPerHour) and the spend of this period in each "
                                   "BudgetPolicy ledger that counts the service.",
                       epilog="`kubectl modalscale cost diff BASE HEAD [...]` runs `modalscale cost diff` (the "
                              "monthly cost of manifest changes); `modalscale cost diff --help` lists its options. "
                              "A service named diff: `kubectl modalscale cost -- diff`.")
    c.add_argument("name", metavar="NAME", help="InferenceService name")
    c.set_defaults(func=run_cost)
    b = sub.add_parser("budget", parents=[common], help="a BudgetPolicy: spend vs limit, thresholds, next action",
                       description="Spend against the limit, burn rate, forecast, thresholds (crossed, alerted), "
                                   "enforcement in force, the next action and at which spend, pending alerts.")
    b.add_argument("name", metavar="NAME", help="BudgetPolicy name")
    b.set_defaults(func=run_budget)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the plugin; returns the exit code (0 done, 1 failure named on stderr, 2 usage)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:2] == ["cost", "diff"]:
        from modalscale.cli import main as modalscale_main

        return modalscale_main(["cost", *args_list[1:]])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except PluginError as exc:
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
