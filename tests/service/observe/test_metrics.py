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


def series(metrics: ServiceMetrics) -> int:
    return sum(1 for line in metrics.exposition().decode().splitlines()
               if line and not line.startswith("#"))


def test_series_of_pools_renamed_away_go_and_a_live_pools_stay() -> None:
    """A pool renamed every epoch: its gauges, counters and histograms go once it is in
    neither the policies nor the fleet, so the series stay as many as after the first; the
    pool that stays keeps its counts and its zeros."""
    from autoscaler.policy.errors import PolicyError
    from tests.builders import make_node

    metrics = ServiceMetrics()

    def epoch(e: int) -> None:
        pools = [f"p{e}", "keep"]
        metrics.set_fleet([make_node(f"n-{p}-{e}", pool=p) for p in pools],
                          {f"vision/{p}": 1.0 for p in pools})
        metrics.set_backoffs({(f"vision/p{e}", "p3.2xlarge", "us-east-1a", "spot"): 1})
        metrics.set_lost_frozen([f"vision/p{e}"])
        metrics.set_policy_errors([PolicyError(f"p{e}.yaml", 1, 1, "pools", "bad")])
        for pool in ("vision/keep", f"vision/p{e}"):
            metrics.interruptions.labels(pool).inc()
            metrics.drain_duration.labels(pool, "idle").observe(60)
            metrics.notice_to_drain.labels(pool).observe(30)
        metrics.forget_pools({f"vision/{p}" for p in pools})

    epoch(0)
    first = series(metrics)
    for e in range(1, 50):
        epoch(e)
    assert series(metrics) == first
    text = metrics.exposition().decode()
    assert "p48" not in text and "p49" in text
    assert 'gpu_autoscaler_interruptions_total{pool="vision/keep"} 50.0' in text
    assert 'gpu_autoscaler_drain_duration_seconds_count{pool="vision/keep",trigger="idle"} 50.0' \
        in text
    metrics.set_lost_frozen([])  # a pool that lives shows its alert cleared at 0
    metrics.forget_pools({"vision/keep", "vision/p49"})
    assert 'gpu_autoscaler_lost_frozen{pool="vision/p49"} 0.0' in metrics.exposition().decode()
