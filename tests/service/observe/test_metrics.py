"""The service's own counters: label values stay a closed set whatever a source reports."""

from __future__ import annotations

from autoscaler.service.observe.metrics import NOTICE_REJECTIONS, ServiceMetrics


def test_rejected_notices_are_counted_by_reason_from_zero() -> None:
    metrics = ServiceMetrics()
    text = metrics.exposition().decode()
    for reason in NOTICE_REJECTIONS:  # exported at 0, so increase() sees the first refusal
        assert f'gpu_autoscaler_notices_rejected_total{{reason="{reason}"}} 0.0' in text
    metrics.count_rejected_notices({"forged": 2, "malformed": 1, "made-up\nlabel": 5})
    text = metrics.exposition().decode()
    assert 'gpu_autoscaler_notices_rejected_total{reason="forged"} 2.0' in text
    assert 'gpu_autoscaler_notices_rejected_total{reason="malformed"} 1.0' in text
    assert "made-up" not in text
