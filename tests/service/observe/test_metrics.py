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


def test_spot_placement_scores_are_gauges_of_the_last_read_and_a_series_not_read_goes() -> None:
    from autoscaler.model.snapshot import SpotScore

    def score(zone: str, value: int) -> SpotScore:
        return SpotScore(cloud="aws", region="us-east-1", zone=zone,
                         instance_types=["p3.8xlarge", "p3.2xlarge", "p3.16xlarge"], score=value)

    metrics = ServiceMetrics()
    metrics.set_spot_scores([score("us-east-1a", 2), score("us-east-1b", 9)])
    text = metrics.exposition().decode()
    labels = 'instance_types="p3.16xlarge,p3.2xlarge,p3.8xlarge",region="us-east-1"'
    assert f'gpu_autoscaler_spot_placement_score{{{labels},zone="us-east-1a"}} 2.0' in text
    assert f'gpu_autoscaler_spot_placement_score{{{labels},zone="us-east-1b"}} 9.0' in text
    metrics.set_spot_scores([score("us-east-1b", 8)])
    text = metrics.exposition().decode()
    assert 'zone="us-east-1a"' not in text
    assert f'gpu_autoscaler_spot_placement_score{{{labels},zone="us-east-1b"}} 8.0' in text


def test_broken_nodes_held_and_waiting_are_per_pool_gauges_and_a_pool_gone_goes() -> None:
    """The fleet-wide hold (BrokenNodesHeld) and a pool's own budget keeping broken nodes
    for later ticks are two numbers: the second is pacing, not a blind observer."""
    from datetime import UTC, datetime

    from autoscaler.model.plan import Plan, PoolSummary

    def plan(**pools: PoolSummary) -> Plan:
        return Plan(decided_at=datetime(2026, 12, 7, tzinfo=UTC),
                    pools={k.replace("_", "/"): v for k, v in pools.items()})

    metrics = ServiceMetrics()
    metrics.set_pools(plan(vision_a=PoolSummary(nodes=10, gpus=40, hourly_usd=1, floor=0,
                                                broken_waiting=8),
                           vision_b=PoolSummary(nodes=5, gpus=20, hourly_usd=1, floor=0,
                                                broken_held=5)))
    text = metrics.exposition().decode()
    assert 'gpu_autoscaler_broken_nodes_waiting{pool="vision/a"} 8.0' in text
    assert 'gpu_autoscaler_unhealthy_budget_held{pool="vision/a"} 0.0' in text
    assert 'gpu_autoscaler_broken_nodes_waiting{pool="vision/b"} 0.0' in text
    assert 'gpu_autoscaler_unhealthy_budget_held{pool="vision/b"} 5.0' in text
    metrics.set_pools(plan(vision_b=PoolSummary(nodes=5, gpus=20, hourly_usd=1, floor=0)))
    text = metrics.exposition().decode()
    assert 'pool="vision/a"' not in text
    assert 'gpu_autoscaler_broken_nodes_waiting{pool="vision/b"} 0.0' in text
