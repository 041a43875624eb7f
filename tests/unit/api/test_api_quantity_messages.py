"""A bad ``spec.resources`` quantity's message shows examples of that field's own kind (user report item 15:
the memory error offered "500m", which is half a byte)."""

from __future__ import annotations

import pytest

from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import parse_spec


@pytest.mark.parametrize(("field", "value", "examples", "not_offered"), [
    ("memory", "2GB", ['"8Gi"', '"512Mi"'], ['"500m"', '"2"']),
    ("memory", "500m", ['"8Gi"', '"512Mi"'], ['"500m"']),
    ("cpu", "2 cores", ['"2"', '"500m"'], ['"8Gi"']),
], ids=["memory-GB", "memory-millibytes", "cpu"])
def test_a_bad_quantity_error_offers_examples_of_its_own_field(field: str, value: str, examples: list[str],
                                                                not_offered: list[str]) -> None:
    with pytest.raises(InvalidSpec) as err:
        parse_spec({"resources": {field: value}})
    text = str(err.value)
    assert f"spec.resources.{field}" in text
    assert all(e in text for e in examples), text
    assert not any(e in text.split("pattern")[0] for e in not_offered), text
