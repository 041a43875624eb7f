"""Benchmark (not a test): one simulated month of budget governance, evaluated every 60 s.

Three InferenceServices follow a synthetic diurnal replica trajectory (an autoscaler decides every 15 s, so
replicas change between budget evaluations). The BudgetPolicy is Monthly in Europe/Berlin (March 2026: 31 days
minus the DST hour) with thresholds 50 % Alert, 80 % CapReplicas 2, 100 % ScaleDown (floor 1) and
105 % ScaleToZero. Every evaluation goes through the real pure API: ``ledger.advance`` -> ``plan_budget``; the
status (ledger + alert state) is round-tripped through JSON every evaluation, as after an operator restart.

Printed, side by side with the ungoverned baseline run (same trajectory, no enforcement):

* spend at month end and overspend past the limit as % of the limit;
* time from each enforcing threshold's true crossing (from the 15 s ground truth) to the evaluation that
  planned its action;
* ledger spend vs ground truth (replica-seconds x price at 15 s resolution), which must agree within +/-1 %;
* alerts sent per kind (each threshold exactly once);
* wall time per evaluation.

Run: ``.venv/bin/python benchmarks/budget_month.py``
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

from modalscale.costmodel.budget import (
    AlertKind,
    AlertState,
    PolicyRef,
    ServiceState,
    ThresholdAction,
    parse_budget_spec,
    plan_budget,
)
from modalscale.costmodel.catalog import ReplicaResources, default_catalog
from modalscale.costmodel.ledger import Ledger, advance, format_time
from modalscale.costmodel.periods import period_bounds

TZ = "Europe/Berlin"
STEP_S = 15           # autoscaler decision interval (replicas change on this grid)
EVAL_S = 60           # budget evaluation interval
SEED = 20260301


@dataclass(frozen=True)
class Svc:
    name: str
    resources: ReplicaResources
    priority: int
    max_replicas: int
    peak_demand: float  # replicas wanted at the daily peak


SERVICES = (
    Svc("captioner", ReplicaResources.from_quantities("4", "16Gi", 1, "nvidia-l4"), 50, 8, 6.0),
    Svc("ranker", ReplicaResources.from_quantities("12", "85Gi", 1, "nvidia-a100-40gb"), 200, 4, 3.0),
    Svc("embedder", ReplicaResources.from_quantities("8", "32Gi"), 100, 10, 8.0),
)


def desired(svc: Svc, t: datetime, rng: random.Random) -> int:
    hour = t.astimezone(ZoneInfo(TZ)).hour + t.minute / 60
    diurnal = 0.55 + 0.45 * math.sin(2 * math.pi * (hour - 8) / 24)
    noise = rng.gauss(0, 0.08)
    return max(1, min(svc.max_replicas, math.ceil(svc.peak_demand * max(0.05, diurnal + noise))))


def simulate(limit_usd: Decimal | None, spec_dict: dict) -> dict:
    """One month; ``limit_usd=None`` = baseline without enforcement (plans are still computed, not applied)."""
    cat = default_catalog()
    prices = {s.name: cat.price_replica(s.resources, "OnDemand") for s in SERVICES}
    start, end = period_bounds("Monthly", TZ, datetime(2026, 3, 15, tzinfo=timezone.utc))
    spec = parse_budget_spec({**spec_dict, "limit": {"amount": str(limit_usd or spec_dict["limit"]["amount"])}})
    rng = random.Random(SEED)
    ledger, alert_status = Ledger(), {}
    caps: dict[str, int] = {}
    replicas = {s.name: 1 for s in SERVICES}
    truth = Decimal(0)  # replica-seconds x price at STEP_S resolution
    truth_at: list[tuple[datetime, Decimal, Decimal]] = []  # (t, truth spend, rate) at each step
    first_planned: dict[ThresholdAction, datetime] = {}
    ledger_at: dict[datetime, Decimal] = {}  # ledger spend at each evaluation
    alerts: dict[AlertKind, int] = {}
    eval_wall_s, evals = 0.0, 0
    t = start
    spent = Decimal(0)
    while t < end:
        if (t - start).total_seconds() % EVAL_S == 0:
            observations = [ServiceState("ml", s.name, replicas[s.name], s.max_replicas, prices[s.name], s.priority)
                            for s in SERVICES]
            tick = time.perf_counter()
            # reload from status each time: JSON, as an operator restart would read it
            status = json.loads(json.dumps({"ledger": ledger.to_status(), "periodStart":
                                            format_time(ledger.period_start) if ledger.period_start else None}))
            result = advance(Ledger.from_status(status["ledger"], status["periodStart"]),
                             [o.observation() for o in observations], t, spec.period, spec.time_zone)
            plan = plan_budget(spec, result, observations, AlertState.from_status(alert_status), t,
                               policy=PolicyRef("ml", "month"))
            eval_wall_s += time.perf_counter() - tick
            evals += 1
            ledger, spent = result.ledger, result.spent_usd
            ledger_at[t] = spent
            alert_status = json.loads(json.dumps(plan.status_fields()))
            for a in plan.alerts:
                alerts[a.kind] = alerts.get(a.kind, 0) + 1
            for action in plan.actions:
                first_planned.setdefault(action.action, t)
            caps = {} if limit_usd is None else {n: m for (_, n), m in plan.effective_max_replicas().items()}
        # the autoscaler moves replicas every STEP_S, within the budget cap in force
        for s in SERVICES:
            replicas[s.name] = min(desired(s, t, rng), caps.get(s.name, s.max_replicas))
        rate = sum(Decimal(replicas[s.name]) * prices[s.name] for s in SERVICES)
        truth_at.append((t, truth, rate))
        truth += rate * STEP_S / 3600
        t += timedelta(seconds=STEP_S)
    # final evaluation at period end closes the month
    final = advance(ledger, [ServiceState("ml", s.name, replicas[s.name], s.max_replicas, prices[s.name]).observation()
                             for s in SERVICES], end, spec.period, spec.time_zone)
    month_spend = final.closed_period.spent_usd if final.closed_period else final.spent_usd
    return {"start": start, "end": end, "ledger": month_spend, "truth": truth, "truth_at": truth_at,
            "first_planned": first_planned, "alerts": alerts, "ledger_at": ledger_at, "eval_us": 1e6 * eval_wall_s / max(evals, 1),
            "evals": evals, "prices": prices}


def crossing_time(truth_at, amount: Decimal) -> datetime | None:
    """Exact instant the ground-truth spend reached ``amount`` (rate is constant within a step)."""
    for t, before, rate in truth_at:
        after = before + rate * STEP_S / 3600
        if after >= amount and rate > 0:
            return t + timedelta(seconds=float((amount - before) / rate * 3600))
    return None


def main() -> int:
    spec_dict = {
        "period": "Monthly", "timeZone": TZ, "limit": {"amount": "1"},
        "thresholds": [
            {"percent": 50, "actions": ["Alert"]},
            {"percent": 80, "actions": ["Alert", "CapReplicas"], "capReplicas": 2},
            {"percent": 100, "actions": ["Alert", "ScaleDown"]},
            {"percent": 105, "actions": ["Alert", "ScaleToZero"]},
        ],
        "enforcement": {"floorReplicas": 1, "order": "LowestPriorityFirst"},
        "forecast": {"enabled": True, "alertAtPercent": 100},
    }
    wall = time.perf_counter()
    baseline = simulate(None, spec_dict)
    limit = (baseline["truth"] * Decimal("0.75")).quantize(Decimal("1"))  # the month would overspend by a third
    governed = simulate(limit, spec_dict)
    wall = time.perf_counter() - wall

    print(f"Simulated {governed['start'].isoformat()} .. {governed['end'].isoformat()} "
          f"({(governed['end'] - governed['start']) / timedelta(hours=1):.0f} h, {governed['evals']} evaluations "
          f"every {EVAL_S} s, replicas change every {STEP_S} s)")
    print("Prices USD/replica-hour: " + ", ".join(f"{k} {v}" for k, v in governed["prices"].items()))
    print(f"Monthly limit: {limit} USD (75 % of the ungoverned month)\n")
    print(f"{'':44s}{'ungoverned':>14s}{'governed':>14s}{'ratio':>9s}")
    for label, key in (("spend at month end, ledger (USD)", "ledger"), ("spend at month end, ground truth (USD)", "truth")):
        b, g = baseline[key], governed[key]
        print(f"{label:44s}{b:14.2f}{g:14.2f}{g / b:9.3f}")
    over_b = (baseline["truth"] - limit) / limit * 100
    over_g = (governed["truth"] - limit) / limit * 100
    print(f"{'overspend past the limit (% of limit)':44s}{over_b:14.2f}{over_g:14.2f}")
    for run, name in ((baseline, "ungoverned"), (governed, "governed")):
        err = (run["ledger"] - run["truth"]) / run["truth"] * 100
        print(f"ledger vs replica-seconds x price, {name:10s}: {err:+.4f} %  "
              f"({'within' if abs(err) <= 1 else 'OUTSIDE'} +/-1 %)")
    print()
    truth_by_t = {t: spent for t, spent, _ in governed["truth_at"]}
    print("Threshold           true crossing (UTC)   action planned (UTC)    delay   ledger - truth at plan")
    for pct, action in ((80, ThresholdAction.CAP_REPLICAS), (100, ThresholdAction.SCALE_DOWN),
                        (105, ThresholdAction.SCALE_TO_ZERO)):
        crossed = crossing_time(governed["truth_at"], limit * pct / 100)
        planned = governed["first_planned"].get(action)
        delay = f"{(planned - crossed).total_seconds():6.0f} s" if crossed and planned else "     -"
        lag = (f"{governed['ledger_at'][planned] - truth_by_t[planned]:+9.3f} USD" if planned in truth_by_t else "")
        fmt = "%Y-%m-%d %H:%M:%S"
        print(f"{pct:4d} % {action.value:13s} {crossed.strftime(fmt) if crossed else '-':22s}"
              f"{planned.strftime(fmt) if planned else '-':22s}{delay}   {lag}")
    print("(delay = evaluation interval plus the time the sampled ledger trails the 15 s ground truth)")
    print()
    print("Alerts sent (governed): " + ", ".join(f"{k.value} x{v}" for k, v in sorted(governed["alerts"].items(),
                                                                                  key=lambda kv: kv[0].value)))
    print(f"Mean evaluation (advance + plan + 2 status JSON round trips): {governed['eval_us']:.0f} us "
          f"(ungoverned run {baseline['eval_us']:.0f} us); total wall {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
