"""BudgetPolicy governance: ``observe`` (reads: policies, services, pods, prices, Secrets) → ``plan`` (pure, calls
``modalscale.costmodel.budget``) → ``handlers`` (the daemon that reads, plans and applies); ``history`` reads the
spend-anomaly history back from Prometheus."""
