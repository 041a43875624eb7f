"""The alert outbox: budget alerts persisted in ``status.pendingAlerts`` until each target has accepted them.

Why a module: alerts are delivered **at least once** (Alertmanager's contract), not at most once. An alert the
planner decides is written to status, once per notification target, in the same status patch that records
its threshold as alerted and *before* anything is sent; it leaves the outbox only when that target accepted it,
or when it expires (reported, never silent). These pure functions decide what is due, what a round of delivery
attempts changes, and what expires; the operator only reads status, sends what is due and writes the result.

Rules (times are timezone-aware UTC, passed in as ``now``; nothing here reads the clock):

* **One entry per (alert, target)**: a target that accepted an alert never gets it again because another
  target failed. An entry is keyed by (notification name, alert kind, alert creation time).
* **Due**: an entry is due when ``nextAttemptTime <= now`` and it is not in flight (being sent by this
  process). A new entry is due at once.
* **Backoff** after a failed round (the sender's own bounded in-process retries included):
  ``nextAttemptTime = now + min(BACKOFF_MAX_S, BACKOFF_BASE_S x 2**(attempts - 1))``: 30 s, 60 s, 120 s, ...,
  capped at 15 min (Alertmanager retries a failed notification with capped exponential backoff too).
  ``attempts`` counts rounds, not HTTP requests.
* **Expiry** (reported as abandoned, with the target, the number of rounds and the last error): at the end of
  the alert's budget period (the message is about a period that is over), when its notification was removed
  from ``spec.notifications``, or when the outbox is full (:data:`MAX_PENDING`, oldest first).
* **A renamed notification keeps its entries**: each entry records its notification's target (``target``: type,
  Secret and URL key, :attr:`modalscale.api.budgetpolicy.Notification.target`); an entry whose name is no longer
  in ``spec.notifications`` goes on, with its rounds so far, to the first notification with that target, as an
  Alertmanager receiver renamed in its configuration goes on getting the alerts still firing. Only an entry whose
  target is gone too (or that predates the field) is abandoned as removed; one whose target already has the same
  alert pending is merged into it (one send to one webhook).
* **At least once, not exactly once**: a crash after a send and before the status write that removes the
  entry sends it once more on restart. So that the second copy can say so, the status patch written before a
  round marks each entry it will send (``sendingSince``, ``sendingBy``: the sending process); a finished round
  clears the mark (or removes the entry). An entry still marked by *another* process when it is due again had a
  round whose outcome nobody recorded (that process stopped or lost the lead mid-send): it is sent again with
  :data:`POSSIBLE_DUPLICATE_FACT` added to its facts (:func:`mark_sending`), and an Alertmanager-style receiver
  sees the same fingerprint and group key as the first copy. Chat platforms cannot deduplicate a webhook
  message; which is why the copy says it may be one.

Messages are stored rendered (title, facts, severity, kind, thresholds, period): the payload builders of
``modalscale.notify.payloads`` need exactly these, so a retried message says what the first attempt said, even after a
restart, and new alert kinds need no new status fields. No URL or secret is ever stored: the alert carries
none and ``lastError`` comes from the sender's redacted message.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from modalscale.api.budgetpolicy import Period
from modalscale.api.conditions import NOTIFICATION_REMOVED, OUTBOX_FULL, PERIOD_ENDED
from modalscale.costmodel.budget import AlertKind, BudgetAlert, FiringAlert, PolicyRef
from modalscale.costmodel.budget.alerts import OPEN_ENDED_KINDS

BACKOFF_BASE_S = 30
"""Wait after the first failed round, in seconds; doubles with each further failed round."""
BACKOFF_MAX_S = 900
"""Cap of one wait between rounds, in seconds (15 min)."""
MAX_PENDING = 64
"""Most entries ``status.pendingAlerts`` holds (the CRD's ``maxItems``); the oldest are abandoned beyond it."""
SEVERITIES = ("critical", "warning", "info")
"""The values of ``AlertMessage.severity`` (``BudgetAlert.severity``); every payload builder maps each."""
MAX_TITLE_CHARS = 512
MAX_FACT_LABEL_CHARS = 64
MAX_FACT_VALUE_CHARS = 2048
MAX_FACTS = 16
MAX_ERROR_CHARS = 1024
MAX_RESOLVES = 13
"""Bounds of the stored texts and lists (the CRD's ``maxLength``/``maxItems``); longer texts are cut with an
ellipsis."""

POSSIBLE_DUPLICATE_FACT = ("Delivery", "Sent again by the operator that took over: the one that sent it first "
                                       "stopped before recording the answer, so it may have arrived already")
"""The fact a possibly duplicate copy carries (:func:`mark_sending`)."""

# Why an entry was abandoned (CamelCase reasons, defined in modalscale.api.conditions): PERIOD_ENDED,
# NOTIFICATION_REMOVED, OUTBOX_FULL.


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


@dataclass(frozen=True)
class AlertMessage:
    """A budget alert as rendered once, when decided: what every payload builder needs, and no more.

    Has the same reading surface as :class:`~modalscale.costmodel.budget.BudgetAlert` (``kind``, ``policy``,
    ``period``, ``title``, ``facts()``, ``text()``, ``severity``, ``resolved``, ``created_at``,
    ``thresholds_percent``), so ``modalscale.notify.payloads`` renders both byte for byte alike.

    Attributes:
        fact_pairs: (label, value) pairs in display order (``BudgetAlert.facts()``).
        severity: ``critical``, ``warning`` or ``info``.
        period_start, period_end: The budget period the alert is about (UTC); it expires at ``period_end``.
    """

    kind: AlertKind
    policy: PolicyRef
    period: Period
    title: str
    fact_pairs: tuple[tuple[str, str], ...]
    severity: str
    created_at: datetime
    thresholds_percent: tuple[int, ...]
    period_start: datetime
    period_end: datetime
    resolves: tuple[FiringAlert, ...] = ()
    """For ``Recovered``: the identities of the alerts it resolves (``status.pendingAlerts[].resolves``), so its
    resolve matches them in an Alertmanager-style receiver even when sent after a restart."""

    @classmethod
    def from_alert(cls, alert: BudgetAlert) -> "AlertMessage":
        """Render ``alert`` (texts cut to the stored bounds, which real alerts stay well within)."""
        facts = tuple((_cut(k, MAX_FACT_LABEL_CHARS), _cut(v, MAX_FACT_VALUE_CHARS))
                      for k, v in alert.facts()[:MAX_FACTS])
        return cls(alert.kind, alert.policy, alert.period, _cut(alert.title, MAX_TITLE_CHARS), facts,
                   alert.severity, alert.created_at, tuple(alert.thresholds_percent), alert.period_start,
                   alert.period_end, tuple(alert.resolves[:MAX_RESOLVES]))

    @property
    def resolved(self) -> bool:
        """True for a recovery notice (Alertmanager ``status: resolved``)."""
        return self.kind is AlertKind.RECOVERED

    def facts(self) -> list[tuple[str, str]]:
        """The (label, value) pairs every payload shows."""
        return list(self.fact_pairs)

    def text(self) -> str:
        """Plain-text rendering, as ``BudgetAlert.text()``."""
        return self.title + "\n" + "\n".join(f"{k}: {v}" for k, v in self.fact_pairs)


OutboxKey = tuple[str, str, datetime]
"""(notification name, alert kind, alert creation time): identifies one entry."""


@dataclass(frozen=True)
class PendingAlert:
    """One item of ``status.pendingAlerts``: an alert not yet accepted by one notification target.

    Attributes:
        notification: ``spec.notifications[].name`` of the target.
        attempts: Failed delivery rounds so far (each round is the sender's bounded retries).
        first_attempt_time: Start of the first round; None before it.
        next_attempt_time: When the entry is due again (UTC).
        last_reason: CamelCase reason of the last failure (``ServerError``, ``SecretNotFound``, ...).
        last_error: The sender's redacted message of the last failure (never a URL or secret).
        sending_since: When a round of this entry was started and not yet recorded (UTC); None otherwise.
        sending_by: The process that started it (:func:`mark_sending`'s ``holder``).
        target: Where ``notification`` posts (``Notification.target``: ``type:secretName/urlKey``); None when
            not known (an entry written before this field, or by a caller that passed no targets).
    """

    notification: str
    message: AlertMessage
    next_attempt_time: datetime
    attempts: int = 0
    first_attempt_time: datetime | None = None
    last_reason: str | None = None
    last_error: str | None = None
    sending_since: datetime | None = None
    sending_by: str | None = None
    target: str | None = None

    @property
    def key(self) -> OutboxKey:
        return (self.notification, self.message.kind.value, self.message.created_at)

@dataclass(frozen=True)
class Attempt:
    """The outcome of one delivery round of one entry (built by the operator from the sender's result).

    Attributes:
        key: :attr:`PendingAlert.key` of the entry that was sent.
        delivered: True when the target accepted the message.
        reason: CamelCase (``Delivered``, ``ServerError``, ``SecretNotFound``, ...).
        message: Redacted explanation (no URL, no secret).
        started_at: When the round started (UTC).
    """

    key: OutboxKey
    delivered: bool
    reason: str
    message: str
    started_at: datetime


@dataclass(frozen=True)
class Abandoned:
    """An entry that left the outbox undelivered, and why (:data:`PERIOD_ENDED`, :data:`NOTIFICATION_REMOVED`,
    :data:`OUTBOX_FULL`)."""

    entry: PendingAlert
    why: str

    def describe(self) -> str:
        """Human text naming the target, the alert, the rounds tried and the last error."""
        e = self.entry
        cause = {PERIOD_ENDED: "its budget period ended",
                 NOTIFICATION_REMOVED: "the notification was removed from spec.notifications",
                 OUTBOX_FULL: f"the outbox is full ({MAX_PENDING} pending alerts)"}.get(self.why, self.why)
        last = f"; last error: {e.last_error}" if e.last_error else ""
        return (f"Gave up delivering {e.message.title!r} to notification {e.notification} after {e.attempts} "
                f"attempt{'s' if e.attempts != 1 else ''}: {cause}{last}")


@dataclass(frozen=True)
class OutboxUpdate:
    """What :func:`outbox_after` decided.

    Attributes:
        pending: The outbox to persist, in order.
        delivered: Entries accepted in the rounds applied (removed).
        abandoned: Entries expired or dropped (removed; report each).
    """

    pending: tuple[PendingAlert, ...]
    delivered: tuple[PendingAlert, ...] = ()
    abandoned: tuple[Abandoned, ...] = ()


def _aware(now: datetime) -> datetime:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now must be timezone-aware (UTC), got naive {now.isoformat()}")
    return now.astimezone(timezone.utc)


def backoff_s(attempts: int) -> int:
    """Seconds to wait after ``attempts`` failed rounds: ``min(900, 30 x 2**(attempts - 1))``.

    Raises:
        ValueError: ``attempts < 1``.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    return BACKOFF_MAX_S if attempts > 10 else min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempts - 1))


def enqueue(outbox: Sequence[PendingAlert], alerts: Iterable[BudgetAlert | AlertMessage],
            notifications: Sequence[str], now: datetime, *, max_pending: int = MAX_PENDING,
            targets: Mapping[str, str] | None = None) -> tuple[tuple[PendingAlert, ...], tuple[Abandoned, ...]]:
    """Add one entry per (alert, notification), due at ``now``, after those already pending.

    Args:
        alerts: Alerts decided now, in the order rooms should see them.
        notifications: ``spec.notifications[].name``, in spec order.
        max_pending: Bound of the outbox; the oldest entries beyond it are abandoned (:data:`OUTBOX_FULL`).
        targets: Name -> ``Notification.target``, recorded on each entry (:attr:`PendingAlert.target`).
    Returns:
        (the new outbox, the entries dropped to keep the bound).
    Raises:
        ValueError: Naive ``now``.
    """
    now = _aware(now)
    out = list(outbox)
    have = {e.key for e in out}
    for alert in alerts:
        message = alert if isinstance(alert, AlertMessage) else AlertMessage.from_alert(alert)
        for name in notifications:
            entry = PendingAlert(name, message, now, target=(targets or {}).get(name))
            if entry.key not in have:
                out.append(entry)
                have.add(entry.key)
    dropped = out[:max(0, len(out) - max_pending)]
    return tuple(out[len(dropped):]), tuple(Abandoned(e, OUTBOX_FULL) for e in dropped)


def expires_at(message: AlertMessage) -> datetime:
    """When an entry of ``message`` is given up (:data:`PERIOD_ENDED`): its period's end; a recovery that resolves
    an open-ended alert (``GovernanceBlind``, ``SpendAnomaly``, whose incident no period's end closes) one whole
    period after it was decided, if later. Expired with the period, a resolve decided just before its end (the
    cause ended at 23:59:30, the receiver refused its first round) was abandoned and the incident stayed open."""
    if any(f.kind in OPEN_ENDED_KINDS for f in message.resolves):
        return max(message.period_end, message.created_at + (message.period_end - message.period_start))
    return message.period_end


def _waits_for_firing(e: PendingAlert, outbox: Sequence[PendingAlert]) -> bool:
    """True for a recovery whose notification still has an entry pending (due, backing off or in flight) of an
    alert it resolves, decided before it: it is sent after that one is delivered or abandoned. Sent by its own
    ``next_attempt_time`` alone, a resolve decided while its firing backs off after failed rounds went out first
    (an open-ended alert's cause can end while its firing is pending), and an Alertmanager-style receiver that
    then got the firing kept that incident open for good. A firing decided with the recovery (the new period's
    50 % at the evaluation that recovers the old one's, the same labels) goes after it, in outbox order: sent
    first, the recovery would close the new incident."""
    kinds = {f.kind for f in e.message.resolves}
    return bool(kinds) and any(
        o.notification == e.notification and o.message.kind in kinds and o.message.created_at < e.message.created_at
        for o in outbox)


def due_alerts(outbox: Sequence[PendingAlert], now: datetime,
               in_flight: Collection[OutboxKey] = frozenset()) -> tuple[PendingAlert, ...]:
    """The entries to send now: ``next_attempt_time <= now``, not in flight and not a recovery whose firing is still
    pending (:func:`_waits_for_firing`), in outbox order.

    Raises:
        ValueError: Naive ``now``.
    """
    now = _aware(now)
    return tuple(e for e in outbox if e.next_attempt_time <= now and e.key not in in_flight
                 and not _waits_for_firing(e, outbox))


def mark_sending(outbox: Sequence[PendingAlert], sends: Sequence[PendingAlert], now: datetime, holder: str
                 ) -> tuple[tuple[PendingAlert, ...], tuple[PendingAlert, ...]]:
    """Mark the entries about to be sent, and say which may be duplicates.

    Args:
        outbox: The pending entries to write (``sends`` are among them).
        sends: The entries this evaluation sends once the status is written (:func:`due_alerts`).
        now: Timezone-aware UTC instant of this evaluation.
        holder: This process (unique per process: a restarted operator is another holder).
    Returns:
        ``(outbox with sends marked sending since now by holder, sends to deliver)``. A send whose stored mark is
        another holder's (a round started elsewhere whose outcome was never recorded) carries
        :data:`POSSIBLE_DUPLICATE_FACT` as its last fact (in the copy sent, not in the stored message). A mark of
        this holder is not that: its round never started (e.g. the receiver's Secret could not be read).
    Raises:
        ValueError: Naive ``now``.
    """
    now = _aware(now)
    keys = {e.key for e in sends}
    marked = tuple(replace(e, sending_since=now, sending_by=holder) if e.key in keys else e for e in outbox)
    out = []
    for e in sends:
        if e.sending_by is not None and e.sending_by != holder:
            facts = (*e.message.fact_pairs[:MAX_FACTS - 1], POSSIBLE_DUPLICATE_FACT)
            e = replace(e, message=replace(e.message, fact_pairs=facts))
        out.append(replace(e, sending_since=now, sending_by=holder))
    return marked, tuple(out)


def next_due_s(outbox: Sequence[PendingAlert], now: datetime,
               in_flight: Collection[OutboxKey] = frozenset()) -> float | None:
    """Seconds until the earliest entry not in flight is due (0 if one is due now); None when there is none. A
    recovery waiting for its firing (:func:`_waits_for_firing`) is not counted: the firing's delivery (a round's
    end wakes the policy) or expiry comes first."""
    now = _aware(now)
    waits = [(e.next_attempt_time - now).total_seconds() for e in outbox
             if e.key not in in_flight and not _waits_for_firing(e, outbox)]
    return max(0.0, min(waits)) if waits else None


def outbox_after(outbox: Sequence[PendingAlert], attempts: Iterable[Attempt], now: datetime,
                 notifications: Collection[str] | None,
                 in_flight: Collection[OutboxKey] = frozenset(),
                 targets: Mapping[str, str] | None = None) -> OutboxUpdate:
    """Apply finished delivery rounds, then carry entries of renamed notifications and expire what can no longer
    be delivered.

    Args:
        outbox: ``status.pendingAlerts`` as stored.
        attempts: Rounds finished since the outbox was stored; one for an entry no longer pending is ignored.
        now: Timezone-aware UTC instant of this evaluation.
        notifications: ``spec.notifications[].name`` now, in spec order; None = unknown (invalid spec): expire by
            period only.
        in_flight: Keys being sent right now: never expired or carried here (the round in flight decides their
            fate; a failed one is carried at the next call).
        targets: Name -> ``Notification.target`` of ``notifications`` (None: not known, nothing is carried).
    Returns:
        :class:`OutboxUpdate`: delivered entries removed; failed ones with ``attempts + 1``, the sending mark
        cleared, ``last_reason``,
        ``last_error`` (cut to :data:`MAX_ERROR_CHARS`), ``first_attempt_time`` set once and
        ``next_attempt_time = now + backoff_s(attempts)``; then entries whose period ended
        (:func:`expires_at` ``<= now``) are abandoned; an entry whose notification is gone goes on to the first of
        ``notifications`` with its :attr:`~PendingAlert.target` (one entry with the one pending there already,
        :func:`_merged`; none when delivered there in these rounds), else is abandoned; an entry of a
        notification still there records its target now.
    Raises:
        ValueError: Naive ``now``.
    """
    now = _aware(now)
    by_key = {a.key: a for a in attempts}
    pending: list[PendingAlert] = []
    delivered: list[PendingAlert] = []
    abandoned: list[Abandoned] = []
    names = list(notifications) if notifications is not None else None
    targets = targets or {}
    kept = {a.key for a in by_key.values() if a.delivered}
    for e in outbox:
        a = by_key.get(e.key)
        if a is not None:
            if a.delivered:
                delivered.append(e)
                continue
            n = e.attempts + 1
            e = replace(e, attempts=n, first_attempt_time=e.first_attempt_time or a.started_at,
                        last_reason=_cut(a.reason, 128), last_error=_cut(a.message, MAX_ERROR_CHARS) or None,
                        next_attempt_time=now + timedelta(seconds=backoff_s(n)), sending_since=None,
                        sending_by=None)
        if e.key in in_flight:
            pending.append(e)
        elif expires_at(e.message) <= now:
            abandoned.append(Abandoned(e, PERIOD_ENDED))
        elif names is not None and e.notification not in names:
            renamed = next((n for n in names if e.target is not None and targets.get(n) == e.target), None)
            if renamed is None:
                abandoned.append(Abandoned(e, NOTIFICATION_REMOVED))
            elif (carried := replace(e, notification=renamed)).key not in kept:  # else delivered there just now
                pending.append(carried)
        else:
            target = targets.get(e.notification, e.target)
            pending.append(e if target == e.target else replace(e, target=target))
    return OutboxUpdate(_merged(pending), tuple(delivered), tuple(abandoned))


def _merged(pending: Sequence[PendingAlert]) -> tuple[PendingAlert, ...]:
    """``pending`` with one entry per key: an entry carried to a renamed notification that already had the alert
    pending is one entry, at the first one's place, with the rounds of whichever failed more (its failures are
    the target's: ``AlertDelivered`` goes on naming them)."""
    first: dict[OutboxKey, PendingAlert] = {}
    for e in pending:
        if e.key not in first or e.attempts > first[e.key].attempts:
            first[e.key] = e
    return tuple(first.values())


__all__ = [
    "Abandoned", "AlertMessage", "Attempt", "BACKOFF_BASE_S", "BACKOFF_MAX_S", "MAX_PENDING", "OutboxKey",
    "OutboxUpdate", "POSSIBLE_DUPLICATE_FACT", "PendingAlert", "backoff_s", "due_alerts", "enqueue", "expires_at",
    "mark_sending",
    "next_due_s", "outbox_after",
]
