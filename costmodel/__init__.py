"""Cost model: pricing catalog, spend ledger, budget periods and evaluation, the alert outbox (pure).

Nothing here does I/O or reads the clock. A BudgetPolicy handler is meant to be this thin::

    spec = parse_budget_spec(body["spec"])                       # modalscale.api.budgetpolicy.InvalidBudgetSpec
    services = [service_state(ns, name, replicas=..., max_replicas=..., resources=..., tier=...,
                              catalog=catalog, priority=...) for each selected InferenceService]
    result = advance(Ledger.from_status(status.get("ledger"), status.get("periodStart")),
                     [s.observation() for s in services], now, spec.period, spec.time_zone)
    plan = plan_budget(spec, result, services, AlertState.from_status(status), now,
                       policy=PolicyRef(namespace, name))
    patch.status.update(plan.status_fields(result.ledger))
    # apply plan.actions whose .applied; send each of plan.alerts with modalscale.notify.sender.Sender

Modules: ``catalog`` (prices), ``quantities`` (Kubernetes quantities), ``money`` (Decimal rounding rule),
``periods`` (Daily/Weekly/Monthly in an IANA zone), ``ledger`` (spend integration, status round trip),
``budget`` (the planner; the spec it reads is ``modalscale.api.budgetpolicy``), ``evaluation`` (ledger -> planner
-> rates in force), ``outbox`` (alerts pending delivery, at least once), ``anomaly`` (spend anomalies),
``opencost`` (OpenCost prices), ``focus`` (FOCUS CSV). Chat payloads, signatures and the HTTP sender are
``modalscale.notify``'s: a platform is not a cost.
"""
