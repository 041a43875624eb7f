"""OpenCost settings and reasons: validated at start-up with every error listed; reasons in one place."""

from __future__ import annotations

import pytest

from modalscale.api import conditions as R
from modalscale.costmodel.opencost import PriceSource
from modalscale.operator.settings import ConfigError, Settings


def test_opencost_url_and_refresh_are_read() -> None:
    s = Settings.from_env({"MODALSCALE_OPENCOST_URL": "http://opencost.opencost:9003",
                           "MODALSCALE_OPENCOST_REFRESH_SECONDS": "60"})
    assert (s.opencost_url, s.opencost_refresh_s) == ("http://opencost.opencost:9003", 60.0)
    assert (Settings.from_env({}).opencost_url, Settings.from_env({}).opencost_refresh_s) == ("", 300.0)


def test_bad_opencost_settings_are_all_reported_with_the_fix() -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"MODALSCALE_OPENCOST_URL": "opencost:9003",
                           "MODALSCALE_OPENCOST_REFRESH_SECONDS": "0"})
    text = str(err.value)
    assert "MODALSCALE_OPENCOST_URL='opencost:9003': use an http:// or https:// URL" in text
    assert "MODALSCALE_OPENCOST_REFRESH_SECONDS='0': out of range; use a value in [1, 86400]" in text


def test_priced_reasons_are_the_price_sources() -> None:
    assert (R.PRICED_BY_OPENCOST, R.PRICED_BY_CATALOG, R.CATALOG_FALLBACK) == tuple(s.value for s in PriceSource)
    assert R.PRICED in R.ISVC_CONDITION_TYPES
