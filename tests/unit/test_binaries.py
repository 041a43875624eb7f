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


HELM_GOMOD = """module helm.sh/helm/v3

go 1.24.0

require (
\tgithub.com/Masterminds/semver/v3 v3.4.0
\tk8s.io/api v0.34.2
\tk8s.io/client-go v0.34.2
)
"""


def test_helm_is_built_with_its_release_ldflags_so_template_assumes_its_kubernetes_minor() -> None:
    """As helm's Makefile: version, tree state, and the default Kubernetes 1.<client-go minor> (else v1.20.0)."""
    from modalscale.devenv.binaries import helm_ldflags

    flags = helm_ldflags("v3.19.5", HELM_GOMOD).split(" -X ")
    assert flags[0] == "-s -w"
    assert set(flags[1:]) == {
        "helm.sh/helm/v3/internal/version.version=v3.19.5",
        "helm.sh/helm/v3/internal/version.gitTreeState=clean",
        "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1",
        "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=34",
        "helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1",
        "helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=34",
    }


@pytest.mark.parametrize(("version", "gomod", "says"), [
    ("3.19.5", HELM_GOMOD, "v3.19.5"), ("v4.0.0", HELM_GOMOD, "v3.19.5"),
    ("v3.19.5", "module helm.sh/helm/v3\n\ngo 1.24\n", "client-go"),
], ids=["no-v", "major-4", "no-client-go"])
def test_helm_ldflags_refuse_what_they_cannot_stamp(version: str, gomod: str, says: str) -> None:
    from modalscale.devenv.binaries import helm_ldflags

    with pytest.raises(ValueError, match=says):
        helm_ldflags(version, gomod)


def test_a_helm_built_by_an_older_recipe_is_not_reused() -> None:
    """The cache folder carries HELM_BUILD: the v3.19.5 cached without ldflags (helm-v3.19.5/) is rebuilt."""
    from modalscale.devenv.binaries import HELM_BUILD, HELM_VERSION, tool_dirs

    assert HELM_BUILD and tool_dirs()[1].name == f"helm-{HELM_VERSION}-{HELM_BUILD}" != f"helm-{HELM_VERSION}"


def test_heartbeat_says_a_long_build_is_still_running_and_stops_with_it() -> None:
    """A cold Kubernetes build is 8-13 silent minutes; the heartbeat logs progress and nothing after the block."""
    import time

    from modalscale.devenv.binaries import heartbeat

    lines: list[str] = []
    with heartbeat("building kubernetes v1.35.4", lines.append, every_s=0.05):
        time.sleep(0.28)
    seen = len(lines)
    time.sleep(0.2)
    assert 3 <= seen <= 6, lines
    assert len(lines) == seen, "the heartbeat kept logging after the build ended"
    assert all(line.startswith("... still building kubernetes v1.35.4 (") for line in lines), lines


def test_a_failed_build_command_is_named_in_the_error_not_echoed_before(tmp_path) -> None:
    from modalscale.devenv.binaries import BuildError, _run

    lines: list[str] = []
    with pytest.raises(BuildError) as err:
        _run(["sh", "-c", "echo compiling; exit 3"], tmp_path, lines.append)
    assert "exit code 3" in str(err.value) and "sh -c" in str(err.value) and "compiling" in str(err.value)
    assert lines == []
