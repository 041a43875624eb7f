"""Tenant labels with bounded cardinality (pure apart from the folder's own memory of names seen).

The gateway counts every request under the tenant named in a header (``x-modalscale-tenant`` by default). A label
value comes from a client, so it is cleaned and the number of distinct values is capped, or one client could create
series without bound in Prometheus:

* absent, empty or blank -> ``default``;
* otherwise the value with surrounding whitespace stripped, every character outside printable ASCII (space to ``~``)
  replaced by ``_``, cut to :data:`MAX_LABEL_CHARS` characters (``default`` if nothing is left);
* the first ``cap`` distinct cleaned names keep their name; every later one is ``other``. ``default`` and ``other``
  themselves never take a place;
* a tenant some BudgetPolicy budgets (:meth:`TenantFolder.reserve`, from the InferenceService's
  ``budget.modalscale.io/tenants-*`` annotations) always keeps its name and takes no place either: its spend is
  measured from these counters.

Each gateway process keeps its own list (from its start), so two gateway replicas that saw tenants in a different
order may fold different names when more than ``cap`` tenants are active; sum over ``other`` and the named tenants
together when comparing across pods.
"""

from __future__ import annotations

from typing import Final

DEFAULT_TENANT: Final = "default"
OTHER_TENANT: Final = "other"
MAX_LABEL_CHARS: Final = 64
"""Longest tenant label kept, characters (Kubernetes names are at most 63; 64 leaves room for a prefix)."""


def clean(raw: str | None) -> str:
    """The tenant label for a raw header value before folding (see the module docstring)."""
    if raw is None:
        return DEFAULT_TENANT
    text = "".join(c if " " <= c <= "~" else "_" for c in raw.strip())[:MAX_LABEL_CHARS].strip()
    return text or DEFAULT_TENANT


class TenantFolder:
    """Maps raw tenant header values to at most ``cap`` names plus ``default`` and ``other``.

    Args:
        cap: Distinct tenants that keep their name, >= 0.
    Raises:
        ValueError: ``cap`` < 0.
    """

    def __init__(self, cap: int) -> None:
        if cap < 0:
            raise ValueError(f"cap must be >= 0, got {cap}")
        self.cap = cap
        self._named: dict[str, None] = {}
        self._reserved: frozenset[str] = frozenset()

    def reserve(self, names: frozenset[str]) -> None:
        """Replace the set of tenants that always keep their name (budgeted ones); they take no place of ``cap``."""
        self._reserved = frozenset(names)

    @property
    def named(self) -> tuple[str, ...]:
        """The tenants that keep their name, in the order first seen."""
        return tuple(self._named)

    def label(self, raw: str | None) -> str:
        """The label for one request's tenant header value (None when the header is absent)."""
        name = clean(raw)
        if name in (DEFAULT_TENANT, OTHER_TENANT) or name in self._named or name in self._reserved:
            return name
        if len(self._named) < self.cap:
            self._named[name] = None
            return name
        return OTHER_TENANT
