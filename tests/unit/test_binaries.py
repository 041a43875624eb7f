"""The wrapper go.mod that builds k8s.io/kubernetes from the Go module proxy."""

from __future__ import annotations

import pytest

from modalscale.devenv.binaries import kubernetes_wrapper_gomod

UPSTREAM = """module k8s.io/kubernetes

go 1.24.0

godebug default=go1.24

require (
\tk8s.io/api v0.0.0
\tk8s.io/apiserver v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/apiserver => ./staging/src/k8s.io/apiserver
)
"""


def test_staging_modules_are_pinned_to_the_matching_v0_tag() -> None:
    text = kubernetes_wrapper_gomod("v1.35.4", UPSTREAM)
    assert "\tk8s.io/api => k8s.io/api v0.35.4" in text
    assert "\tk8s.io/apiserver => k8s.io/apiserver v0.35.4" in text
    assert "require k8s.io/kubernetes v1.35.4" in text
    assert "go 1.24.0" in text and "godebug default=go1.24" in text


@pytest.mark.parametrize("bad", ["1.35.4", "v2.0.0", "v1.35", "latest"])
def test_version_must_be_a_v1_release_tag(bad: str) -> None:
    with pytest.raises(ValueError, match="v1.35.4"):
        kubernetes_wrapper_gomod(bad, UPSTREAM)


def test_upstream_without_staging_modules_is_refused() -> None:
    with pytest.raises(ValueError, match="staging"):
        kubernetes_wrapper_gomod("v1.35.4", "module k8s.io/kubernetes\n\ngo 1.24\n")


def test_wrapper_tools_go_imports_the_control_plane_and_the_node_commands() -> None:
    from modalscale.devenv.binaries import K8S_COMMANDS, NODE_COMMANDS, kubernetes_tools_go

    text = kubernetes_tools_go()
    assert text.startswith("//go:build tools\n")
    assert NODE_COMMANDS == ("kubelet", "kube-proxy")
    for cmd in K8S_COMMANDS + NODE_COMMANDS:
        assert f'\t_ "k8s.io/kubernetes/cmd/{cmd}"\n' in text
    assert not set(K8S_COMMANDS) & set(NODE_COMMANDS)


PROM_UPSTREAM = """module github.com/prometheus/prometheus

go 1.25.8

require k8s.io/client-go v0.35.3

replace cloud.google.com/go => cloud.google.com/go v0.123.0

replace (
\tk8s.io/klog => github.com/simonpasquier/klog-gokit v0.3.0
)
"""


def test_prometheus_wrapper_requires_the_pin_and_copies_every_replace() -> None:
    from modalscale.devenv.binaries import PROMETHEUS_VERSION, prometheus_wrapper_gomod

    text = prometheus_wrapper_gomod(PROMETHEUS_VERSION, PROM_UPSTREAM)
    assert f"require github.com/prometheus/prometheus {PROMETHEUS_VERSION}" in text
    assert "go 1.25.8" in text
    assert "replace cloud.google.com/go => cloud.google.com/go v0.123.0" in text
    assert "replace k8s.io/klog => github.com/simonpasquier/klog-gokit v0.3.0" in text
    with pytest.raises(ValueError, match="v0.314.0"):
        prometheus_wrapper_gomod("v3.14.0", PROM_UPSTREAM)
