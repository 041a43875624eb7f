"""The gateway exports every per-tenant accounting counter that ``modalscale cost showback`` reads, under the
reader's names and labels (the two were once spelled differently: ``..._tenant_service_seconds_total`` written,
``..._service_seconds_total`` read, so showback would have priced every service as idle)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from modalscale.costmodel.showback import ACCOUNTING_METRICS, CODE_LABEL, MODALITY_LABEL, TENANT_LABEL
from modalscale.gateway.metrics import GatewayMetrics


def test_every_accounting_counter_showback_reads_is_exported_with_its_labels() -> None:
    m = GatewayMetrics()
    m.gateway_requests.labels("acme", "image", "http", "200").inc()
    samples = {(s.name, frozenset(s.labels)) for fam in text_string_to_metric_families(generate_latest(m.registry)
                                                                                      .decode()) for s in fam.samples}
    for name in ACCOUNTING_METRICS:
        labels = next((lbl for n, lbl in samples if n == name), None)
        assert labels is not None, f"{name} is not exported"
        assert {TENANT_LABEL, MODALITY_LABEL} <= labels, (name, labels)
    assert CODE_LABEL in next(lbl for n, lbl in samples if n == ACCOUNTING_METRICS[0])


def test_the_default_tenants_accounting_series_exist_from_zero_before_any_request() -> None:
    text = generate_latest(GatewayMetrics().registry).decode()
    for name in ACCOUNTING_METRICS[1:]:
        assert f'{name}{{modality="text",tenant="default"}} 0.0' in text, name


def test_every_labelled_counter_of_the_gateway_exists_from_zero_for_each_of_its_values() -> None:
    """A series that appears with its first increment already counted is lost to increase() and to max - min over a
    window: the demo at 614a467 counted 850 gateway choices for 853 requests answered."""
    from modalscale.gateway.metrics import ACTIVATION_RESULTS, PICK_POLICIES, REJECT_REASONS, RETRY_PROTOCOLS
    from modalscale.gateway.tenant_budget import TENANT_BUDGET_EXCEEDED

    text = generate_latest(GatewayMetrics().registry).decode()
    for name, label, values in (("modalscale_gateway_picks_total", "policy", PICK_POLICIES),
                                ("modalscale_gateway_retries_total", "protocol", RETRY_PROTOCOLS),
                                ("modalscale_gateway_rejected_total", "reason", REJECT_REASONS),
                                ("modalscale_gateway_activation_requests_total", "result", ACTIVATION_RESULTS)):
        for value in values:
            assert f'{name}{{{label}="{value}"}} 0.0' in text, (name, value)
    assert TENANT_BUDGET_EXCEEDED in REJECT_REASONS


def test_the_reasons_admission_refuses_with_are_the_ones_exported_from_zero() -> None:
    import re
    from pathlib import Path

    import modalscale.gateway.admission as admission
    from modalscale.gateway.metrics import REJECT_REASONS

    raised = set(re.findall(r'Rejected\("(\w+)"', Path(admission.__file__).read_text()))
    assert raised and raised <= set(REJECT_REASONS), raised
