"""Autoscaler: ``observe`` (Prometheus and the cluster) → ``plan`` (pure: ``modalscale.autoscaler`` recommend, state
codec) → ``handlers`` (the daemon; hands its decision to ``isvc.reconcile.scale_isvc``); ``model`` loads the
service-time model, ``metrics`` exports the autoscaler's own metrics."""
