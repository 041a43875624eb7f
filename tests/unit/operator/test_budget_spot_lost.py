"""When a switched service starts waiting for Spot capacity (``spot_pending_since``): a Spot pod not scheduled yet,
or one whose node was lost (reclaimed and deleted, or silent), from the loss (issue 21's scenario 5: a Spot node's
pods stay listed on the deleted Node for the pod GC's 40-60 s, and only then is a replacement created to wait)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from modalscale.operator.budget.plan import GonePod, NodeHealth, spot_pending_since

T0 = dt.datetime(2026, 12, 3, 11, 0, tzinfo=dt.timezone.utc)
SPOT, OTHER = "real-node-1", "real-node-0"


def at(s: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=s)


def text(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, node: str | None, created_s: float, spot: bool = True, **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeSelector": {"karpenter.sh/capacity-type": "spot"} if spot else {}}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "creationTimestamp": text(at(created_s)), **meta}, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


GONE = {SPOT: NodeHealth(None, None, gone=True, gone_since=at(100)), OTHER: NodeHealth("True", at(95))}
SILENT = {SPOT: NodeHealth("Unknown", at(90)), OTHER: NodeHealth("True", at(95))}


@pytest.mark.parametrize(("pods", "health", "gone", "expected"), [
    ([pod("a", SPOT, 0)], None, [], None),
    ([pod("a", SPOT, 0), pod("b", None, 50)], None, [], at(50)),
    ([pod("a", SPOT, 0)], GONE, [], at(100)),
    ([pod("a", SPOT, 0)], SILENT, [], at(90)),
    ([pod("a", SPOT, 0, deletionTimestamp=text(at(140)))], GONE, [], at(100)),
    ([pod("a", OTHER, 0)], GONE, [], None),
    ([pod("a", SPOT, 0, spot=False)], GONE, [], None),
    ([pod("b", None, 145)], GONE, [GonePod(pod("a", SPOT, 0), at(144))], at(100)),
    ([pod("b", None, 145)], GONE, [GonePod(pod("a", SPOT, 0), at(120))], at(145)),
    ([pod("b", None, 145)], {SPOT: NodeHealth("True", at(140))}, [GonePod(pod("a", SPOT, 0), at(144))], at(145)),
    ([pod("c", OTHER, 0, spot=False)], GONE, [GonePod(pod("a", SPOT, 0), at(144))], None),
], ids=["running-on-a-live-node", "unscheduled-since-created", "node-deleted-since-first-seen-gone",
        "node-silent-since-last-heartbeat", "terminating-on-a-lost-node", "on-demand-node-fine",
        "not-a-spot-pod", "replacement-of-a-pod-lost-with-its-node", "lost-pod-deleted-before-the-window",
        "node-back", "nothing-waits-now"])
def test_the_wait_for_spot_capacity_starts_when_a_spot_pod_was_lost_or_created_unscheduled(
        pods: list[dict[str, Any]], health: dict[str, NodeHealth] | None, gone: list[GonePod],
        expected: dt.datetime | None) -> None:
    # window 15 s (spotPendingTimeoutSeconds): a lost pod deleted 1 s before its replacement was created counts,
    # one deleted 25 s before belongs to an earlier shortage.
    assert spot_pending_since(pods, health, gone, window_s=15) == expected
