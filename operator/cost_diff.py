"""``modalscale cost diff BASE HEAD``: the monthly cost a change to InferenceService manifests adds, for a CI gate.

Why a module: a pull request that raises ``maxReplicas`` or switches a GPU type changes what the cluster may
spend long before any budget sees it; infracost answers this for Terraform, this answers it for the
InferenceServices of a change. Pure except :func:`read_manifests` (files, folders, ``git show``).

Rules:

* **Inputs.** BASE and HEAD are each a YAML/JSON file, a folder (the ``*.yaml``, ``*.yml`` and ``*.json``
  under it, hidden folders apart), or a git ref of this repository (``REF`` or ``REF:PATH``). Of a folder, a bare
  ``REF`` or a ``REF:PATH`` folder only the files that can hold an InferenceService are read (a ``kind`` close to
  it or a modalscale apiVersion, :func:`may_hold_isvc`): Helm templates and other files are not manifests; a Helm
  template (a chart's ``templates/``) that can hold one is listed as not priced (render it first).
  A file may hold several documents (rendered Helm
  output, ``kind: List``); only ``InferenceService`` objects of ``modalscale.io`` count, everything else is
  skipped: quietly, except a document that looks meant as one (a kind or apiVersion close to ours,
  :func:`looks_meant_as_isvc`), listed as not priced with why (table, JSON ``not_priced``, stderr). A service is
  identified by ``namespace/name`` (namespace ``default`` when absent, as ``kubectl`` would apply it).
* **Parsing and prices.** Each InferenceService is parsed by the operator's own parser
  (:func:`modalscale.api.inferenceservice.parse_isvc`) and priced per replica-hour by the operator's catalog
  (:meth:`modalscale.costmodel.catalog.Catalog.price_replica`, ``--catalog`` merges an override exactly like
  ``MODALSCALE_PRICING_CATALOG``). An invalid spec or an unknown GPU type is an error naming the file, the
  service and the field (never priced at 0).
* **Replicas.** ``min`` = ``spec.scaling.minReplicas`` and ``max`` = ``maxReplicas``; ``expected`` = the mean
  replicas of the ``predictive`` policy replaying a trace in the simulator
  (:func:`modalscale.autoscaler.simulate.run_simulation`, bounded by the service's min/max and its p95
  target) when a profile and a trace are given, else unknown (None). ``Fixed`` mode runs ``replicas``: min,
  expected and max are all that. A staged service's image encoder pool (``spec.stages.imageEncoder``, priced by
  its own ``resources`` at the service's tier, as the ledger charges its pods) adds its ``minReplicas`` and
  ``maxReplicas``; its expected replicas are its ``minReplicas`` in ``Fixed`` mode, else unknown (its own
  autoscaler sizes it).
* **Gateway.** With ``spec.gateway.enabled`` (the default) the service also runs ``spec.gateway.replicas`` request
  gateway pods whatever its own replicas (at 0 replicas too), each priced by its ``spec.gateway.resources`` (CPU and
  memory requests) at the catalog's on-demand prices whatever the service's tier, as the budget ledger charges them
  (``modalscale.costmodel.budget.state.service_state``); they add to min, expected and max alike. Turned off: none.
* **Money.** Monthly cost = replicas x USD per replica-hour x :data:`HOURS_PER_MONTH` (730 h, the FinOps
  convention of infracost and the cloud pricing calculators: 8760 h / 12). Deltas are HEAD - BASE per
  service (an added service's BASE is 0, a removed one's HEAD is 0); the total is their sum. ``expected`` of a
  delta or total is None when any side it needs is unknown. Amounts are ``Decimal``, shown to the cent.
* ``--fail-above USD``: exit status 1 when the total ``max`` delta exceeds it (2 for errors). A gate that
  could not price part of the change cannot pass: when a document not priced (a typo'd kind or apiVersion, a Helm
  template) is part of the change, i.e. not the same in BASE and HEAD (:func:`changed_not_priced`: added, removed
  or edited), the delta is not known, so the exit status is 2 with one line per such document (origin, what, why)
  and the fix (:data:`NOT_PRICED_FIX`), before the limit is compared; the report is printed all the same. One the
  same on both sides (another project's ``InferenceService``, e.g. KServe's, that the change leaves alone) adds
  nothing to the delta whatever it is: a warning. ``--allow-not-priced`` accepts changed ones too: each is a
  warning, and the priced delta decides. Without ``--fail-above`` nothing not priced changes the exit status (a
  report).
* **Who spends on them now** (``--prometheus-url``): for each service of the diff that showback can price, the
  top tenants and modalities behind its spend over the last ``--since`` (showback's allocation, the same as
  ``modalscale cost showback``; :func:`modalscale.costmodel.showback.drivers_of`), so a reviewer sees whom a change
  affects. Not given, not readable, or no request of a service in the window: nothing is said about its tenants.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from modalscale import VERSION
from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import IsvcSpec, ResourceSpec, parse_isvc
from modalscale.api.quantities import InvalidQuantity
from modalscale.costmodel.catalog import Catalog, PricingTier, ReplicaResources, UnknownPrice
from modalscale.costmodel.money import MONEY_CONTEXT, display_usd, format_usd
from modalscale.costmodel.showback import ServiceWindow, SpendDrivers, TenantUsage, drivers_of

HOURS_PER_MONTH = Decimal(730)
"""Hours in a month for monthly cost (8760 / 12, the convention of infracost and cloud pricing calculators)."""
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
GROUP_PREFIX = "modalscale.io/"
_KIND = re.compile(r"""\bkind["']?\s*:\s*["']?([A-Za-z][\w.-]*)""")
_API_VERSION = re.compile(r"""\bapiVersion["']?\s*:\s*["']?([^\s"',}]+)""")
HELM_TEMPLATE = ("a Helm template, not a manifest: render it (helm template CHART > FILE) and diff the rendered "
                 "FILE")

NOT_PRICED_FIX = (f"if it is meant as a modalscale InferenceService, fix it as its line says (kind "
                  f"InferenceService, apiVersion {GROUP_PREFIX}{VERSION}; a Helm template: render the chart and "
                  "diff the output); if it is another project's (e.g. KServe's serving.kserve.io), give "
                  "--allow-not-priced to gate on the priced services alone")
"""What to do about documents not priced when ``--fail-above`` gates on the delta (the exit-2 message)."""

_OTHER_KINDS = frozenset({"BudgetPolicy"})
"""The group's other kinds: skipped quietly (they cost nothing themselves)."""

ExpectedReplicas = Callable[[IsvcSpec], float]
"""Mean replicas of a service over the trace (the simulator's predictive policy), given its parsed spec."""


class CostDiffError(ValueError):
    """An input cannot be read or priced; the message names the file (and service and field)."""


@dataclass(frozen=True)
class ManifestFile:
    """One input file: where it came from (``path`` or ``REF:path``) and its text; ``not_manifest``: why it is not
    read although it may hold an InferenceService (a Helm template), listed as not priced."""

    origin: str
    text: str
    not_manifest: str | None = None


@dataclass(frozen=True)
class Skipped:
    """A document of an input that is not priced: ``what`` (``Kind name``); ``why`` is set when it looks meant as an
    InferenceService (:func:`looks_meant_as_isvc`) and is said in the output, else it is skipped quietly."""

    origin: str
    what: str
    kind: str = ""
    api_version: str = ""
    name: str = ""
    why: str | None = None
    content: str = ""
    """The document as written, canonical (sorted-key JSON; a Helm template: its text): what
    :func:`changed_not_priced` compares between BASE and HEAD."""

    def __str__(self) -> str:
        return f"{self.origin}: {self.what}" + (f" (not priced: {self.why})" if self.why else "")

    def to_json(self) -> dict[str, str | None]:
        return {"file": self.origin, "kind": self.kind, "apiVersion": self.api_version, "name": self.name,
                "why": self.why}


def _edits(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions) between ``a`` and ``b``."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def _kind_close(kind: str) -> bool:
    return _edits(kind.lower(), "inferenceservice") <= 2


def _group_close(api_version: str) -> bool:
    group = api_version.split("/", 1)[0].lower()
    return "modalscale" in group or _edits(group, GROUP_PREFIX.rstrip("/")) <= 2


def looks_meant_as_isvc(kind: str, api_version: str) -> str | None:
    """Why a document that is not priced looks meant as a ``modalscale.io`` InferenceService, or None.

    The rule: its ``kind`` is within 2 edits of ``InferenceService`` ignoring case (``Inferenceservice``,
    ``InferenceServce``, KServe's ``InferenceService`` too), or its apiVersion's group mentions ``modalscale`` or is
    within 2 edits of ``modalscale.io`` (``modalscale/v1alpha1``, ``modalsacle.io/v1alpha1``) and its kind is not
    another kind of the group (``BudgetPolicy``). Deployments, ConfigMaps and the like are neither.
    """
    ours = f"{GROUP_PREFIX}{VERSION}"
    kind_close = _kind_close(kind)
    group_close = _group_close(api_version)
    if not kind_close and not (group_close and kind not in _OTHER_KINDS):
        return None
    why = []
    if kind != "InferenceService":
        why.append(f"kind {kind or '(none)'} is not InferenceService" + (" (case matters)" if kind_close and
                                                                         kind.lower() == "inferenceservice" else ""))
    if not api_version.startswith(GROUP_PREFIX) or api_version == GROUP_PREFIX:
        why.append(f"apiVersion {api_version or '(none)'} is not {ours}")
    return "; ".join(why) or None


@dataclass(frozen=True)
class ReplicaRange:
    """Replicas (or money) at the service's minimum, expected and maximum; ``expected`` None = unknown."""

    min: Decimal
    expected: Decimal | None
    max: Decimal

    def times(self, factor: Decimal) -> "ReplicaRange":
        ctx = MONEY_CONTEXT
        return ReplicaRange(ctx.multiply(self.min, factor),
                            None if self.expected is None else ctx.multiply(self.expected, factor),
                            ctx.multiply(self.max, factor))

    def minus(self, other: "ReplicaRange") -> "ReplicaRange":
        ctx = MONEY_CONTEXT
        expected = (None if self.expected is None or other.expected is None
                    else ctx.subtract(self.expected, other.expected))
        return ReplicaRange(ctx.subtract(self.min, other.min), expected, ctx.subtract(self.max, other.max))

    def plus(self, other: "ReplicaRange") -> "ReplicaRange":
        ctx = MONEY_CONTEXT
        expected = None if self.expected is None or other.expected is None else ctx.add(self.expected, other.expected)
        return ReplicaRange(ctx.add(self.min, other.min), expected, ctx.add(self.max, other.max))

    def to_json(self) -> dict[str, str | None]:
        """Money to the cent as decimal strings (``expected`` null when unknown)."""
        def cents(v: Decimal) -> str:
            return display_usd(v)

        return {"min": cents(self.min), "expected": None if self.expected is None else cents(self.expected),
                "max": cents(self.max)}


ZERO = ReplicaRange(Decimal(0), Decimal(0), Decimal(0))


@dataclass(frozen=True)
class PricedService:
    """One InferenceService of one side, priced.

    Attributes:
        origin: File it came from.
        usd_per_replica_hour: Catalog price of one replica.
        replicas: Replicas at min, expected (None: unknown) and max.
        monthly_usd: ``replicas x usd_per_replica_hour x HOURS_PER_MONTH``.
    """

    namespace: str
    name: str
    origin: str
    gpu: str
    pricing_tier: str
    mode: str
    usd_per_replica_hour: Decimal
    replicas: ReplicaRange
    monthly_usd: ReplicaRange
    image_encoder: PricedPool | None = None
    """A staged service's image encoder pool (``spec.stages.imageEncoder``), in :attr:`monthly_usd` too."""
    gateway: PricedPool | None = None
    """Its request gateway pods (``spec.gateway``, on demand), in :attr:`monthly_usd` too; None: turned off."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.origin, "gpu": self.gpu, "pricingTier": self.pricing_tier, "scalingMode": self.mode,
            "usdPerReplicaHour": format_usd(self.usd_per_replica_hour), "replicas": _replicas_json(self.replicas),
            "monthly_usd": self.monthly_usd.to_json()}
        if self.image_encoder is not None:
            out["imageEncoderPool"] = {"gpu": self.image_encoder.gpu,
                                       "usdPerReplicaHour": format_usd(self.image_encoder.usd_per_replica_hour),
                                       "replicas": _replicas_json(self.image_encoder.replicas)}
        out["gateway"] = None if self.gateway is None else {
            "pods": int(self.gateway.replicas.max), "usdPerPodHour": format_usd(self.gateway.usd_per_replica_hour),
            "pricingTier": PricingTier.ON_DEMAND.value}
        return out


@dataclass(frozen=True)
class PricedPool:
    """A staged service's image encoder pool: one pod's catalog price and its replicas at min, expected, max."""

    gpu: str
    usd_per_replica_hour: Decimal
    replicas: ReplicaRange


def _replicas_json(r: ReplicaRange) -> dict[str, int | float | None]:
    return {"min": int(r.min), "expected": None if r.expected is None else float(r.expected), "max": int(r.max)}


@dataclass(frozen=True)
class ServiceDiff:
    """One service in BASE, HEAD or both; ``change`` is ``added``, ``removed``, ``changed`` or ``unchanged``."""

    namespace: str
    name: str
    base: PricedService | None
    head: PricedService | None

    @property
    def change(self) -> str:
        if self.base is None:
            return "added"
        if self.head is None:
            return "removed"
        return "unchanged" if self.base.monthly_usd == self.head.monthly_usd else "changed"

    @property
    def monthly_delta_usd(self) -> ReplicaRange:
        return ((self.head.monthly_usd if self.head else ZERO)
                .minus(self.base.monthly_usd if self.base else ZERO))


@dataclass(frozen=True)
class CostDiff:
    """The whole comparison: per-service diffs sorted by (namespace, name), and the total delta."""

    services: tuple[ServiceDiff, ...]
    base_label: str
    head_label: str
    expected_source: str
    skipped: tuple[Skipped, ...] = field(default=())
    """Every document not priced; those that look meant as InferenceServices are :attr:`not_priced`."""
    drivers: Mapping[tuple[str, str], SpendDrivers] = field(default_factory=dict)
    """Per (namespace, name): the top tenants and modalities behind its spend now (only services with figures)."""
    drivers_window: str = ""
    """What :attr:`drivers` cover, e.g. ``showback over the last 1h`` (shown with them)."""

    @property
    def not_priced(self) -> tuple[Skipped, ...]:
        """Skipped documents that look meant as InferenceServices (a typo'd kind or apiVersion), with why."""
        return tuple(s for s in self.skipped if s.why)

    @property
    def total_monthly_delta_usd(self) -> ReplicaRange:
        total = ZERO
        for s in self.services:
            total = total.plus(s.monthly_delta_usd)
        return total

    def to_json(self) -> dict[str, Any]:
        """The ``--format json`` object (``total_monthly_delta_usd``: {min, expected|null, max}; ``services``)."""
        return {
            "base": self.base_label, "head": self.head_label, "currency": "USD",
            "hours_per_month": int(HOURS_PER_MONTH), "expected_replicas": self.expected_source,
            "total_monthly_delta_usd": self.total_monthly_delta_usd.to_json(),
            "services": [{"namespace": s.namespace, "name": s.name, "change": s.change,
                          "base": s.base.to_json() if s.base else None, "head": s.head.to_json() if s.head else None,
                          "monthly_delta_usd": s.monthly_delta_usd.to_json(),
                          **({"spend_drivers": _drivers_json(d, self.drivers_window)}
                             if (d := self.drivers.get((s.namespace, s.name))) is not None else {})}
                         for s in self.services],
            "not_priced": [s.to_json() for s in self.not_priced],
        }


def _drivers_json(d: SpendDrivers, window: str) -> dict[str, Any]:
    def named(pairs: Sequence[tuple[str, Decimal]]) -> list[dict[str, str]]:
        return [{"name": n, "usd": format_usd(u)} for n, u in pairs]

    return {"window": window, "tenants": named(d.tenants), "modalities": named(d.modalities),
            "idle_usd": format_usd(d.idle_usd), "spend_usd": format_usd(d.spend_usd)}


# ------------------------------------------------------------------------------------------------- reading
def _text(data: bytes, origin: str) -> str:
    """A manifest file's bytes as text; raises :class:`CostDiffError` naming ``origin`` when they are not UTF-8 (a
    UTF-16 file, as Windows PowerShell 5 redirects ``helm template`` output, or a binary file)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CostDiffError(f"{origin}: not UTF-8 text; save it as UTF-8 (YAML or JSON manifests)") from None


def _read_file(path: Path) -> ManifestFile:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CostDiffError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return ManifestFile(str(path), _text(data, str(path)))


def _git(args: Sequence[str], cwd: Path, origin: str | None = None) -> str:
    """``git args`` in ``cwd``; its output as text (``origin``: the file it is, for the message when it is not
    UTF-8)."""
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    if proc.returncode != 0:
        raise CostDiffError(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace').strip() or 'failed'}")
    return _text(proc.stdout, origin or f"git {' '.join(args)}")


def _is_git_ref(ref: str, repo: Path) -> bool:
    proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=repo,
                          capture_output=True, text=True, check=False)
    return proc.returncode == 0


def may_hold_isvc(text: str) -> bool:
    """Whether a file can hold an InferenceService or a document that looks meant as one
    (:func:`looks_meant_as_isvc`): one of its ``kind:`` values is within 2 edits of ``InferenceService`` or one of its
    apiVersions is of a modalscale-ish group. A folder or a bare REF reads only those files."""
    if any(k == "InferenceService" or _kind_close(k) for k in _KIND.findall(text)):
        return True
    return any(_group_close(a) for a in _API_VERSION.findall(text))


def _helm_template(parts: Sequence[str], exists: Callable[[str], bool]) -> bool:
    """Whether the file at ``parts`` (its path from the side's root) is in the ``templates/`` folder of a Helm chart
    (a folder with a ``Chart.yaml``)."""
    return any(part == "templates" and exists("/".join([*parts[:i], "Chart.yaml"]))
               for i, part in enumerate(parts[:-1]))


def _keep(origin: str, text: str, template: bool) -> ManifestFile | None:
    """A file of a folder or a bare REF: read when it can hold an InferenceService (:func:`may_hold_isvc`); a Helm
    template that can is listed as not priced, the others are not manifests and skipped."""
    if not may_hold_isvc(text):
        return None
    return ManifestFile(origin, text, HELM_TEMPLATE if template else None)


def read_manifests(source: str, repo: Path = Path.cwd()) -> list[ManifestFile]:
    """The manifest files of one side: a file, a folder, or a git ref (``REF`` or ``REF:PATH``) of ``repo``.

    A file named is read whatever it holds. Of a folder (or a bare REF, or a REF:PATH naming a folder) only the files
    that can hold an InferenceService are read (:func:`may_hold_isvc`: the rest, e.g. Helm templates of a chart's
    ``templates/``, JSON dashboards, are not manifests of one); a Helm template that can is listed as not priced
    (:data:`HELM_TEMPLATE`). Hidden folders of a folder (``.git``, ``.venv``) are not read.

    Raises:
        CostDiffError: Neither a file, a folder nor a git ref; an unreadable file or one that is not UTF-8.
    """
    path = Path(source)
    if path.is_file():
        return [_read_file(path)]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in MANIFEST_SUFFIXES
                       and not any(part.startswith(".") for part in p.relative_to(path).parts[:-1]) and p.is_file())
        out = []
        for p in files:
            f = _read_file(p)
            parts = p.relative_to(path).parts
            kept = _keep(f.origin, f.text, _helm_template(parts, lambda rel: (path / rel).is_file()))
            if kept is not None:
                out.append(kept)
        return out
    ref, _, sub = source.partition(":")
    if not ref or not _is_git_ref(ref, repo):
        raise CostDiffError(f"{source}: not a file, a folder or a git ref of {repo} (use PATH, REF or REF:PATH)")
    # --full-tree: PATH and the names listed are from the top of the tree, as `git show REF:NAME` reads them,
    # whichever folder of the repository ``repo`` is.
    names = [n for n in _git(["ls-tree", "-r", "--full-tree", "--name-only", ref, "--", sub or "."], repo).splitlines()
             if n.endswith(MANIFEST_SUFFIXES)]
    if sub and not names:
        raise CostDiffError(f"{source}: no {', '.join(MANIFEST_SUFFIXES)} file at {sub} in {ref}")
    out = []
    listed = set(names)
    for name in names:
        text = _git(["show", f"{ref}:{name}"], repo, f"{ref}:{name}")
        if names == [sub.rstrip("/")]:  # REF:PATH naming a file: read whatever it holds
            out.append(ManifestFile(f"{ref}:{name}", text))
        elif (kept := _keep(f"{ref}:{name}", text, _helm_template(name.split("/"), listed.__contains__))) is not None:
            out.append(kept)
    return out


def inference_services(files: Iterable[ManifestFile]) -> tuple[list[tuple[str, dict[str, Any]]], list[Skipped]]:
    """Every ``modalscale.io`` InferenceService object in ``files``, with its file; and what was skipped (those that
    look meant as InferenceServices with why, :func:`looks_meant_as_isvc`).

    Raises:
        CostDiffError: A file that does not parse as YAML/JSON, or a service defined twice.
    """
    found: list[tuple[str, dict[str, Any]]] = []
    skipped: list[Skipped] = []
    seen: dict[tuple[str, str], str] = {}
    for f in files:
        if f.not_manifest:
            skipped.append(Skipped(f.origin, "(Helm template)", why=f.not_manifest, content=f.text))
            continue
        try:
            docs = list(yaml.safe_load_all(f.text))
        except yaml.YAMLError as exc:
            raise CostDiffError(f"{f.origin}: not valid YAML: {str(exc).splitlines()[0]}") from None
        stack = [d for d in docs if d is not None]
        while stack:
            doc = stack.pop(0)
            if not isinstance(doc, dict):
                skipped.append(Skipped(f.origin, "a document that is not an object"))
                continue
            kind, api = doc.get("kind"), str(doc.get("apiVersion", ""))
            if kind == "List" and isinstance(doc.get("items"), list):
                stack = list(doc["items"]) + stack
                continue
            if kind != "InferenceService" or not api.startswith(GROUP_PREFIX) or api == GROUP_PREFIX:
                meta = m if isinstance(m := doc.get("metadata"), dict) else {}
                name = str(meta.get("name") or "")
                kind_text = "" if kind is None else str(kind)
                why = looks_meant_as_isvc(kind_text, api)
                shown = (f"{meta.get('namespace') or 'default'}/{name}" if why and name else name)
                skipped.append(Skipped(f.origin, f"{kind_text or '(no kind)'} {shown}".rstrip(), kind_text, api, shown,
                                       why, json.dumps(doc, sort_keys=True, default=str) if why else ""))
                continue
            meta = doc.get("metadata") or {}
            if not meta.get("name"):
                raise CostDiffError(f"{f.origin}: an InferenceService without metadata.name")
            key = (str(meta.get("namespace") or "default"), str(meta["name"]))
            if key in seen:
                raise CostDiffError(f"{f.origin}: InferenceService {key[0]}/{key[1]} is also defined in {seen[key]}")
            seen[key] = f.origin
            found.append((f.origin, doc))
    return found, skipped


# ------------------------------------------------------------------------------------------------- pricing
def price_service(origin: str, body: Mapping[str, Any], catalog: Catalog,
                  expected: ExpectedReplicas | None = None) -> PricedService:
    """Price one InferenceService at min, expected and max replicas.

    Args:
        origin: The file, for messages.
        body: The object (camelCase dict).
        expected: Mean replicas from the simulator, or None (expected unknown unless the mode is Fixed).
    Raises:
        CostDiffError: ``<file>: InferenceService <ns>/<name>: <field>: <why>`` for an invalid spec, quantity
            or an unknown GPU type / pricing tier.
    """
    meta = body.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise CostDiffError(f"{origin}: InferenceService: metadata: must be an object, got {meta!r}")
    where = f"{origin}: InferenceService {meta.get('namespace') or 'default'}/{meta.get('name')}"
    doc = {**body, "metadata": {**meta, "namespace": meta.get("namespace") or "default"}}
    try:
        spec = parse_isvc(doc)
        res = ReplicaResources.from_quantities(spec.resources.cpu, spec.resources.memory, spec.resources.gpu_count,
                                               spec.resources.gpu_type)
    except InvalidSpec as exc:
        raise CostDiffError(f"{where}: {exc}") from None
    except (InvalidQuantity, ValueError) as exc:
        raise CostDiffError(f"{where}: spec.resources: {exc}") from None
    price = _price(where, res, spec.resources, spec.pricing_tier, catalog, "spec.resources")
    sc = spec.scaling
    if sc.mode == "Fixed" and sc.replicas is not None:
        fixed = Decimal(sc.replicas)
        replicas = ReplicaRange(fixed, fixed, fixed)
    else:
        mean = expected(spec) if expected is not None else None
        exp = (None if mean is None else
               min(max(Decimal(str(round(mean, 4))), Decimal(sc.min_replicas)), Decimal(sc.max_replicas)))
        replicas = ReplicaRange(Decimal(sc.min_replicas), exp, Decimal(sc.max_replicas))
    monthly = replicas.times(MONEY_CONTEXT.multiply(price, HOURS_PER_MONTH))
    pool = None
    if spec.stages is not None:  # the encoder pool's pods are charged by the ledger as the replicas are
        enc = spec.stages.image_encoder
        path = "spec.stages.imageEncoder.resources"
        try:
            enc_res = ReplicaResources.from_quantities(enc.resources.cpu, enc.resources.memory,
                                                       enc.resources.gpu_count, enc.resources.gpu_type)
        except (InvalidQuantity, ValueError) as exc:
            raise CostDiffError(f"{where}: {path}: {exc}") from None
        pool_price = _price(where, enc_res, enc.resources, spec.pricing_tier, catalog, path)
        # Fixed mode runs minReplicas; otherwise the pool's own autoscaler sizes it: expected unknown.
        low, high = Decimal(enc.min_replicas), Decimal(enc.max_replicas)
        pool = PricedPool(_gpu(enc.resources), pool_price,
                          ReplicaRange(low, low if sc.mode == "Fixed" else None, high))
        monthly = monthly.plus(pool.replicas.times(MONEY_CONTEXT.multiply(pool_price, HOURS_PER_MONTH)))
    gateway = None
    if spec.gateway.enabled:  # its pods run whatever the replicas, each charged on demand by the ledger
        path = "spec.gateway.resources"
        try:
            gw_res = ReplicaResources.from_quantities(spec.gateway.cpu, spec.gateway.memory)
        except (InvalidQuantity, ValueError) as exc:
            raise CostDiffError(f"{where}: {path}: {exc}") from None
        try:
            gw_price = catalog.price_replica(gw_res, PricingTier.ON_DEMAND)
        except UnknownPrice as exc:  # a catalog without on-demand CPU or memory figures
            raise CostDiffError(f"{where}: {path}: {exc}") from None
        pods = Decimal(spec.gateway.replicas)
        gateway = PricedPool("none", gw_price, ReplicaRange(pods, pods, pods))
        monthly = monthly.plus(gateway.replicas.times(MONEY_CONTEXT.multiply(gw_price, HOURS_PER_MONTH)))
    return PricedService(spec.namespace, spec.name, origin, _gpu(spec.resources), spec.pricing_tier, sc.mode, price,
                         replicas, monthly, pool, gateway)


def _gpu(resources: ResourceSpec) -> str:
    return f"{resources.gpu_count} x {resources.gpu_type}" if resources.gpu_count else "none"


def _price(where: str, res: ReplicaResources, resources: ResourceSpec, tier: str, catalog: Catalog,
           path: str) -> Decimal:
    """One replica's catalog price; raises :class:`CostDiffError` naming ``path``'s GPU type or the tier."""
    try:
        return catalog.price_replica(res, tier)
    except UnknownPrice as exc:
        unknown_type = bool(resources.gpu_count and resources.gpu_type
                            and catalog.gpu_type_name(resources.gpu_type) is None)
        field_ = f"{path}.gpu.type" if unknown_type else "spec.pricing.tier"
        raise CostDiffError(f"{where}: {field_}: {exc}") from None
    except ValueError as exc:
        raise CostDiffError(f"{where}: spec.pricing.tier: {exc}") from None


def price_side(files: Iterable[ManifestFile], catalog: Catalog, expected: ExpectedReplicas | None = None
               ) -> tuple[dict[tuple[str, str], PricedService], list[Skipped]]:
    """Every InferenceService of one side, priced, by (namespace, name); and what was skipped."""
    objects, skipped = inference_services(files)
    priced = {}
    for origin, body in objects:
        p = price_service(origin, body, catalog, expected)
        priced[(p.namespace, p.name)] = p
    return priced, skipped


def changed_not_priced(base: Sequence[Skipped], head: Sequence[Skipped]) -> tuple[Skipped, ...]:
    """The documents not priced (those with ``why``) that are part of the change: on one side and not the same on
    the other (added, removed or edited; compared by what, kind, apiVersion and :attr:`Skipped.content`, not by
    origin, which names the side). Each side's own, in order, BASE's first; a document repeated counts as often
    as it is written."""
    def key(s: Skipped) -> tuple[str, str, str, str]:
        return s.what, s.kind, s.api_version, s.content

    out: list[Skipped] = []
    for mine, other in ((base, head), (head, base)):
        left = Counter(key(s) for s in other if s.why)
        for s in mine:
            if not s.why:
                continue
            if left[key(s)] > 0:
                left[key(s)] -= 1
            else:
                out.append(s)
    return tuple(out)


def diff(base: Mapping[tuple[str, str], PricedService], head: Mapping[tuple[str, str], PricedService],
         base_label: str = "BASE", head_label: str = "HEAD", expected_source: str = "unknown",
         skipped: Sequence[Skipped] = ()) -> CostDiff:
    """Pair the services of both sides by namespace/name (pure)."""
    keys = sorted(set(base) | set(head))
    return CostDiff(tuple(ServiceDiff(k[0], k[1], base.get(k), head.get(k)) for k in keys), base_label, head_label,
                    expected_source, tuple(skipped))


def simulator_expected(trace_path: Path, profile_path: Path, seed: int = 0) -> ExpectedReplicas:
    """Expected replicas of a service: the simulator's ``predictive`` policy replaying the trace.

    The model is the profiled regressor (``modalscale profile`` artifact); the policy runs with the service's
    ``minReplicas``/``maxReplicas``, ``targetP95LatencyMilliseconds``, ``targetUtilizationPercent``,
    ``scaleDownStabilizationSeconds`` and ``maxStepReplicas`` (each as parsed: unset, its mode's default). Results
    are cached per distinct setting.

    Raises:
        CostDiffError: The trace or the profile cannot be read (the message starts with the flag).
    """
    from modalscale.autoscaler.regressor import ArtifactError, load_model
    from modalscale.autoscaler.simulate import SimulationConfig, run_simulation
    from modalscale.autoscaler.simulate_cli import load_trace
    from modalscale.cli import UsageError, first_line

    try:
        trace = load_trace(trace_path, seed=seed)
    except UsageError as exc:  # names --trace and the fix
        raise CostDiffError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise CostDiffError(f"--trace: {exc}") from None
    if not profile_path.is_file():
        raise CostDiffError(f"--profile: {profile_path}: no such file; give the model artifact `modalscale profile` "
                            "wrote")
    try:
        model = load_model(profile_path)
    except (ArtifactError, OSError, ValueError) as exc:
        raise CostDiffError(f"--profile: {profile_path}: {first_line(exc)}") from None
    cache: dict[tuple[int, ...], float] = {}

    def mean_replicas(spec: IsvcSpec) -> float:
        sc = spec.scaling
        key = (sc.min_replicas, sc.max_replicas, sc.target_p95_latency_ms, sc.target_utilization_percent,
               sc.scale_down_stabilization_s, sc.max_step_replicas)
        if key not in cache:
            config = SimulationConfig(target_p95_ms=float(sc.target_p95_latency_ms),
                                      min_replicas=max(1, sc.min_replicas),
                                      max_replicas=sc.max_replicas, policies=("predictive",), random_state=seed,
                                      predictive_target_utilization_percent=float(sc.target_utilization_percent),
                                      predictive_scale_down_stabilization_s=float(sc.scale_down_stabilization_s),
                                      max_step_replicas=sc.max_step_replicas)
            cache[key] = float(run_simulation(trace, config, model)["predictive"]["mean_replicas"])
        return cache[key]

    return mean_replicas


# ------------------------------------------------------------------------------------------------- output
def _money(v: Decimal | None) -> str:
    return "unknown" if v is None else display_usd(v)


def _signed(v: Decimal | None) -> str:
    if v is None:
        return "unknown"
    text = display_usd(v)
    return text if v < 0 else f"+{text}"


def render(result: CostDiff, fmt: str) -> str:
    """``table`` (plain text), ``markdown`` (a pull-request comment) or ``json``."""
    if fmt == "json":
        return json.dumps(result.to_json(), indent=2)
    total = result.total_monthly_delta_usd
    header = ["Service", "Change", "Replicas min/exp/max", "BASE USD/month min/exp/max",
              "HEAD USD/month min/exp/max", "Delta USD/month min/exp/max"]
    rows = []
    for s in result.services:
        side = s.head or s.base
        assert side is not None
        r = side.replicas

        def triple(p: PricedService | None) -> str:
            if p is None:
                return "-"
            m = p.monthly_usd
            return f"{_money(m.min)} / {_money(m.expected)} / {_money(m.max)}"

        d = s.monthly_delta_usd
        exp = "?" if r.expected is None else f"{r.expected.normalize():f}"
        rows.append([f"{s.namespace}/{s.name}", s.change, f"{r.min}/{exp}/{r.max}", triple(s.base), triple(s.head),
                     f"{_signed(d.min)} / {_signed(d.expected)} / {_signed(d.max)}"])
    rows.append(["Total", "", "", "", "", f"{_signed(total.min)} / {_signed(total.expected)} / {_signed(total.max)}"])
    note = (f"Monthly = replicas x catalog USD per replica-hour x {HOURS_PER_MONTH} h/month, plus the request "
            f"gateway's pods (on demand) and any image encoder pool; expected replicas: {result.expected_source}.")
    unpriced = [f"{s.origin}: {s.what}: {s.why}" for s in result.not_priced]
    who = [f"{s.namespace}/{s.name}: " + "; ".join(f"{k.lower()} {v}" for k, v in sd.facts())
           for s in result.services if (sd := result.drivers.get((s.namespace, s.name))) is not None]
    if fmt == "markdown":
        lines = [f"### modalscale cost diff: `{result.base_label}` -> `{result.head_label}`", "",
                 "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        if who:
            lines += ["", f"Who spends on them now ({result.drivers_window}):", *(f"- {w}" for w in who)]
        if unpriced:
            lines += ["", f"Not priced (look like InferenceServices, {len(unpriced)}):", *(f"- {u}" for u in unpriced)]
        return "\n".join(lines + ["", note])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    if who:
        lines += [f"Who spends on them now ({result.drivers_window}):", *(f"  {w}" for w in who)]
    if unpriced:
        lines += [f"Not priced (look like InferenceServices, {len(unpriced)}):", *(f"  {u}" for u in unpriced)]
    return "\n".join([f"modalscale cost diff: {result.base_label} -> {result.head_label}", *lines, note])


def with_drivers(result: CostDiff, windows: Mapping[tuple[str, str], ServiceWindow],
                 usage: Mapping[tuple[str, str], Sequence[TenantUsage]], window: str) -> CostDiff:
    """``result`` with the top tenants and modalities of each of its services from showback's inputs (what
    ``modalscale.operator.showback.PrometheusShowback.read`` returns); a service without a request in them gets
    none (nothing said about its tenants)."""
    drivers = {}
    for s in result.services:
        d = drivers_of([(s.namespace, s.name)], windows, usage)
        if d is not None:
            drivers[(s.namespace, s.name)] = d
    return replace(result, drivers=drivers, drivers_window=window)


__all__ = ["CostDiff", "CostDiffError", "HOURS_PER_MONTH", "ManifestFile", "NOT_PRICED_FIX", "PricedService",
           "ReplicaRange", "ServiceDiff", "Skipped", "diff", "inference_services", "looks_meant_as_isvc",
           "may_hold_isvc", "price_service", "price_side",
           "read_manifests", "render", "simulator_expected", "with_drivers"]
