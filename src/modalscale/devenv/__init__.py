"""Local development environment: the real control plane (etcd, kube-apiserver, controller-manager, scheduler,
KWOK) built from Go modules and cached, and local chat-webhook receivers. Used by ``modalscale cluster``,
the demo and the integration tests."""
