"""Every reader of a stored RFC 3339 time takes one whose zone offset moves it past year 1 or 9999 in UTC as
unreadable, in the way it reports unreadable times (None, or its declared error), never an ``OverflowError``
(found by an adversarial probe, 6 Dec 2026: the activation annotation and the ledger's times raised it)."""

from __future__ import annotations

import json

import pytest

from modalscale.api import isvc_status
from modalscale.api.annotations import (
    ACTIVATION_ANNOTATION,
    InvalidAnnotation,
    TenantReject,
    activation_requested_at,
    reject_annotation_key,
    tenant_rejections,
)
from modalscale.kubectl import render

OUT_OF_RANGE = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"]


@pytest.mark.parametrize("raw", OUT_OF_RANGE)
def test_status_and_plugin_readers_give_none(raw: str) -> None:
    assert isvc_status.parse_time(raw) is None
    assert render.parse_time(raw) is None
    assert activation_requested_at({ACTIVATION_ANNOTATION: raw}) is None


@pytest.mark.parametrize("raw", OUT_OF_RANGE)
def test_a_tenant_rejection_until_out_of_range_is_an_invalid_annotation_and_refuses_no_one(raw: str) -> None:
    key = reject_annotation_key("ns", "budget")
    value = json.dumps({"policy": "ns/budget", "tenants": ["a"], "until": raw, "thresholdPercent": 100})
    with pytest.raises(InvalidAnnotation, match="'until' must be an RFC 3339 time"):
        TenantReject.decode(key, value)
    assert tenant_rejections({key: value}) == {}


def test_readable_times_are_read_in_utc() -> None:
    for read in (isvc_status.parse_time, render.parse_time):
        when = read("2026-12-01T13:00:05+01:00")
        assert when is not None and when.isoformat() == "2026-12-01T12:00:05+00:00"
