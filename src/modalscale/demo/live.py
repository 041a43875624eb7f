"""The demo's live view: one rich table refreshed every sample, plus the chat room as alerts arrive."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table


class LiveView:
    """``with LiveView(...) as v: v.update(sample, receiver)``; prints plain lines when not enabled."""

    def __init__(self, enabled: bool, say: Callable[[str], None], note: str = "") -> None:
        self.enabled = enabled
        self.note = note
        self.say = say
        self.console = Console()
        self.live: Live | None = None
        self.seen_alerts = 0

    def __enter__(self) -> LiveView:
        if self.enabled:
            self.live = Live(console=self.console, refresh_per_second=2, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.__exit__(None, None, None)

    def update(self, s: Any, receiver: Any) -> None:
        rates = ", ".join(f"{k} {v:.1f}/s" for k, v in sorted(s.rps_by_modality.items())) or "(no data yet)"
        p95 = f"{s.p95_ms:.0f} ms" if s.p95_ms is not None else "-"
        spent = f"{float(s.spent_usd):.4f}" if s.spent_usd else "-"
        accepted = receiver.accepted
        new = accepted[self.seen_alerts:]
        self.seen_alerts = len(accepted)
        if not self.enabled:
            self.say(f"t={s.t_s:5.0f}s rate[{rates}] images={s.image_share:.0%} p95={p95} desired={s.desired} "
                     f"ready={s.ready} ({s.reason}) spent={spent}/{s.limit_usd} USD {s.budget_state} "
                     f"alerts={s.alerts}")
            for msg in new:
                self.say("chat room> " + msg.room_text().replace("\n", " | "))
            return
        table = Table(title=f"modalscale demo — t = {s.t_s:.0f} s", show_header=True)
        for col in ("request rate by modality", "image share", "p95 (SLO)", "desired / ready", "last reason",
                    "spent / limit (USD)", "budget", "alerts"):
            table.add_column(col)
        table.add_row(rates, f"{s.image_share:.0%}", p95, f"{s.desired} / {s.ready}", s.reason or "-",
                      f"{spent} / {s.limit_usd}", s.budget_state or "-", str(s.alerts))
        room = "\n\n".join(m.room_text() for m in accepted[-3:]) or "(no message yet)"
        assert self.live is not None
        self.live.update(Group(table, Panel(room, title="chat room (local Slack receiver)"), self.note))
