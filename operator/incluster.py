"""Log in from inside a pod the way client-go's ``rest.InClusterConfig`` does, without cluster DNS.

kopf's own ``login_with_service_account`` always connects to ``https://kubernetes.default.svc``, a name only
cluster DNS resolves. The kubelet gives every container ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``
(the ``kubernetes`` Service's ClusterIP and port), which client-go, client-python and kubectl use instead; so
does this, and a cluster without DNS (the local control plane with its real node) works too.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where the ServiceAccount token, CA and namespace are mounted in a pod."""
SERVICE_ACCOUNT_PRIORITY = 20
"""Priority kopf gives its own service-account login (kopf._core.intents.piggybacking)."""


def in_cluster_server(environ: Mapping[str, str]) -> str | None:
    """The apiserver URL from the kubelet's service variables (``https://10.0.0.1:443``), None outside a pod.

    An IPv6 host is bracketed, as client-go does.
    """
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return None
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # a name: used as is
    return f"https://{host}:{port}"


def login_in_pod(*, settings: kopf.OperatorSettings, directory: Path = SERVICE_ACCOUNT_DIR,
                 environ: Mapping[str, str] | None = None, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf login handler: the mounted ServiceAccount token against the service-variable URL.

    Returns:
        None outside a pod (no token), so the next handler (kubeconfig) is tried; kopf's own service-account
        login (``kubernetes.default.svc``) when the service variables are missing.
    """
    token_path = directory / "token"
    server = in_cluster_server(os.environ if environ is None else environ)
    if not token_path.exists() or server is None:
        return kopf.login_with_service_account(settings=settings, **kwargs)
    ca_path = directory / "ca.crt"
    namespace_path = directory / "namespace"
    return kopf.ConnectionInfo(
        server=server,
        ca_path=str(ca_path) if ca_path.exists() else None,
        token=token_path.read_text(encoding="utf-8").strip() or None,
        default_namespace=(namespace_path.read_text(encoding="utf-8").strip() or None)
        if namespace_path.exists() else None,
        trust_env=settings.networking.trust_env,
        priority=SERVICE_ACCOUNT_PRIORITY,
    )
