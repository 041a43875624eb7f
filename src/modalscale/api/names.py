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
