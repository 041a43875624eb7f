#!/usr/bin/env python3
"""Write ``docs/crd-reference.md`` from the CRDs in ``crds/`` (their ``openAPIV3Schema`` is the single source).

For every CRD file (``crds/*.yaml``, kopf's peering CRDs included) it writes the names (kind, group, version,
short names, categories, scope), the subresources, the printer columns, one table row per schema field (path,
type, required, bounds / enum / pattern / list keys, default, description) for ``spec`` and ``status``, and the
CEL rules (``x-kubernetes-validations``) with their messages. Descriptions come from the schema verbatim, so the
reference says what ``kubectl explain`` says. ``tests/unit/test_crd_reference.py`` fails when the committed file
differs from what this script writes.

Usage::

    python scripts/gen-crd-reference.py          # rewrite docs/crd-reference.md
    python scripts/gen-crd-reference.py --check  # exit 1 when it is out of date, write nothing
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "crds"
TARGET = REPO / "docs" / "crd-reference.md"
COMMAND = "python scripts/gen-crd-reference.py"

HEADER = f"""# CRD reference

Generated from `crds/*.yaml` by `{COMMAND}`; do not edit by hand. Each description is the
schema's own, so this is what `kubectl explain <plural>.<field path>` prints. `tests/unit/test_crd_reference.py`
fails when this file differs from what the script writes. How the operator acts on these fields:
[autoscaler.md](autoscaler.md) (InferenceService) and [budgets.md](budgets.md) (BudgetPolicy); installing the
CRDs: [operations.md](operations.md#crds).

Paths write a list's items as `[]` and a map's values as `{{}}`. Bounds are the schema's: `a–b` for numbers,
`len a–b` for strings, `items a–b` for lists, `keys ≤ n` for maps.
"""

_ORDER = ("inferenceservices.modalscale.io.yaml", "budgetpolicies.modalscale.io.yaml")
"""modalscale's own kinds first, in this order; the rest (kopf's peering CRDs) follow by file name."""


def _cell(text: str) -> str:
    """One Markdown table cell: no line breaks, ``|`` escaped (also inside code spans, as GitHub requires)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "), ensure_ascii=False)
    return f"`{text}`"


def _type(schema: dict[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "integer or string"
    kind = str(schema.get("type", "any"))
    if schema.get("format"):
        kind += f" ({schema['format']})"
    if kind == "array":
        items = schema.get("items") or {}
        return f"array of {_type(items)}"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return f"map of string to {_type(extra)}"
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return "object (free-form)"
    return kind


def _bounds(schema: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if "enum" in schema:
        out.append(" | ".join(_code(v) for v in schema["enum"]))
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo is not None or hi is not None:
        out.append(f"≥ {lo}" if hi is None else f"≤ {hi}" if lo is None else f"{lo}–{hi}")
    lo, hi = schema.get("minLength"), schema.get("maxLength")
    if lo is not None or hi is not None:
        out.append(f"len {lo if lo is not None else 0}–{hi if hi is not None else '∞'}")
    if "pattern" in schema:
        out.append(f"pattern {_code(schema['pattern'])}")
    lo, hi = schema.get("minItems"), schema.get("maxItems")
    if lo is not None or hi is not None:
        out.append(f"items {lo if lo is not None else 0}–{hi if hi is not None else '∞'}")
    if "maxProperties" in schema:
        out.append(f"keys ≤ {schema['maxProperties']}")
    if schema.get("x-kubernetes-list-type"):
        keys = schema.get("x-kubernetes-list-map-keys")
        out.append(f"list-type {schema['x-kubernetes-list-type']}"
                   + (f" keyed by {', '.join(_code(k) for k in keys)}" if keys else ""))
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict) \
            and not (schema["items"].get("properties")):
        inner = _bounds(schema["items"])
        if inner:
            out.append("each: " + "; ".join(inner))
    if isinstance(schema.get("additionalProperties"), dict):
        inner = _bounds(schema["additionalProperties"])
        if inner:
            out.append("values: " + "; ".join(inner))
    return out


def _fields(schema: dict[str, Any], path: str, required: bool) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(path, schema, required) of ``schema`` and every field below it, depth first in schema order."""
    yield path, schema, required
    inner, child = schema, path
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        inner, child = schema["items"], path + "[]"
    elif isinstance(schema.get("additionalProperties"), dict) and schema["additionalProperties"].get("properties"):
        inner, child = schema["additionalProperties"], path + "{}"
    needed = set(inner.get("required") or ())
    for name, sub in (inner.get("properties") or {}).items():
        yield from _fields(sub, f"{child}.{name}", name in needed)


def _rules(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, rule) of every CEL rule on ``schema`` and below it; an item's rules carry the list's ``[]``."""
    for rule in schema.get("x-kubernetes-validations") or ():
        yield path, rule
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        yield from _rules(schema["items"], path + "[]")
    for name, sub in (schema.get("properties") or {}).items():
        yield from _rules(sub, f"{path}.{name}" if path else name)


def _table(schema: dict[str, Any], root: str, required: bool) -> list[str]:
    lines = ["| Field | Type | Required | Bounds | Default | Description |", "|---|---|---|---|---|---|"]
    for path, sub, req in _fields(schema, root, required):
        default = _code(sub["default"]) if "default" in sub else ""
        lines.append("| " + " | ".join([
            f"`{path}`", _cell(_type(sub)), "yes" if req else "", _cell("; ".join(_bounds(sub))), _cell(default),
            _cell(sub.get("description", "")),
        ]) + " |")
    return lines


def _crd_section(crd: dict[str, Any]) -> list[str]:
    names, spec = crd["spec"]["names"], crd["spec"]
    out: list[str] = []
    for version in spec["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        out += [f"## {names['kind']} (`{crd['metadata']['name']}/{version['name']}`)", ""]
        facts = [f"Scope: {spec['scope']}", f"plural `{names['plural']}`"]
        if names.get("shortNames"):
            facts.append("short name " + ", ".join(f"`{s}`" for s in names["shortNames"]))
        if names.get("categories"):
            facts.append("categories " + ", ".join(f"`{c}`" for c in names["categories"]))
        subresources = version.get("subresources") or {}
        if subresources:
            parts = []
            for name, value in subresources.items():
                detail = ", ".join(f"{k} `{v}`" for k, v in (value or {}).items())
                parts.append(f"`{name}`" + (f" ({detail})" if detail else ""))
            facts.append("subresources " + ", ".join(parts))
        out += ["; ".join(facts) + ".", ""]
        if schema.get("description"):
            out += [" ".join(schema["description"].split()), ""]
        columns = version.get("additionalPrinterColumns") or []
        if columns:
            out += ["Printer columns (`kubectl get`):", "", "| Column | Type | JSONPath | Description |",
                    "|---|---|---|---|"]
            out += [f"| {_cell(c['name'])} | {c['type']} | {_cell(_code(c['jsonPath']))} | "
                    f"{_cell(c.get('description', ''))} |" for c in columns]
            out.append("")
        props = schema.get("properties") or {}
        needed = set(schema.get("required") or ())
        for part in ("spec", "status"):
            if part in props:
                out += [f"### {part}", ""] + _table(props[part], part, part in needed) + [""]
        rules = list(_rules(schema, ""))
        if rules:
            out += ["### Validation rules (CEL)", "", "| On | Rule | Message |", "|---|---|---|"]
            for path, rule in rules:
                where = f"`{path}`" if path else "the object"
                if rule.get("optionalOldSelf"):
                    where += " (on create: `optionalOldSelf`)"
                if rule.get("fieldPath"):
                    where += f" (field `{rule['fieldPath']}`)"
                out.append(f"| {_cell(where)} | "
                           f"{_cell(_code(' '.join(rule['rule'].split())))} | {_cell(rule.get('message', ''))} |")
            out.append("")
    return out


def crd_files(source: Path = SOURCE) -> list[Path]:
    """The CRD files of ``source`` in the reference's order: modalscale's kinds first, then by name."""
    files = sorted(source.glob("*.yaml"))
    return sorted(files, key=lambda p: (_ORDER.index(p.name) if p.name in _ORDER else len(_ORDER), p.name))


def render(source: Path = SOURCE) -> str:
    """The whole reference as Markdown text (ends with one newline).

    Raises ``KeyError`` naming the missing key when a CRD lacks ``spec.names``, ``spec.versions`` or a version's
    ``schema.openAPIV3Schema``.
    """
    lines = HEADER.rstrip("\n").split("\n") + [""]
    for path in crd_files(source):
        for crd in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                lines += _crd_section(crd)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date; write nothing")
    args = parser.parse_args(argv)
    text = render()
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else None
    if args.check:
        if current != text:
            print(f"{TARGET.relative_to(REPO)} is out of date; run: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        TARGET.write_text(text, encoding="utf-8")
        print(f"wrote {TARGET.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
