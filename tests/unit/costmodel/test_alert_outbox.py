"""The alert outbox (pure): due selection, backoff, removal and update after a round, expiry, bounds, round trip.

Times are hand-computed from T0 = 2026-11-30T10:00:00Z; the alert's daily period ends 2026-12-01T00:00:00Z.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from modalscale.api.budgetpolicy import parse_budget_spec
from modalscale.api.conditions import NOTIFICATION_REMOVED, OUTBOX_FULL, PERIOD_ENDED
from modalscale.costmodel.budget import (
    AlertKind,
    AlertState,
    BudgetAlert,
    PolicyRef,
    ServiceState,
    plan_budget,
)
from modalscale.costmodel.outbox import (
    MAX_FACTS,
    POSSIBLE_DUPLICATE_FACT,
    AlertMessage,
    Attempt,
    PendingAlert,
    backoff_s,
    due_alerts,
    enqueue,
    mark_sending,
    next_due_s,
    outbox_after,
)
from modalscale.notify.payloads import build_payload, encode_json
from tests.factories import pending_json, read_budget

UTC = timezone.utc
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
PERIOD_END = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
POLICY = PolicyRef("ml", "daily")


def make_alert(now: datetime = T0, spent: str = "105") -> BudgetAlert:
    spec = parse_budget_spec({
        "period": "Daily", "limit": {"amount": "100"}, "forecast": {"enabled": True},
        "thresholds": [{"percent": 50}, {"percent": 100, "actions": ["Alert", "ScaleDown"]}]})
    svcs = [ServiceState("ml", "vc", 3, 8, Decimal("1.25"))]
    plan = plan_budget(spec, Decimal(spent), svcs, AlertState(), now, policy=POLICY)
    return next(a for a in plan.alerts if a.kind is AlertKind.THRESHOLD_CROSSED)


def failed(entry: PendingAlert, at: datetime, reason: str = "ServerError", message: str = "HTTP 503") -> Attempt:
    return Attempt(entry.key, False, reason, message, at)


def ok(entry: PendingAlert, at: datetime) -> Attempt:
    return Attempt(entry.key, True, "Delivered", "accepted", at)


@pytest.mark.parametrize("attempts,expected_s", [(1, 30), (2, 60), (3, 120), (4, 240), (5, 480), (6, 900),
                                                 (7, 900), (40, 900)],
                         ids=["1", "2", "3", "4", "5", "6-capped", "7", "40"])
def test_backoff_doubles_from_30_s_and_is_capped_at_15_min(attempts: int, expected_s: int) -> None:
    assert backoff_s(attempts) == expected_s


def test_backoff_needs_a_failed_round() -> None:
    with pytest.raises(ValueError):
        backoff_s(0)


def test_one_entry_per_alert_and_target_due_at_once_in_order() -> None:
    alert = make_alert()
    outbox, dropped = enqueue((), [alert], ["slack", "ding"], T0)
    assert dropped == ()
    assert [(e.notification, e.attempts, e.next_attempt_time) for e in outbox] == [("slack", 0, T0), ("ding", 0, T0)]
    assert due_alerts(outbox, T0) == outbox
    # Enqueuing the same alert again adds nothing (same key).
    assert enqueue(outbox, [alert], ["slack", "ding"], T0)[0] == outbox
    assert next_due_s(outbox, T0) == 0.0


def test_no_targets_no_entries() -> None:
    assert enqueue((), [make_alert()], [], T0) == ((), ())


def test_due_skips_entries_in_flight_and_those_waiting_for_their_backoff() -> None:
    outbox, _ = enqueue((), [make_alert()], ["slack", "ding"], T0)
    slack, ding = outbox
    assert due_alerts(outbox, T0, in_flight={slack.key}) == (ding,)
    after = outbox_after(outbox, [failed(slack, T0)], T0 + timedelta(seconds=40), ["slack", "ding"])
    # slack failed its first round at T0+40 s: due again at T0+70 s (30 s), not at T0+69 s.
    (slack2, ding2) = after.pending
    assert slack2.next_attempt_time == T0 + timedelta(seconds=70)
    assert due_alerts(after.pending, T0 + timedelta(seconds=69), in_flight={ding2.key}) == ()
    assert due_alerts(after.pending, T0 + timedelta(seconds=70), in_flight={ding2.key}) == (slack2,)
    assert next_due_s(after.pending, T0 + timedelta(seconds=50), in_flight={ding2.key}) == 20.0
    assert next_due_s((), T0) is None


def test_two_targets_one_fails_only_the_failed_one_stays_and_is_retried_with_backoff() -> None:
    outbox, _ = enqueue((), [make_alert()], ["slack", "ding"], T0)
    slack, ding = outbox
    t1 = T0 + timedelta(seconds=31)
    after = outbox_after(outbox, [ok(slack, T0), failed(ding, T0)], t1, ["slack", "ding"])
    assert after.delivered == (slack,) and after.abandoned == ()
    (d,) = after.pending
    assert (d.notification, d.attempts, d.first_attempt_time, d.next_attempt_time, d.last_reason, d.last_error) == (
        "ding", 1, T0, t1 + timedelta(seconds=30), "ServerError", "HTTP 503")
    # Second failed round at t2: attempts 2, 60 s; first_attempt_time is kept.
    t2 = t1 + timedelta(seconds=30)
    again = outbox_after(after.pending, [failed(d, t2 - timedelta(seconds=5), message="timed out")], t2,
                         ["slack", "ding"])
    (d2,) = again.pending
    assert (d2.attempts, d2.first_attempt_time, d2.next_attempt_time, d2.last_error) == (
        2, T0, t2 + timedelta(seconds=60), "timed out")
    # Third round delivered: the outbox is empty.
    done = outbox_after(again.pending, [ok(d2, t2 + timedelta(seconds=60))], t2 + timedelta(seconds=61),
                        ["slack", "ding"])
    assert done.pending == () and done.delivered == (d2,)


def test_a_result_for_an_entry_no_longer_pending_is_ignored() -> None:
    outbox, _ = enqueue((), [make_alert()], ["slack"], T0)
    (slack,) = outbox
    other = PendingAlert("gone", slack.message, T0)
    after = outbox_after(outbox, [failed(other, T0)], T0 + timedelta(seconds=1), ["slack"])
    assert after.pending == outbox and after.delivered == () and after.abandoned == ()


def test_entries_expire_at_the_end_of_their_period_and_are_reported() -> None:
    outbox, _ = enqueue((), [make_alert()], ["slack"], T0)
    (slack,) = outbox
    last = PERIOD_END - timedelta(microseconds=1)
    assert outbox_after(outbox, [], last, ["slack"]).pending == outbox
    after = outbox_after(outbox, [failed(slack, last)], PERIOD_END, ["slack"])
    assert after.pending == ()
    (gone,) = after.abandoned
    assert gone.why == PERIOD_ENDED and gone.entry.attempts == 1
    text = gone.describe()
    assert "notification slack" in text and "after 1 attempt:" in text and "last error: HTTP 503" in text


def test_entries_of_a_removed_notification_are_abandoned_unless_in_flight_or_the_spec_is_unknown() -> None:
    outbox, _ = enqueue((), [make_alert()], ["slack", "ding"], T0)
    slack, ding = outbox
    after = outbox_after(outbox, [], T0 + timedelta(seconds=1), ["slack"])
    assert after.pending == (slack,) and [(a.entry, a.why) for a in after.abandoned] == [(ding, NOTIFICATION_REMOVED)]
    assert outbox_after(outbox, [], T0 + timedelta(seconds=1), ["slack"], in_flight={ding.key}).pending == outbox
    assert outbox_after(outbox, [], T0 + timedelta(seconds=1), None).pending == outbox


TARGETS = {"slack": "Slack:s/url", "ding": "DingTalk:d/url"}


def test_entries_of_a_renamed_notification_go_on_to_the_one_with_the_same_target() -> None:
    """ding renamed oncall (same type, Secret and URL key): its entry goes on there with its rounds; one in flight
    is carried once its round is recorded; one whose target already has the alert is merged; without the same
    target (or an entry written before targets were recorded) it is abandoned, reported."""
    outbox, _ = enqueue((), [make_alert()], ["slack", "ding"], T0, targets=TARGETS)
    slack, ding = outbox
    assert [e.target for e in outbox] == ["Slack:s/url", "DingTalk:d/url"]
    renamed = {"slack": "Slack:s/url", "oncall": "DingTalk:d/url"}
    t1 = T0 + timedelta(seconds=1)
    after = outbox_after(outbox, [failed(ding, T0)], t1, ["slack", "oncall"], targets=renamed)
    assert after.abandoned == () and after.pending[0] == slack
    carried = after.pending[1]
    assert (carried.notification, carried.attempts, carried.last_reason, carried.target, carried.message) == (
        "oncall", 1, "ServerError", "DingTalk:d/url", ding.message)
    busy = outbox_after(outbox, [], t1, ["slack", "oncall"], in_flight={ding.key}, targets=renamed)
    assert busy.pending == outbox and busy.abandoned == ()
    done = outbox_after(busy.pending, [failed(ding, t1)], t1 + timedelta(seconds=1), ["slack", "oncall"],
                        targets=renamed)
    assert [(e.notification, e.attempts) for e in done.pending] == [("slack", 0), ("oncall", 1)]
    # Two names for one webhook, one removed: the alert pending for the other is not sent twice.
    twice, _ = enqueue((), [make_alert()], ["slack", "slack2"], T0, targets={"slack": "Slack:s/url",
                                                                            "slack2": "Slack:s/url"})
    both = outbox_after(twice, [], t1, ["slack"], targets=TARGETS)
    assert both.pending == (slack,) and both.abandoned == ()
    # ... with the failed rounds of either (AlertDelivered goes on naming the failure), and none once delivered.
    merged = outbox_after(twice, [failed(twice[1], T0)], t1, ["slack"], targets=TARGETS)
    assert [(e.notification, e.attempts, e.last_reason) for e in merged.pending] == [("slack", 1, "ServerError")]
    assert outbox_after(twice, [ok(twice[0], T0)], t1, ["slack"], targets=TARGETS).pending == ()
    elsewhere = outbox_after(outbox, [], t1, ["slack", "oncall"], targets={**renamed, "oncall": "DingTalk:d2/url"})
    assert [(a.entry, a.why) for a in elsewhere.abandoned] == [(ding, NOTIFICATION_REMOVED)]
    legacy = replace(ding, target=None)
    assert [a.why for a in outbox_after((legacy,), [], t1, ["oncall"], targets=renamed).abandoned] == [
        NOTIFICATION_REMOVED]
    # An entry written before targets were recorded records its notification's target at the next evaluation.
    assert outbox_after((legacy,), [], t1, ["ding"], targets=TARGETS).pending == (ding,)


def test_a_full_outbox_abandons_the_oldest_entries() -> None:
    first, _ = enqueue((), [make_alert(T0)], ["a", "b"], T0)
    later = make_alert(T0 + timedelta(seconds=5), spent="106")
    outbox, dropped = enqueue(first, [later], ["a", "b"], T0 + timedelta(seconds=5), max_pending=3)
    assert [e.key for e in outbox] == [first[1].key] + [("a", "ThresholdCrossed", later.created_at),
                                                        ("b", "ThresholdCrossed", later.created_at)]
    assert [(d.entry, d.why) for d in dropped] == [(first[0], OUTBOX_FULL)]


def test_status_round_trip_keeps_every_field_and_payloads_byte_for_byte() -> None:
    alert = make_alert()
    outbox, _ = enqueue((), [alert], ["slack"], T0, targets=TARGETS)
    after = outbox_after(outbox, [failed(outbox[0], T0)], T0 + timedelta(seconds=2), ["slack"], targets=TARGETS)
    status = {"pendingAlerts": [pending_json(e) for e in after.pending]}
    (item,) = status["pendingAlerts"]
    assert item["attempts"] == 1 and item["nextAttemptTime"] == "2026-11-30T10:00:32Z"
    assert item["target"] == "Slack:s/url"
    assert item["firstAttemptTime"] == "2026-11-30T10:00:00Z" and item["lastReason"] == "ServerError"
    assert item["thresholdsPercent"] == [50, 100] and item["periodEnd"] == "2026-12-01T00:00:00Z"
    assert read_budget(status, POLICY).outbox == after.pending
    stored = (read_budget(status, POLICY).outbox or ())[0].message
    for kind in ("Slack", "Teams", "WeCom", "DingTalk", "Feishu", "Webhook"):
        assert encode_json(build_payload(kind, stored, "s", T0)) == encode_json(build_payload(kind, alert, "s", T0))
    assert stored.text() == alert.text() and stored == AlertMessage.from_alert(alert)


@pytest.mark.parametrize("item,field", [
    ({"kind": "Nope"}, "status.pendingAlerts[0]"),
    ({"nextAttemptTime": "yesterday"}, "status.pendingAlerts[0].nextAttemptTime"),
], ids=["unknown-kind", "bad-time"])
def test_an_unreadable_entry_names_its_field(item: dict[str, str], field: str) -> None:
    outbox, _ = enqueue((), [make_alert()], ["slack"], T0)
    raw = {**pending_json(outbox[0]), **item}
    status = read_budget({"pendingAlerts": [raw]}, POLICY)
    assert status.outbox is None and status.problem is not None and field in status.problem


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError):
        due_alerts((), datetime(2026, 11, 30, 10, 0))


# --- A round whose outcome nobody recorded (the sending operator stopped mid-send) ------------------------------

def test_entries_sent_are_marked_and_a_finished_round_clears_the_mark() -> None:
    outbox, _ = enqueue((), [make_alert()], ["slack", "ding"], T0)
    slack, ding = outbox
    marked, sends = mark_sending(outbox, due_alerts(outbox, T0, in_flight={ding.key}), T0, "op-a")
    assert [(e.notification, e.sending_since, e.sending_by) for e in marked] == [
        ("slack", T0, "op-a"), ("ding", None, None)]
    assert [e.key for e in sends] == [slack.key] and sends[0].message == slack.message  # first send: no notice
    after = outbox_after(marked, [failed(marked[0], T0)], T0 + timedelta(seconds=1), ["slack", "ding"])
    assert (after.pending[0].sending_since, after.pending[0].sending_by, after.pending[0].attempts) == (None, None, 1)
    assert outbox_after(marked, [ok(marked[0], T0)], T0 + timedelta(seconds=1), ["slack", "ding"]).pending == (ding,)


def test_an_entry_marked_by_another_process_is_sent_again_as_a_possible_duplicate() -> None:
    outbox, _ = enqueue((), [make_alert()], ["slack"], T0)
    marked, _ = mark_sending(outbox, outbox, T0, "op-a")  # op-a sent it and stopped before recording the answer
    t1 = T0 + timedelta(seconds=30)
    remarked, (again,) = mark_sending(marked, due_alerts(marked, t1), t1, "op-b")
    assert again.message.fact_pairs == (*outbox[0].message.fact_pairs, POSSIBLE_DUPLICATE_FACT)
    assert (remarked[0].sending_by, remarked[0].sending_since) == ("op-b", t1)
    assert remarked[0].message == outbox[0].message  # the stored message is unchanged
    # Its identity is the first copy's: an Alertmanager-style receiver sees the same fingerprint and group key.
    first, second = (build_payload("Webhook", m, None, T0) for m in (outbox[0].message, again.message))
    assert (first["groupKey"], first["alerts"][0]["fingerprint"]) == (second["groupKey"],
                                                                      second["alerts"][0]["fingerprint"])
    assert POSSIBLE_DUPLICATE_FACT[1] in second["alerts"][0]["annotations"]["description"]
    slack = json.dumps(build_payload("Slack", again.message, None, T0))
    assert "may have arrived already" in slack
    # The same process's own mark is a round that never started (a Secret read failed): no notice.
    _, (mine,) = mark_sending(remarked, remarked, t1 + timedelta(seconds=5), "op-b")
    assert mine.message == outbox[0].message


def test_the_notice_keeps_the_facts_within_their_bound() -> None:
    outbox, _ = enqueue((), [make_alert()], ["slack"], T0)
    full = replace(outbox[0], message=replace(outbox[0].message, fact_pairs=tuple(
        (f"l{i}", "v") for i in range(MAX_FACTS))), sending_by="op-a", sending_since=T0)
    _, (again,) = mark_sending((full,), (full,), T0, "op-b")
    assert len(again.message.fact_pairs) == MAX_FACTS and again.message.fact_pairs[-1] == POSSIBLE_DUPLICATE_FACT


def test_the_sending_mark_round_trips_through_status() -> None:
    outbox, _ = enqueue((), [make_alert()], ["slack"], T0)
    marked, _ = mark_sending(outbox, outbox, T0, "host/12/1796200000")
    item = pending_json(marked[0])
    assert (item["sendingSince"], item["sendingBy"]) == ("2026-11-30T10:00:00Z", "host/12/1796200000")
    assert read_budget({"pendingAlerts": [item]}, POLICY).outbox == marked
    assert "sendingBy" not in pending_json(outbox[0])
