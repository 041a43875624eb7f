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
