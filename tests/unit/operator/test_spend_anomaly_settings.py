"""``MODALSCALE_SPEND_ANOMALY`` takes only settings the detector can work with: finite numbers, and fields that agree
with each other (found by a user trial: ``recent_s=inf`` and ``z_threshold=2,clear_z=9`` were taken)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from modalscale.costmodel.anomaly import MAX_HORIZON_S, AnomalyConfig, BurnSample, replay, trim_history
from modalscale.operator.settings import ConfigError, Settings


def _refusal(raw: str) -> str:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"MODALSCALE_SPEND_ANOMALY": raw})
    lines = [ln.strip() for ln in str(err.value).splitlines()[1:]]
    assert all(ln.startswith("MODALSCALE_SPEND_ANOMALY: ") for ln in lines), lines
    return "\n".join(lines)


@pytest.mark.parametrize("raw", ["recent_s=inf", "z_threshold=Infinity", "clear_after_s=1e999", "smooth_s=nan",
                                 "floor_ratio=-inf"])
def test_a_value_that_is_not_a_finite_number_is_refused_naming_the_field(raw: str) -> None:
    key, _, value = raw.partition("=")
    text = _refusal(raw)
    assert f"{key}={value!r} is not a finite number; use e.g. {key}=" in text, text


@pytest.mark.parametrize(("raw", "both"), [
    ("z_threshold=2,clear_z=9", ("clear_z=9", "z_threshold=2")),
    ("clear_z=6.5", ("clear_z=6.5", "z_threshold=6")),
    ("recent_s=100", ("recent_s=100", "smooth_s=120")),
    ("recent_s=600,smooth_s=600", ("recent_s=600", "smooth_s=600")),
    ("slot_s=90000", ("slot_s=90000", "season_s=86400")),
    ("season_s=3600,slot_s=3601", ("slot_s=3601", "season_s=3600")),
])
def test_fields_that_contradict_each_other_are_refused_naming_both(raw: str, both: tuple[str, str]) -> None:
    text = _refusal(raw)
    assert all(f in text for f in both), text
    assert "use " in text


def test_a_history_longer_than_the_detector_keeps_is_refused_naming_the_fields() -> None:
    text = _refusal("seasons=100000,season_s=86400")
    assert "seasons x season_s + slot_s" in text and f"{MAX_HORIZON_S:g}" in text


def test_the_refused_settings_are_ones_the_detector_cannot_work_with() -> None:
    """Why two of the rules: with clear_z above z_threshold one rise of spend is alerted every few minutes (it is
    calm at once, ends, starts again), where clear_z at or below it alerts once; a history far past MAX_HORIZON_S
    cannot even be trimmed (the clock overflows)."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(OverflowError):
        trim_history([], t0, AnomalyConfig(seasons=10**6, season_s=86_400.0))
    flat = [BurnSample(t0 + timedelta(minutes=i), 10.0 + (i % 2), 1, 10.0 + (i % 2)) for i in range(60)]
    rise = [BurnSample(t0 + timedelta(minutes=60 + i), 20.0, 1, 20.0) for i in range(30)]

    def alerts(clear_z: float) -> int:
        cfg = AnomalyConfig(z_threshold=2.0, clear_z=clear_z, clear_after_s=60.0, min_recent_samples=5)
        return len(replay(flat + rise, cfg))

    assert alerts(2.0) == alerts(1.0) == 1
    assert alerts(9.0) >= 5


def test_settings_that_agree_are_taken() -> None:
    got = Settings.from_env({"MODALSCALE_SPEND_ANOMALY": "z_threshold=4,clear_z=4,recent_s=121,season_s=3600,"
                                                         "slot_s=3600,seasons=24"}).spend_anomaly
    assert (got.z_threshold, got.clear_z, got.recent_s, got.slot_s, got.seasons) == (4, 4, 121, 3600, 24)
    assert AnomalyConfig().problems() == []
