"""Cost model: pricing catalog, spend ledger, budget periods and evaluation, the alert outbox (pure).

Nothing here does I/O or reads the clock. A BudgetPolicy handler is meant to be this thin::

    spec = parse_budget_spec(body["spec"])                       # modalscale.api.budgetpolicy.InvalidBudgetSpec
    services = [service_state(ns, name, replicas=..., max_replicas=..., resources=..., tier=...,
                              catalog=catalog, priority=...) for each selected InferenceService]
    stored = read_budget_status(body, PolicyRef(namespace, name))   # budget.status: the one read (and write)
    result = advance(stored.ledger, [s.observation() for s in services], now, spec.period, spec.time_zone)
    plan = plan_budget(spec, result, services, stored.alert_state, now, policy=PolicyRef(namespace, name))
    patch.status.update(write_budget_status(status_of_plan(plan, result.ledger, ...), body))
    # apply plan.actions whose .applied; send each of plan.alerts with modalscale.notify.sender.Sender

Modules: ``catalog`` (prices), ``quantities`` (Kubernetes quantities), ``money`` (Decimal rounding rule),
``periods`` (Daily/Weekly/Monthly in an IANA zone), ``ledger`` (spend integration),
``budget`` (the planner; the spec it reads is ``modalscale.api.budgetpolicy``; ``budget.status`` is the
BudgetPolicy status, its one read and one write), ``evaluation`` (ledger -> planner
-> rates in force), ``outbox`` (alerts pending delivery, at least once), ``anomaly`` (spend anomalies),
``opencost`` (OpenCost prices), ``focus`` (FOCUS CSV). Chat payloads, signatures and the HTTP sender are
``modalscale.notify``'s: a platform is not a cost.
"""
