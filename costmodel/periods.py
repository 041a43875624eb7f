"""Budget periods (Daily, Weekly from Monday, Monthly) as UTC instants, computed in an IANA time zone.

Why a module: a budget resets at local midnight, not UTC midnight, so a Berlin daily budget lasts 23 h on
the last Sunday of March and 25 h on the last Sunday of October, and a month is 28 to 31 days. All bounds are
half-open ``[start, end)`` and returned as timezone-aware UTC datetimes; local wall-clock arithmetic uses
:mod:`zoneinfo` (IANA tz database, ``tzdata`` package where the OS has none). What a period and a zone name
are (``Period``, ``resolve_zone``, ``InvalidTimeZone``) is the spec's: :mod:`modalscale.api.budgetpolicy`.

A period starts at local 00:00 of its first day. Where local midnight does not exist (a DST gap at
midnight, e.g. America/Santiago), the period starts at the transition instant (``fold=0`` maps the missing
wall time onto it); where local midnight happens twice, the first occurrence is used. :func:`period_bounds`
always returns bounds with ``start <= now < end``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

from modalscale.api.budgetpolicy import Period, resolve_zone


def _require_aware(when: datetime, name: str) -> None:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware (UTC), got naive {when.isoformat()}")


def _first_day(period: Period, day: date) -> date:
    if period is Period.DAILY:
        return day
    if period is Period.WEEKLY:
        return day - timedelta(days=day.weekday())  # Monday = 0
    return day.replace(day=1)


def _next_first_day(period: Period, first: date) -> date:
    if period is Period.DAILY:
        return first + timedelta(days=1)
    if period is Period.WEEKLY:
        return first + timedelta(days=7)
    return date(first.year + first.month // 12, first.month % 12 + 1, 1)


def _previous_first_day(period: Period, first: date) -> date:
    if period is Period.DAILY:
        return first - timedelta(days=1)
    if period is Period.WEEKLY:
        return first - timedelta(days=7)
    return (first - timedelta(days=1)).replace(day=1)


def _local_midnight_utc(day: date, zone: ZoneInfo) -> datetime:
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(timezone.utc)


def period_bounds(period: Period | str, tz: str | ZoneInfo, now: datetime) -> tuple[datetime, datetime]:
    """The period containing ``now``, as UTC instants ``[start, end)``.

    Args:
        period: ``Period`` or its CRD value (``"Daily"``, ``"Weekly"``, ``"Monthly"``); weeks start on Monday.
        tz: IANA time zone name in which periods start at local midnight.
        now: Timezone-aware instant (any offset); never read from the clock here.
    Returns:
        ``(start_utc, end_utc)`` with ``start_utc <= now < end_utc``; ``end - start`` is 23/24/25 h for a
        Daily period across DST and 28..31 days (+/- 1 h) for a Monthly one.
    Raises:
        InvalidTimeZone: Unknown ``tz``.
        ValueError: Naive ``now`` or unknown ``period``.
    """
    period = Period(period)
    zone = resolve_zone(tz)
    _require_aware(now, "now")
    first = _first_day(period, now.astimezone(zone).date())
    start = _local_midnight_utc(first, zone)
    end = _local_midnight_utc(_next_first_day(period, first), zone)
    # Repeated or missing local midnights can put `now` just outside; step to the neighbouring period.
    while now < start:
        first = _previous_first_day(period, first)
        start, end = _local_midnight_utc(first, zone), start
    while now >= end:
        first = _next_first_day(period, first)
        start, end = end, _local_midnight_utc(_next_first_day(period, first), zone)
    return start, end


@dataclass(frozen=True)
class PeriodSegment:
    """A piece of a time span lying inside one period (all UTC, half-open ``[start, end)``)."""

    start: datetime
    end: datetime
    period_start: datetime
    period_end: datetime

    @property
    def seconds(self) -> float:
        """Length in seconds (for display; money uses :func:`segment_microseconds`)."""
        return (self.end - self.start).total_seconds()


def segment_microseconds(start: datetime, end: datetime) -> int:
    """Exact length of ``[start, end)`` in microseconds (an int, so money arithmetic stays exact)."""
    delta = end - start
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def split_interval(start: datetime, end: datetime, period: Period | str, tz: str | ZoneInfo) -> list[PeriodSegment]:
    """Cut ``[start, end)`` at every period boundary.

    Args:
        start: Timezone-aware start.
        end: Timezone-aware end; ``end <= start`` gives ``[]``.
        period: As in :func:`period_bounds`.
        tz: As in :func:`period_bounds`.
    Returns:
        Consecutive segments in time order whose lengths add up to ``end - start``, each inside one period.
    Raises:
        InvalidTimeZone, ValueError: As in :func:`period_bounds`.
    """
    _require_aware(start, "start")
    _require_aware(end, "end")
    segments: list[PeriodSegment] = []
    cursor = start.astimezone(timezone.utc)
    stop = end.astimezone(timezone.utc)
    while cursor < stop:
        p_start, p_end = period_bounds(period, tz, cursor)
        seg_end = min(stop, p_end)
        segments.append(PeriodSegment(cursor, seg_end, p_start, p_end))
        cursor = seg_end
    return segments


_LENGTHS_H: dict[Period, tuple[int, int]] = {
    Period.DAILY: (12, 72),
    Period.WEEKLY: (4 * 24, 14 * 24),
    Period.MONTHLY: (20 * 24, 40 * 24),
}
"""Hours that tell the kinds of period apart, wide of any length a period can have in a zone: DST moves a local
midnight by 1-2 h, zones have moved theirs by up to 7 h in a day (Antarctica/Casey +8 <-> +11 up to 2023: days of 21
and 27 h; Antarctica/Vostok 1994: 17 and 31 h), and a zone that crossed the date line skipped or repeated a whole day
(Pacific/Apia skipped 30 Dec 2011: that week had 6 days). The ranges do not overlap."""


def period_of_span(start: datetime | None, end: datetime | None) -> Period | None:
    """The kind of period ``[start, end)`` is (``status.periodStart`` / ``periodEnd`` as an earlier evaluation
    stored them, in any ``spec.timeZone``), read from its length; None when either is missing or the length is
    none of a period's (the kinds' ranges, ``_LENGTHS_H``, do not overlap)."""
    if start is None or end is None:
        return None
    return next((p for p, (low_h, high_h) in _LENGTHS_H.items()
                 if timedelta(hours=low_h) <= end - start <= timedelta(hours=high_h)), None)


def period_in_progress(period: Period | str, start: datetime | None, end: datetime | None, now: datetime) -> bool:
    """Whether ``[start, end)``, a period an earlier evaluation stored (``status.periodStart`` / ``periodEnd``,
    perhaps computed in another ``spec.timeZone``), is a ``period`` still in progress at ``now``.

    A zone change moves where periods start, not which period is in progress: the one stored goes on, with its
    spend, the thresholds it alerted and the enforcement in force, until the new zone's current period ends
    (``docs/budgets.md``, "Changing the time zone"). A stored period of another kind (``spec.period`` changed:
    its length is not one of ``period``'s) or one that is over is not.

    Args:
        period: ``spec.period`` now.
        start, end: The stored bounds (None when status has none: never in progress).
        now: Timezone-aware instant.
    """
    if start is None or end is None:
        return False
    _require_aware(now, "now")
    return start <= now < end and period_of_span(start, end) is Period(period)
