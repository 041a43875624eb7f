"""The demo's verdict (what was observed, checked) and its HTML report with plots (matplotlib PNGs inline)."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from modalscale.api.isvc_status import format_time, read_isvc_status
from modalscale.costmodel.budget.status import read_budget_status
from modalscale.demo.capacity import NOT_AUTOSCALER, budget_scale_downs


@dataclass
class Checks:
    """What the demo must show; each item with what was seen."""

    items: list[tuple[str, bool, str]] = field(default_factory=list)

    @property
    def all_passed(self) -> bool:
        return all(ok for _, ok, _ in self.items)

    def summary(self) -> str:
        lines = ["Demo summary:"]
        lines += [f"  [{'PASS' if ok else 'FAIL'}] {name}: {seen}" for name, ok, seen in self.items]
        return "\n".join(lines)

    @classmethod
    def evaluate(cls, isvc: dict[str, Any], policy: dict[str, Any], receiver: Any, shift_at_s: float | None,
                 samples: list[Any] | None = None) -> Checks:
        """Judge the run from the objects' final status, the receiver and the samples."""
        checks = cls()
        history = read_isvc_status(isvc).scaling_history or ()
        ups = [h for h in history
               if h.to_replicas > h.from_replicas and h.reason not in NOT_AUTOSCALER]
        checks.items.append(("scale-up by the autoscaler", bool(ups),
                             "; ".join(f"{format_time(h.time)} {h.from_replicas}->{h.to_replicas} {h.reason}"
                                       for h in ups) or "none"))
        if samples and shift_at_s is not None:
            before = [s.desired for s in samples if s.t_s < shift_at_s and s.desired is not None]
            after = [s.desired for s in samples if s.t_s >= shift_at_s and s.desired is not None]
            ok = bool(before and after and max(after) > max(before))
            checks.items.append(("scale-up after the modality shift", ok,
                                 f"desired before the shift max {max(before) if before else '-'}, after max "
                                 f"{max(after) if after else '-'}"))
        caps = budget_scale_downs(history)
        budget = read_budget_status(policy).alert_state
        enforced = budget.enforced
        checks.items.append(("scale-down enforced at the budget cap", bool(caps) and bool(enforced),
                             "; ".join(f"{format_time(h.time)} {h.from_replicas}->{h.to_replicas}" for h in caps)
                             or "none"))
        crossed = [t for t in budget.records if t.crossed and not t.forecast]
        per = {t.percent: 0 for t in crossed}
        for m in receiver.accepted:
            headline = m.room_text().splitlines()[0] if m.room_text() else ""
            if " crossed " in headline:  # "Budget ns/name crossed 50 %, 80 % of its daily limit"
                for pct in re.findall(r"(\d+) %", headline.split(" of its ")[0]):
                    per[int(pct)] = per.get(int(pct), 0) + 1
        checks.items.append(("exactly one alert per crossed threshold",
                             bool(crossed) and all(v == 1 for v in per.values()),
                             ", ".join(f"{p}%: {n}" for p, n in sorted(per.items())) or "no threshold crossed"))
        return checks


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def write_report(out_dir: Path, samples: list[Any], records: list[tuple[float, float, str, bool]],
                 isvc: dict[str, Any], policy: dict[str, Any], receiver: Any, checks: Checks, slo_ms: float,
                 shift_at_s: float | None, real: bool = False, kwok_reason: str | None = None,
                 scale_ups: list[Any] | None = None, pods: list[Any] | None = None,
                 nodes: list[tuple[str, bool]] | None = None, timings: dict[str, float] | None = None,
                 load_plan: Any = None, request_path: dict[str, Any] | None = None) -> Path:
    """Write ``demo-report.html`` (four plots, the measured capacity of each scale-up, nodes and pods, the
    decisions, the chat room, the checks) and ``demo-run.json``.

    ``real``: the pods ran on the real node (else the KWOK-only fallback, named with ``kwok_reason``);
    ``scale_ups``: :class:`modalscale.demo.capacity.ScaleUp`; ``pods``: :class:`modalscale.demo.capacity.PodRecord`;
    ``nodes``: (name, real?); ``timings``: set-up step -> seconds; ``load_plan``: the
    :class:`modalscale.demo.capacity.LoadPlan` the trace's rate came from (None: given or KWOK-only);
    ``request_path``: the gateway's part on the real node (:func:`request_path_lines`; None: KWOK-only, no gateway)."""
    scale_ups, pods, nodes, timings = scale_ups or [], pods or [], nodes or [], timings or {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s.t_s for s in samples]
    figs = []
    fig, ax = plt.subplots(figsize=(8, 2.6))
    for modality in sorted({m for s in samples for m in s.rps_by_modality}):
        ax.plot(t, [s.rps_by_modality.get(modality, 0.0) for s in samples], label=modality)
    ax.set_ylabel("req/s (Prometheus)")
    ax.set_title("Request rate by modality")
    ax.legend(loc="upper left", fontsize=8)
    figs.append(fig)

    fig, ax = plt.subplots(figsize=(8, 2.6))
    done = sorted((a + lat / 1000, lat) for a, lat, _, ok in records if ok)
    ax.scatter([x for x, _ in done], [y for _, y in done], s=3, alpha=0.35, label="request latency")
    ax.plot(t, [s.p95_ms if s.p95_ms is not None else float("nan") for s in samples], color="C3", label="p95 (20 s)")
    ax.axhline(slo_ms, color="k", linestyle="--", linewidth=1, label=f"SLO {slo_ms:.0f} ms")
    ax.set_ylabel("ms (client side)")
    ax.set_yscale("log")
    ax.set_title("Latency vs SLO (client side, through the Service)" if real
                 else "Latency vs SLO (one local Triton process serves all requests)")
    for up in scale_ups:
        ax.axvline(up.decision_s, color="C2", linewidth=1, linestyle="--")
        if up.ready_s is not None:
            ax.axvline(up.ready_s, color="C2", linewidth=1)
    ax.legend(loc="upper left", fontsize=8)
    figs.append(fig)

    fig, ax = plt.subplots(figsize=(8, 2.6))
    ax.step(t, [s.desired if s.desired is not None else float("nan") for s in samples], where="post", label="desired")
    ax.step(t, [s.ready if s.ready is not None else float("nan") for s in samples], where="post",
            label="ready (real pods)" if real else "ready (KWOK)")
    ax.set_ylabel("replicas")
    ax.set_title("Replicas: the operator's decisions (pods on the real node)" if real
                 else "Replicas: the operator's decisions (pods simulated on KWOK nodes)")
    ax.legend(loc="upper left", fontsize=8)
    figs.append(fig)

    fig, ax = plt.subplots(figsize=(8, 2.6))
    ax.plot(t, [float(s.spent_usd) if s.spent_usd else float("nan") for s in samples], label="spent")
    limit = float(samples[-1].limit_usd) if samples else 0.0
    for pct in (50, 80, 100):
        ax.axhline(limit * pct / 100, color="grey", linestyle=":", linewidth=1)
    ax.axhline(limit, color="k", linestyle="--", linewidth=1, label=f"limit {limit:.4f} USD")
    ax.set_ylabel("USD")
    ax.set_title("Spend vs budget (ledger in BudgetPolicy status)")
    ax.legend(loc="upper left", fontsize=8)
    figs.append(fig)
    if shift_at_s is not None:
        for f in figs:
            f.axes[0].axvline(shift_at_s, color="C1", linewidth=1)
    for f in figs:
        f.axes[0].set_xlabel("seconds since the replay started")
    images = [_png(f) for f in figs]
    plt.close("all")

    history = read_isvc_status(isvc).scaling_history or ()
    rows = "".join(f"<tr><td>{html.escape(format_time(h.time))}</td><td>{h.from_replicas}</td><td>{h.to_replicas}</td>"
                   f"<td>{html.escape(h.reason)}</td><td>{html.escape(h.message or '')}</td></tr>"
                   for h in history)
    room = "".join(f"<pre>{html.escape(m.room_text())}</pre>" for m in receiver.accepted)
    if real:
        what = ("The InferenceService's pods ran for real on the local cluster's kubelet node (containerd + runc), "
                "the replicas from the CPU runtime image, the request gateway's pods from the operator image; "
                "requests went open-loop through the Service's ClusterIP (kube-proxy) to the gateway, a new "
                "connection per request, and the gateway sent each one to a replica. Prometheus discovered the pods "
                "through the apiserver.")
    else:
        what = (f"<b>KWOK-ONLY FALLBACK ({html.escape(kwok_reason or '')}):</b> the InferenceService's pods ran on "
                "KWOK fake nodes (simulated capacity); every request was served by one local <code>tritonserver</code> "
                "process. Replica counts are the operator's decisions on real Prometheus metrics; the capacity they "
                "would add is not measured.")

    def win(w: Any) -> str:
        if w is None:
            return "<td colspan=4>not measured</td>"
        p95 = f"{w.p95_ms:.0f}" if w.p95_ms is not None else "-"
        return (f"<td>{w.start_s:.0f}-{w.end_s:.0f}</td><td>{w.offered_rps:.2f}</td><td>{w.throughput_rps:.2f}</td>"
                f"<td>{p95}</td>")

    cap_rows = "".join(
        f"<tr><td>{u.from_replicas}&rarr;{u.to_replicas}"
        f"{'' if u.ready_replicas in (None, u.to_replicas) else f' ({u.ready_replicas} Ready)'}</td>"
        f"<td>{html.escape(', '.join(u.reasons))}</td>"
        f"<td>{u.decision_s:.0f}</td><td>{'-' if u.ready_s is None else f'{u.decision_to_ready_s:.0f}'}</td>"
        f"{win(u.before)}{win(u.after)}</tr>" for u in scale_ups)
    cap_table = ("<table><tr><th>scale-up</th><th>reason</th><th>decided (s)</th><th>decision&rarr;Ready (s)</th>"
                 "<th>before: window (s)</th><th>offered req/s</th><th>throughput req/s</th><th>p95 ms</th>"
                 "<th>after: window (s)</th><th>offered req/s</th><th>throughput req/s</th><th>p95 ms</th></tr>"
                 f"{cap_rows}</table><p>Before: arrivals from the decision until the new replicas were Ready. After: "
                 "from 15 s after Ready, at most 30 s, ended early by the next decision or the budget's cap.</p>"
                 if real else "<p>Not measured (KWOK-only).</p>")
    node_table = ("<table><tr><th>node</th><th>kind</th></tr>" + "".join(
        f"<tr><td>{html.escape(n)}</td><td>{'real (kubelet + containerd)' if r else 'KWOK (fake)'}</td></tr>"
        for n, r in nodes) + "</table>")
    pod_table = ("<table><tr><th>pod</th><th>node</th><th>created (s)</th><th>Ready (s)</th><th>deleted (s)</th></tr>"
                 + "".join(f"<tr><td>{html.escape(p.name)}</td><td>{html.escape(str(p.node))} "
                           f"({'real' if p.node_real else 'KWOK'})</td><td>{p.created_s:.0f}</td>"
                           f"<td>{'-' if p.ready_s is None else f'{p.ready_s:.0f}'}</td>"
                           f"<td>{'-' if p.deleted_s is None else f'{p.deleted_s:.0f}'}</td></tr>" for p in pods)
                 + "</table>") if pods else ""
    check_rows = "".join(f"<li><b>{'PASS' if ok else 'FAIL'}</b> {html.escape(n)}: {html.escape(s)}</li>"
                         for n, ok, s in checks.items)
    path_html = ("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in request_path_lines(request_path))
                 + "</ul>") if request_path is not None else "<p>No gateway (KWOK-only fallback).</p>"
    plan_line = (f"<p>Offered load: {html.escape(plan_summary(load_plan))}</p>" if load_plan is not None else "")
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>modalscale demo report</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}} \
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px}}
table{{border-collapse:collapse}} pre{{background:#f6f6f6;padding:6px}}</style></head><body>
<h1>modalscale demo report</h1>
<p>Generated {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}. {what}</p>
<h2>Checks</h2><ul>{check_rows}</ul>
<h2>Measured capacity of each scale-up</h2>{plan_line}{cap_table}
<h2>Request path (the gateway)</h2>{path_html}
<h2>Nodes and pods</h2>{node_table}{pod_table}
<p>Set-up: {html.escape(', '.join(f'{k} {v:.0f} s' for k, v in timings.items()) or '-')}</p>
{''.join(f'<img src="data:image/png;base64,{i}" style="width:100%">' for i in images)}
<h2>Scaling decisions (status.scalingHistory)</h2>
<table><tr><th>time</th><th>from</th><th>to</th><th>reason</th><th>message</th></tr>{rows}</table>
<h2>What the chat room saw</h2>{room or '<p>(nothing)</p>'}
<h2>Final BudgetPolicy status</h2><pre>{html.escape(json.dumps((policy.get('status') or {}), indent=2))}</pre>
</body></html>"""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "demo-report.html"
    path.write_text(body)
    (out_dir / "demo-run.json").write_text(json.dumps({
        "samples": [asdict(s) for s in samples], "checks": checks.items, "real_node": real,
        "kwok_reason": kwok_reason, "scale_ups": [asdict(u) for u in scale_ups], "pods": [asdict(p) for p in pods],
        "nodes": nodes, "timings": timings, "load_plan": asdict(load_plan) if load_plan is not None else None,
        "request_path": request_path, "isvc_status": isvc.get("status"), "budget_status": policy.get("status")},
        indent=1, default=str))
    return path


def plan_summary(plan: Any) -> str:
    """One line on how the trace's rates were sized (a :class:`modalscale.demo.capacity.LoadPlan`)."""
    return (f"{plan.rate_before_rps:.2f} req/s before the shift ({plan.pre_utilization:.0%} of one replica's measured "
            f"capacity on the pre-shift mix, {plan.pre_capacity_rps:.2f} req/s), {plan.rate_after_rps:.2f} req/s from "
            f"the shift on ({plan.overload:.2f}x one replica's measured capacity on the post-shift mix, "
            f"{plan.post_capacity_rps:.2f} req/s)")


def request_path_lines(request_path: dict[str, Any]) -> list[str]:
    """Lines on the gateway's part of a real-node run: the start from zero, the requests each replica pod served
    (Prometheus), the gateway's replica choices by policy, and the embedding cache.

    ``request_path``: ``cold_start`` (:meth:`modalscale.demo.run.Demo.cold_start`'s record), ``served_by_pod`` and
    ``gateway_picks`` (name -> count; empty when Prometheus could not be read), ``cache``
    (:meth:`modalscale.demo.run.Demo.cache_phase`'s record; absent: not run)."""
    from modalscale.demo.run import cache_line, cold_start_line

    served = request_path.get("served_by_pod") or {}
    picks = request_path.get("gateway_picks") or {}
    return [
        "Start from zero: " + cold_start_line(request_path.get("cold_start") or {}),
        "Requests served per replica (each pod's own counter, Prometheus): "
        + (", ".join(f"{pod} {n}" for pod, n in sorted(served.items())) or "not read"),
        "Gateway's replica choices: " + (", ".join(f"{k} {n}" for k, n in sorted(picks.items())) or "not read")
        + " (affinity_hit: an image's own replica on the consistent-hash ring; affinity_spill: moved on by the "
        "load bound; least_outstanding: no image)",
        "Embedding cache (after the story; the story's images are all distinct, so they never hit): "
        + cache_line(request_path.get("cache") or {})
        + "; hit rates with 4 replicas against 1: benchmarks/cache_affinity.py (docs/benchmarks.md)",
    ]
