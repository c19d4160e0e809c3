"""Capacity mix, spot prices and stock, capacity-error fallback."""

from __future__ import annotations

from datetime import timedelta

from autoscaler.engine import Hold, Launch, decide
from autoscaler.model.snapshot import CapacityError, Offering, PoolObservation
from autoscaler.policy.models import Market
from tests.builders import NOW, fleet, make_node, make_policy, pending, snapshot

KEY = "vision/gpu"


def launched(plan) -> list[tuple[str, str, str | None]]:
    return [(a.instance_type, a.market.value, a.zone) for a in plan.actions if isinstance(a, Launch)
            for _ in range(a.count)]


def plan_for(policy, nodes=(), **snap):
    snap.setdefault("pools", {KEY: PoolObservation(pending=pending(*[1] * 4))})
    return decide({policy.team: policy}, fleet(*nodes), snapshot(**snap), NOW)


def test_on_demand_base_then_spot_share():
    policy = make_policy(capacity={"on_demand_base": 1, "spot_percent": 70},
                         instance_types=["p3.2xlarge"])
    markets = [m for _, m, _ in launched(plan_for(policy))]
    # The base node is on-demand; of the 3 above it, round(0.7 * 3) = 2 are spot.
    assert markets[0] == "on-demand"
    assert sorted(markets[1:]) == ["on-demand", "spot", "spot"]


def test_mix_counts_existing_nodes():
    policy = make_policy(capacity={"on_demand_base": 1, "spot_percent": 100},
                         instance_types=["p3.2xlarge"])
    nodes = [make_node("n1", market=Market.ON_DEMAND)]
    markets = {m for _, m, _ in launched(plan_for(policy, nodes))}
    assert markets == {"spot"}


def test_capacity_error_falls_back_to_next_type_then_on_demand():
    policy = make_policy(capacity={"spot_percent": 100, "spot_fallback": "on-demand"})
    err = lambda t: CapacityError(cloud="aws", region="us-east-1", instance_type=t, zone=None,  # noqa: E731
                                  market=Market.SPOT, code="InsufficientInstanceCapacity",
                                  at=NOW - timedelta(minutes=2))
    pools = {KEY: PoolObservation(pending=pending(1))}
    assert launched(plan_for(policy, pools=pools, capacity_errors=[err("p3.2xlarge")])) == [
        ("p3.8xlarge", "spot", None)]
    plan = plan_for(policy, pools=pools, capacity_errors=[err("p3.2xlarge"), err("p3.8xlarge")])
    assert launched(plan) == [("p3.2xlarge", "on-demand", None)]
    (launch,) = [a for a in plan.actions if isinstance(a, Launch)]
    assert "InsufficientInstanceCapacity" in launch.reason and "on-demand" in launch.reason


def test_capacity_error_expires_after_backoff():
    policy = make_policy(capacity={"spot_percent": 100, "capacity_error_backoff": "10m"},
                         instance_types=["p3.2xlarge"])
    old = CapacityError(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone=None,
                        market=Market.SPOT, code="InsufficientInstanceCapacity",
                        at=NOW - timedelta(minutes=11))
    plan = plan_for(policy, pools={KEY: PoolObservation(pending=pending(1))}, capacity_errors=[old])
    assert launched(plan) == [("p3.2xlarge", "spot", None)]


def test_a_refusal_reported_at_the_backoffs_own_time_does_not_hide_the_backoff():
    """The service reports a counted spot refusal twice: the signals' capacity error (held
    capacity_error_backoff) and the launch backoff's (held until its next try), often with
    the same time. The longer hold wins, whichever comes first."""
    policy = make_policy(capacity={"spot_percent": 100, "spot_fallback": "none",
                                   "capacity_error_backoff": "3m"}, instance_types=["p3.2xlarge"])
    at = NOW - timedelta(minutes=4)
    plain = CapacityError(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone=None,
                          market=Market.SPOT, code="InsufficientInstanceCapacity", at=at)
    held = plain.model_copy(update={"code": "launch-backoff", "until": at + timedelta(minutes=10)})
    pools = {KEY: PoolObservation(pending=pending(1))}
    for errors in ([plain, held], [held, plain]):
        plan = plan_for(policy, pools=pools, capacity_errors=errors)
        assert launched(plan) == []
        assert any(isinstance(a, Hold) and "launch-backoff" in a.reason for a in plan.actions)
    assert launched(plan_for(policy, pools=pools, capacity_errors=[plain])) == [("p3.2xlarge", "spot", None)]


def test_no_fallback_holds_with_reason():
    policy = make_policy(capacity={"spot_percent": 100, "spot_fallback": "none"},
                         instance_types=["p3.2xlarge"])
    err = CapacityError(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone=None,
                        market=Market.SPOT, code="InsufficientInstanceCapacity", at=NOW)
    plan = plan_for(policy, pools={KEY: PoolObservation(pending=pending(1))}, capacity_errors=[err])
    assert launched(plan) == []
    assert any(isinstance(a, Hold) and "InsufficientInstanceCapacity" in a.reason for a in plan.actions)


def test_cheapest_zone_by_spot_price_and_stock():
    policy = make_policy(capacity={"spot_percent": 100}, instance_types=["p3.2xlarge"],
                         zones=["us-east-1a", "us-east-1b", "us-east-1c"])
    offerings = [
        Offering(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone="us-east-1a", spot_usd=1.2),
        Offering(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone="us-east-1b", spot_usd=0.9,
                 in_stock=False),
        Offering(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone="us-east-1c", spot_usd=1.0),
    ]
    plan = plan_for(policy, pools={KEY: PoolObservation(pending=pending(1))}, offerings=offerings)
    assert launched(plan) == [("p3.2xlarge", "spot", "us-east-1c")]
    (launch,) = [a for a in plan.actions if isinstance(a, Launch)]
    assert "$1.000/h" in launch.reason


def test_spot_above_price_ratio_is_not_used():
    policy = make_policy(capacity={"spot_percent": 100, "max_spot_price_ratio": 0.5},
                         instance_types=["p3.2xlarge"])
    offerings = [Offering(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", spot_usd=2.0)]
    plan = plan_for(policy, pools={KEY: PoolObservation(pending=pending(1))}, offerings=offerings)
    assert launched(plan) == [("p3.2xlarge", "on-demand", None)]
    (launch,) = [a for a in plan.actions if isinstance(a, Launch)]
    assert "$2.000/h is above 0.5 x on-demand $3.060/h" in launch.reason


def test_cheapest_per_gpu_type_wins():
    policy = make_policy(instance_types=["g4dn.xlarge", "g4dn.2xlarge", "g5.xlarge"],
                         capacity={"spot_percent": 0})
    plan = plan_for(policy, pools={KEY: PoolObservation(pending=pending(1))})
    assert launched(plan) == [("g4dn.xlarge", "on-demand", None)]


def test_unpriced_type_is_skipped_with_a_reason():
    policy = make_policy(cloud="alicloud", region="cn-hangzhou", instance_types=["ecs.gn6i-c4g1.xlarge"])
    plan = plan_for(policy, pools={KEY: PoolObservation(pending=pending(1))})
    assert launched(plan) == []
    assert any(isinstance(a, Hold) and "no price" in a.reason for a in plan.actions)
