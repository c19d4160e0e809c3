"""capacity.max_spot_share_per_zone: one zone's outage takes at most that share of spot."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from autoscaler.catalog import default_catalog
from autoscaler.engine import Hold, Launch, decide
from autoscaler.model.snapshot import PendingJob, PoolObservation
from autoscaler.policy.checks import check_policy
from autoscaler.policy.models import Market
from tests.builders import NOW, fleet, make_node, make_policy, snapshot, spot_refusal

KEY = "vision/gpu"
ZONES = ["us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f"]


def plan_for(share, zones=ZONES, nodes=(), jobs=1, fallback="on-demand", errors=()):
    policy = make_policy(instance_types=["p3.2xlarge"], zones=zones, max_nodes=20,
                         scale_up={"max_step": 20},
                         capacity={"spot_percent": 100, "spot_fallback": fallback,
                                   "max_spot_share_per_zone": share})
    pending = [PendingJob(id=f"j{i}", gpus=1) for i in range(jobs)]
    return decide({policy.team: policy}, fleet(*nodes),
                  snapshot(pools={KEY: PoolObservation(pending=pending)}, capacity_errors=list(errors)), NOW)


def per_zone(plan) -> Counter:
    out: Counter = Counter()
    for a in plan.actions:
        if isinstance(a, Launch):
            out[(a.market, a.zone)] += a.count
    return out


def test_without_a_cap_the_cheapest_zone_takes_every_spot_node():
    assert per_zone(plan_for(None, jobs=8)) == {(Market.SPOT, "us-east-1a"): 8}


def test_a_quarter_share_spreads_eight_nodes_two_per_zone():
    assert per_zone(plan_for(0.25, jobs=8)) == {(Market.SPOT, z): 2 for z in ZONES}


def test_nodes_already_serving_and_on_their_way_count():
    nodes = [make_node(f"n{i}", market=Market.SPOT, zone="us-east-1a") for i in range(3)]
    nodes.append(make_node("n3", market=Market.SPOT, zone="us-east-1c"))
    # 1a would hold 4 of 5 (> ceil(0.5 x 5) = 3): the new node goes to 1c.
    got = per_zone(plan_for(0.5, zones=ZONES[:2], nodes=nodes))
    assert got == {(Market.SPOT, "us-east-1c"): 1}


def test_when_the_zones_with_room_are_refused_the_pool_falls_back_and_says_why():
    nodes = [make_node(f"n{i}", market=Market.SPOT, zone="us-east-1a") for i in range(2)]
    # 1c is refused; 1a would hold 3 of 3 spot nodes (> ceil(0.5 x 3) = 2).
    plan = plan_for(0.5, zones=ZONES[:2], nodes=nodes, errors=[spot_refusal("us-east-1c")])
    assert per_zone(plan) == {(Market.ON_DEMAND, "us-east-1a"): 1}
    (od,) = [a for a in plan.actions if isinstance(a, Launch)]
    assert od.fallback_from_spot
    assert "us-east-1a holds 2 of the pool's 2 spot nodes (max_spot_share_per_zone 0.5)" in od.reason
    assert "us-east-1c: capacity error" in od.reason


def test_without_fallback_a_full_pool_holds_with_the_reason():
    nodes = [make_node(f"n{i}", market=Market.SPOT, zone="us-east-1a") for i in range(2)]
    plan = plan_for(0.5, zones=ZONES[:2], nodes=nodes, fallback="none", errors=[spot_refusal("us-east-1c")])
    assert per_zone(plan) == {}
    holds = [a.reason for a in plan.actions if isinstance(a, Hold)]
    assert any("max_spot_share_per_zone 0.5" in r for r in holds), holds


def test_a_share_the_listed_zones_cannot_fill_is_refused_at_load():
    policy = make_policy(instance_types=["p3.2xlarge"], zones=ZONES[:2],
                         capacity={"max_spot_share_per_zone": 0.3})
    problems = check_policy(policy, default_catalog())
    assert any(loc[-1] == "max_spot_share_per_zone" and "needs at least 4 zones" in msg
               for loc, msg in problems), problems


def test_a_zone_under_an_interruption_notice_ranks_last_even_without_a_cap():
    from autoscaler.model.lifecycle import NodeState
    hit = make_node("n0", market=Market.SPOT, zone="us-east-1a", state=NodeState.INTERRUPTED)
    plan = plan_for(None, nodes=[hit])
    # the stand-in for n0 and nothing else: it goes to the next zone, not the reclaimed one
    launched = per_zone(plan)
    assert launched and (Market.SPOT, "us-east-1a") not in launched, launched
    assert set(launched) <= {(Market.SPOT, z) for z in ZONES[1:]}


def test_an_interruption_notice_is_an_outage_sign_so_high_priority_jobs_fall_back_at_once():
    from autoscaler.model.lifecycle import NodeState
    hit = make_node("n0", market=Market.SPOT, zone="us-east-1a", state=NodeState.INTERRUPTED)
    policy = make_policy(priority="high", instance_types=["p3.2xlarge"], zones=ZONES, max_nodes=20,
                         capacity={"spot_percent": 100, "spot_fallback": "on-demand"})
    job = PendingJob(id="j1", gpus=1, submitted_at=NOW - timedelta(seconds=30))
    plan = decide({policy.team: policy}, fleet(hit),
                  snapshot(pools={KEY: PoolObservation(pending=[job])}), NOW)
    od = [a for a in plan.actions if isinstance(a, Launch) and a.market is Market.ON_DEMAND]
    assert od and od[0].fallback_from_spot
    assert "p3.2xlarge spot in us-east-1a: interruption notice under way" in od[0].reason
