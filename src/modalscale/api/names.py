"""The name rules of Kubernetes objects the project is given, in one place.

Why a module: the operator's settings, the CRDs, the chart schema and the spec parsers each checked an object name
with a pattern of their own, and they drifted (the chart took ``a..b``, a name Kubernetes refuses, and the operator
then refused it at start-up). Each of them uses these constants; ``tests/unit/test_dns_subdomain.py`` holds the CRDs
and the chart schema to them. The patterns are RE2- and ECMA-compatible (no look-around), as the API server and
helm's JSON Schema read them; the length bounds go beside them as ``maxLength``.
"""

from __future__ import annotations

import re

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""A DNS-1123 label (namespaces, ``notifications[].name``), as the CRD says; at most 63 characters."""
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A DNS-1123 subdomain, the name of most objects (a Secret, ConfigMap, PVC, ServiceAccount): dot-separated DNS-1123
labels (``IsDNS1123Subdomain`` of k8s.io/apimachinery; ``a..b`` and ``a.-b`` are refused); at most
:data:`DNS_SUBDOMAIN_MAX_CHARS` characters."""
DNS_SUBDOMAIN_MAX_CHARS = 253
"""Longest DNS-1123 subdomain, characters."""
_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)


def is_dns_subdomain(name: str) -> bool:
    """Whether ``name`` is a DNS-1123 subdomain Kubernetes takes as an object name (pattern and length)."""
    return len(name) <= DNS_SUBDOMAIN_MAX_CHARS and _DNS_SUBDOMAIN.fullmatch(name) is not None


DNS_LABEL_MAX_CHARS = 63
"""Longest DNS-1123 label (a namespace name), characters."""
_DNS_LABEL = re.compile(DNS_LABEL_PATTERN)


def is_dns_label(name: str) -> bool:
    """Whether ``name`` is a DNS-1123 label Kubernetes takes as a namespace name (pattern and length)."""
    return len(name) <= DNS_LABEL_MAX_CHARS and _DNS_LABEL.fullmatch(name) is not None


_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
"""A label key's name part or a non-empty label value: at most 63 characters, alphanumerics with ``-``, ``_`` and
``.`` inside (``IsQualifiedName`` / ``IsValidLabelValue`` of k8s.io/apimachinery); the bound is in the pattern."""
LABEL_KEY_PATTERN = f"^({DNS_SUBDOMAIN_PATTERN[1:-1]}/)?{_LABEL_NAME}$"
"""A label key: an optional DNS-1123 subdomain prefix (at most :data:`DNS_SUBDOMAIN_MAX_CHARS` characters, a bound
the pattern does not hold) and ``/``, then a name of at most 63 characters (``app.kubernetes.io/name``)."""
LABEL_VALUE_PATTERN = f"^({_LABEL_NAME})?$"
"""A label value: empty, or at most 63 alphanumerics with ``-``, ``_`` and ``.`` inside."""
LABEL_SYNTAX = ("a label key is an optional DNS subdomain prefix and '/' then a name, a value empty or a name; a name "
                "is at most 63 characters, letters, digits, '-', '_' and '.', starting and ending with a letter or "
                "digit")
"""The label syntax in words, for error messages."""
_LABEL_KEY, _LABEL_VALUE = re.compile(LABEL_KEY_PATTERN), re.compile(LABEL_VALUE_PATTERN)


def is_label_key(key: str) -> bool:
    """Whether Kubernetes takes ``key`` as a label key (``IsQualifiedName``), the prefix's length included."""
    prefix, _, _ = key.rpartition("/")
    return len(prefix) <= DNS_SUBDOMAIN_MAX_CHARS and _LABEL_KEY.fullmatch(key) is not None


def is_label_value(value: str) -> bool:
    """Whether Kubernetes takes ``value`` as a label value (``IsValidLabelValue``)."""
    return _LABEL_VALUE.fullmatch(value) is not None
