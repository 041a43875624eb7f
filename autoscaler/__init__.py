"""Autoscaler: a learned per-request service-time model and a queueing-aware replica policy (pure; no Kubernetes)."""
