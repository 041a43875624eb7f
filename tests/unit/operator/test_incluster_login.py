"""The operator's in-pod login: the ServiceAccount token against the kubelet's service variables (no DNS)."""

from __future__ import annotations

from pathlib import Path

import kopf
import pytest

from modalscale.operator.incluster import in_cluster_server, login_in_pod


@pytest.mark.parametrize(("environ", "server"), [
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, "https://10.0.0.1:443"),
    ({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}, "https://[fd00::1]:6443"),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, None),
    ({}, None),
], ids=["ipv4", "ipv6-bracketed", "no-port", "outside-a-pod"])
def test_server_comes_from_the_service_variables(environ: dict[str, str], server: str | None) -> None:
    assert in_cluster_server(environ) == server


def test_login_uses_the_mounted_token_ca_and_namespace_against_the_service_ip(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("tok\n")
    (tmp_path / "ca.crt").write_text("ca")
    (tmp_path / "namespace").write_text("ops\n")
    info = login_in_pod(settings=kopf.OperatorSettings(), directory=tmp_path,
                        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    assert info is not None
    assert (info.server, info.token, info.ca_path, info.default_namespace) == (
        "https://10.0.0.1:443", "tok", str(tmp_path / "ca.crt"), "ops")


def test_no_token_means_not_in_a_pod(tmp_path: Path) -> None:
    info = login_in_pod(settings=kopf.OperatorSettings(), directory=tmp_path,
                        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    assert info is None  # the real /var/run/secrets/... does not exist here either: kopf's fallback says None
