"""Tenant labels (modalscale.gateway.tenants): absent -> default, cleaned, at most `cap` names, the rest other."""

from __future__ import annotations

import pytest

from modalscale.gateway.tenants import MAX_LABEL_CHARS, TenantFolder, clean


def test_first_cap_tenants_keep_their_name_and_later_ones_fold_into_other() -> None:
    folder = TenantFolder(cap=2)
    assert [folder.label(t) for t in ("acme", "globex", "initech", "acme", "umbrella", "globex")] == \
        ["acme", "globex", "other", "acme", "other", "globex"]
    assert folder.named == ("acme", "globex")


@pytest.mark.parametrize("raw", [None, "", "   ", "\t"])
def test_absent_or_blank_header_is_default_and_takes_no_place(raw: str | None) -> None:
    folder = TenantFolder(cap=1)
    assert folder.label(raw) == "default"
    assert folder.label("acme") == "acme"
    assert folder.named == ("acme",)


def test_default_and_other_sent_as_names_take_no_place() -> None:
    folder = TenantFolder(cap=1)
    assert folder.label("other") == "other" and folder.label("default") == "default"
    assert folder.label("acme") == "acme"


def test_cap_zero_folds_every_named_tenant() -> None:
    folder = TenantFolder(cap=0)
    assert folder.label("acme") == "other" and folder.label(None) == "default"
    with pytest.raises(ValueError, match="cap must be >= 0"):
        TenantFolder(cap=-1)


@pytest.mark.parametrize(("raw", "label"), [
    ("  acme  ", "acme"),
    ("acme\nx-injected: 1", "acme_x-injected: 1"),
    ("caf\u00e9", "caf_"),
    ("\x00\x01", "__"),
    ("a" * 500, "a" * MAX_LABEL_CHARS),
    ('quote"back\\slash', 'quote"back\\slash'),
])
def test_label_values_are_printable_ascii_and_bounded(raw: str, label: str) -> None:
    assert clean(raw) == label
    assert len(clean(raw)) <= MAX_LABEL_CHARS and all(" " <= c <= "~" for c in clean(raw))


def test_names_equal_after_cleaning_share_one_place() -> None:
    folder = TenantFolder(cap=1)
    assert folder.label(" acme") == folder.label("acme ") == "acme"
    assert folder.named == ("acme",)
