"""Budget periods in IANA time zones: DST days, week starts, month ends, interval splitting."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from modalscale.api.budgetpolicy import InvalidTimeZone, Period
from modalscale.costmodel.periods import period_bounds, period_of_span, split_interval

UTC = timezone.utc
H = timedelta(hours=1)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "start", "hours"),
    [
        # Berlin springs forward on 2026-03-29 (CET+1 -> CEST+2): local midnight 23:00Z, next midnight 22:00Z.
        (utc(2026, 3, 29, 12), utc(2026, 3, 28, 23), 23),
        # Berlin falls back on 2026-10-25 (CEST+2 -> CET+1): 22:00Z to 23:00Z next day.
        (utc(2026, 10, 25, 12), utc(2026, 10, 24, 22), 25),
        (utc(2026, 6, 15, 12), utc(2026, 6, 14, 22), 24),
    ],
    ids=["spring-forward-23h", "fall-back-25h", "summer-24h"],
)
def test_daily_period_in_berlin_across_dst(now: datetime, start: datetime, hours: int) -> None:
    s, e = period_bounds(Period.DAILY, "Europe/Berlin", now)
    assert s == start
    assert e - s == timedelta(hours=hours)


def test_weekly_period_starts_on_monday_local_midnight() -> None:
    # Wednesday 2026-12-02 in Berlin; Monday 2026-11-30 00:00 CET = 2026-11-29T23:00Z
    s, e = period_bounds("Weekly", "Europe/Berlin", utc(2026, 12, 2, 9))
    assert s == utc(2026, 11, 29, 23)
    assert e == utc(2026, 12, 6, 23)
    assert s.astimezone(ZoneInfo("Europe/Berlin")).weekday() == 0


def test_week_containing_the_fall_back_is_one_hour_longer() -> None:
    s, e = period_bounds("Weekly", "Europe/Berlin", utc(2026, 10, 22))
    assert e - s == timedelta(days=7, hours=1)


@pytest.mark.parametrize(
    ("now", "start", "end"),
    [
        (utc(2026, 2, 14), utc(2026, 2, 1), utc(2026, 3, 1)),        # 28 days
        (utc(2028, 2, 29, 23, 59, 59), utc(2028, 2, 1), utc(2028, 3, 1)),  # leap year, last second
        (utc(2026, 12, 31, 23), utc(2026, 12, 1), utc(2027, 1, 1)),  # year rollover
        (utc(2026, 1, 31, 12), utc(2026, 1, 1), utc(2026, 2, 1)),
    ],
    ids=["feb", "leap-feb", "december", "january"],
)
def test_monthly_period_month_ends_utc(now: datetime, start: datetime, end: datetime) -> None:
    assert period_bounds("Monthly", "UTC", now) == (start, end)


def test_monthly_period_in_berlin_march_is_31_days_minus_an_hour() -> None:
    s, e = period_bounds("Monthly", "Europe/Berlin", utc(2026, 3, 15))
    assert (s, e) == (utc(2026, 2, 28, 23), utc(2026, 3, 31, 22))
    assert e - s == timedelta(days=31) - H


def test_new_year_in_berlin_starts_before_utc_midnight() -> None:
    # 2026-12-31T23:30Z is already 2027-01-01 00:30 in Berlin
    assert period_bounds("Monthly", "Europe/Berlin", utc(2026, 12, 31, 23, 30))[0] == utc(2026, 12, 31, 23)


def test_bounds_are_half_open_at_the_boundary() -> None:
    s, e = period_bounds("Daily", "UTC", utc(2026, 5, 2))
    assert s == utc(2026, 5, 2) and e == utc(2026, 5, 3)
    assert period_bounds("Daily", "UTC", utc(2026, 5, 1, 23, 59, 59, 999999)) == (utc(2026, 5, 1), utc(2026, 5, 2))


def test_dst_gap_at_local_midnight_starts_the_day_at_the_transition() -> None:
    # America/Santiago jumps from 00:00 (-04) to 01:00 (-03) on 2026-09-06: the day starts at 04:00Z, 23 h long.
    s, e = period_bounds("Daily", "America/Santiago", utc(2026, 9, 6, 12))
    assert s == utc(2026, 9, 6, 4)
    assert e - s == timedelta(hours=23)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "America/Santiago",
                                  "Australia/Lord_Howe"])
@pytest.mark.parametrize("period", list(Period))
def test_bounds_contain_now_and_tile_time(zone: str, period: Period) -> None:
    rng = random.Random(20261130)
    for _ in range(60):
        now = utc(2026, 1, 1) + timedelta(seconds=rng.randrange(366 * 86400))
        s, e = period_bounds(period, zone, now)
        assert s <= now < e
        assert period_bounds(period, zone, e)[0] == e  # the next period starts where this one ends
        assert period_bounds(period, zone, s - timedelta(microseconds=1))[1] == s


def test_split_interval_cuts_at_local_midnights_and_preserves_length() -> None:
    start, end = utc(2026, 3, 28, 20), utc(2026, 3, 30, 1)
    segments = split_interval(start, end, "Daily", "Europe/Berlin")
    assert [(s.start, s.end) for s in segments] == [
        (utc(2026, 3, 28, 20), utc(2026, 3, 28, 23)),
        (utc(2026, 3, 28, 23), utc(2026, 3, 29, 22)),  # the 23 h day
        (utc(2026, 3, 29, 22), utc(2026, 3, 30, 1)),
    ]
    assert sum((s.end - s.start for s in segments), timedelta()) == end - start
    for seg in segments:
        assert seg.period_start <= seg.start < seg.end <= seg.period_end


def test_split_interval_inside_one_period_is_one_segment_and_empty_when_reversed() -> None:
    assert len(split_interval(utc(2026, 5, 1, 1), utc(2026, 5, 1, 2), "Daily", "UTC")) == 1
    assert split_interval(utc(2026, 5, 1, 2), utc(2026, 5, 1, 2), "Daily", "UTC") == []
    assert split_interval(utc(2026, 5, 1, 3), utc(2026, 5, 1, 2), "Daily", "UTC") == []


def test_naive_now_and_unknown_zone_are_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        period_bounds("Daily", "UTC", datetime(2026, 1, 1))
    with pytest.raises(InvalidTimeZone, match="Mars/Olympus"):
        period_bounds("Daily", "Mars/Olympus", utc(2026, 1, 1))


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe",
                                  "Pacific/Apia"])
@pytest.mark.parametrize("period", list(Period))
def test_the_kind_of_every_period_is_read_back_from_its_bounds(zone: str, period: Period) -> None:
    """``period_of_span`` names the kind of any period ``period_bounds`` gives (DST days of 23 and 25 h, Lord
    Howe's half hour, Samoa's skipped day in 2011), so a recovery after a ``spec.period`` change labels the
    closed period's alerts as they fired."""
    rng = random.Random(20261207)
    for now in [utc(2011, 12, 30, 12), *(utc(2010, 1, 1) + timedelta(seconds=rng.randrange(17 * 366 * 86400))
                                          for _ in range(80))]:
        assert period_of_span(*period_bounds(period, zone, now)) is period


@pytest.mark.parametrize("hours", [0, 6, 80, 400, 24 * 45])
def test_a_span_of_no_periods_length_has_no_kind(hours: int) -> None:
    start = utc(2026, 11, 30)
    assert period_of_span(start, start + timedelta(hours=hours)) is None
    assert period_of_span(None, start) is None and period_of_span(start, None) is None


@pytest.mark.parametrize(("zone", "period", "now"), [
    ("Antarctica/Casey", Period.DAILY, utc(2023, 3, 8, 20)),  # a 27 h day (+8 -> +11 -> +8)
    ("Antarctica/Vostok", Period.DAILY, utc(1994, 1, 31, 12)),
    ("Antarctica/Vostok", Period.WEEKLY, utc(1994, 1, 31, 12)),
])
def test_the_kind_is_read_back_where_a_zone_moved_its_midnight_by_hours(zone: str, period: Period,
                                                                      now: datetime) -> None:
    """Found by review: a 27 h day of Antarctica/Casey (2023) read as no period at all with DST's 22-26 h range."""
    assert period_of_span(*period_bounds(period, zone, now)) is period
