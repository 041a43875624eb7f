"""The operator's composition root: one typed ``Deps``, built once by the entry point before kopf starts.

``modalscale operator`` (``operator/cli.py``) calls :func:`build_deps` and hands the result to kopf as
``memo.deps``; every handler, timer and daemon reaches it through :func:`deps_of`. Nothing here is built lazily
by a handler, so no start-up handler depends on the order kopf runs the others in.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from modalscale.operator.apply import Writer
from modalscale.operator.autoscale.metrics import AutoscalerMetrics
from modalscale.operator.autoscale.model import ServiceTimeModelCache
from modalscale.operator.autoscale.observe import PrometheusReader
from modalscale.operator.budget.runtime import BudgetRuntime
from modalscale.operator.isvc.cache import ChildCaches, Pokes
from modalscale.operator.isvc.observe import Observer
from modalscale.operator.metrics import OperatorMetrics
from modalscale.operator.opencost_source import PriceBook
from modalscale.operator.settings import Settings

if TYPE_CHECKING:
    from modalscale.costmodel.catalog import Catalog


@dataclass
class AutoscaleRuntime:
    """What the autoscaler daemons share: the Prometheus reader, the service-time model cache, their metrics."""

    reader: PrometheusReader
    models: ServiceTimeModelCache
    metrics: AutoscalerMetrics


@dataclass
class Deps:
    """Everything handlers need, built once at start-up (:func:`build_deps`) and kept in ``memo.deps``."""

    settings: Settings
    observer: Observer
    writer: Writer
    metrics: OperatorMetrics
    clock: Callable[[], dt.datetime]
    catalog: Catalog
    """Packaged prices merged with ``MODALSCALE_PRICING_CATALOG``."""
    autoscale: AutoscaleRuntime
    prices: PriceBook
    """``catalog`` with OpenCost's prices laid over it when ``MODALSCALE_OPENCOST_URL`` is set (what handlers price
    with)."""
    budget: BudgetRuntime
    """The BudgetPolicy handlers' per-process state (their observer, delivery rounds, burn history)."""
    caches: ChildCaches | None = None
    """The children's watch caches ``observer`` reads (started and synced by the start-up handler; None: every
    observation reads with GETs)."""
    pokes: Pokes = field(default_factory=Pokes)
    """Wake-ups the caches send to the per-InferenceService workers when a child changes."""
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    """One lock per object uid: the change handler, the timer and the autoscaler daemon never reconcile the same
    object at once."""

    def lock_for(self, uid: str) -> threading.Lock:
        return self.locks.setdefault(uid, threading.Lock())


class KubeconfigError(Exception):
    """The kubeconfig cannot be read as one; the message (one line) names the file and what is wrong."""


def load_kubeconfig() -> None:
    """``kubernetes.config.load_kube_config()``, with a file that is not a kubeconfig (not YAML, not UTF-8 text, not
    a mapping, a directory) raised as one :class:`KubeconfigError` line naming it, not the loader's own exception.

    Raises:
        kubernetes.config.ConfigException: No kubeconfig, or one without what is needed (as the loader raises it).
        KubeconfigError: The file cannot be read as a kubeconfig.
    """
    import yaml
    from kubernetes import config

    path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        config.load_kube_config()  # type: ignore[no-untyped-call]  # kubernetes.config is untyped
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{mark.name}: not valid YAML at line {mark.line + 1}, column {mark.column + 1}" if mark else (
            f"{path}: not valid YAML")
        context = f" ({exc.context})" if exc.context else ""
        raise KubeconfigError(f"{where}: {exc.problem}{context}") from exc
    except yaml.YAMLError as exc:
        detail = re.sub(r"\s+", " ", str(exc)).strip()  # the YAML error on one line
        raise KubeconfigError(f"{path}: not valid YAML: {detail}") from exc
    except UnicodeDecodeError as exc:
        raise KubeconfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise KubeconfigError(f"{exc.filename or path}: {exc.strerror or exc}") from exc
    except (TypeError, AttributeError) as exc:  # YAML, but a list or a string: the loader indexes it as a mapping
        raise KubeconfigError(f"{path}: not a kubeconfig (a YAML mapping with clusters, users and contexts)") from exc


def build_deps(settings: Settings) -> Deps:
    """Clients, metrics, prices, the autoscaler and budget runtimes and clock for the handlers (kubeconfig or
    in-cluster config).

    Raises:
        kubernetes.config.ConfigException: Neither in a pod nor with a kubeconfig.
        KubeconfigError: The kubeconfig cannot be read as one.
        modalscale.costmodel.catalog.CatalogError: ``MODALSCALE_PRICING_CATALOG`` cannot be read.
    """
    from pathlib import Path

    from kubernetes import client, config

    from modalscale.costmodel.catalog import load_catalog
    from modalscale.operator.budget.history import BurnGauges, PrometheusHistory
    from modalscale.operator.budget.observe import BudgetObserver
    from modalscale.operator.showback import PrometheusShowback

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]  # kubernetes.config is untyped
    except config.ConfigException:
        load_kubeconfig()
    api = client.ApiClient()
    metrics = OperatorMetrics()
    pokes = Pokes()
    caches = ChildCaches(api, settings.namespaces, on_owner_change=pokes.poke)
    observer = Observer(api, caches)
    catalog = load_catalog(Path(settings.pricing_catalog) if settings.pricing_catalog else None)
    autoscale = AutoscaleRuntime(reader=PrometheusReader(settings.prometheus_url),
                                 models=ServiceTimeModelCache(observer.core),
                                 metrics=AutoscalerMetrics(metrics.registry))
    clock = lambda: dt.datetime.now(dt.UTC)  # noqa: E731
    prices = PriceBook(catalog, settings.opencost_url, settings.opencost_refresh_s, clock)
    url = settings.prometheus_url
    budget = BudgetRuntime(BudgetObserver(observer.custom.api_client),
                           history_source=PrometheusHistory(url) if url else None,
                           tenant_usage_source=PrometheusShowback(url) if url else None,
                           gauges=BurnGauges(metrics.registry))
    return Deps(settings=settings, observer=observer, writer=Writer(api, metrics), metrics=metrics,
                clock=clock, catalog=catalog, autoscale=autoscale, prices=prices, budget=budget, caches=caches,
                pokes=pokes)


def deps_of(memo: Any) -> Deps:
    """The ``Deps`` in a kopf memo.

    Raises:
        RuntimeError: The memo holds none: kopf was started without ``memo=kopf.Memo(deps=build_deps(...))``.
    """
    deps = memo.get("deps") if hasattr(memo, "get") else None
    if not isinstance(deps, Deps):
        raise RuntimeError("the operator was started without its Deps: run it with `modalscale operator`, or pass "
                           "memo=kopf.Memo(deps=build_deps(settings)) to kopf.operator")
    return deps
