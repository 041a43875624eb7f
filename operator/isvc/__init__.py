"""InferenceService: typed spec (``modalscale.api.inferenceservice``) → ``observe`` (reads) → ``plan`` (pure) →
``reconcile`` (read, plan, apply through ``apply.Writer``); ``objects`` renders the children (Deployment, Service,
model-repository ConfigMap)."""
