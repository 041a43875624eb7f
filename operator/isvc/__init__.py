"""InferenceService: ``spec`` (typed spec, from ``modalscale.api``) → ``observe`` (reads) → ``plan`` (pure) →
``reconcile`` (read, plan, apply through ``apply.Writer``); ``objects`` renders the children (Deployment, Service,
model-repository ConfigMap)."""
