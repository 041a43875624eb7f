"""Cost model: pricing catalog, spend ledger, budget periods and evaluation, notification payloads (pure)."""
