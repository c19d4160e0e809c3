"""Placement groups: a pending job several pools could run launches in the cheapest pool
with stock, spills on a refusal in the same decide, and stays in a pinned region."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from autoscaler.catalog import default_catalog
from autoscaler.engine import Launch, decide
from autoscaler.engine.pricing import LOW_SPOT_SCORE
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Hold, Plan
from autoscaler.model.snapshot import (
    CapacityError,
    Offering,
    PendingJob,
    PoolObservation,
    PoolOption,
    Snapshot,
    SpotScore,
)
from autoscaler.policy.checks import check_policy
from autoscaler.policy.models import Market, TeamPolicy
from tests.builders import NOW, fleet, make_node, make_pool_dict, snapshot, spot_refusal

EAST, WEST, ALI = "vision/east", "vision/west", "vision/ali"
SPOT = {"on_demand_base": 0, "spot_percent": 100, "spot_fallback": "on-demand"}


def policy(east: dict[str, Any] | None = None, west: dict[str, Any] | None = None,
           **team: Any) -> TeamPolicy:
    pools = [
        make_pool_dict("east", region="us-east-1", instance_types=["p3.2xlarge"], capacity=SPOT,
                       placement_group="v100", **{"zones": ["us-east-1a"], **(east or {})}),
        make_pool_dict("west", region="us-west-2", instance_types=["p3.2xlarge"],
                       capacity=SPOT, placement_group="v100", **{"zones": ["us-west-2a"], **(west or {})}),
        make_pool_dict("ali", cloud="alicloud", region="cn-hangzhou", zones=["cn-hangzhou-h"],
                       instance_types=["ecs.gn6v-c8g1.2xlarge"], capacity=SPOT, placement_group="v100"),
    ]
    return TeamPolicy.model_validate({"team": "vision", "pools": pools, **team})


OFFERS = [
    Offering(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone="us-east-1a",
             spot_usd=1.20, on_demand_usd=3.06, in_stock=True),
    Offering(cloud="aws", region="us-west-2", instance_type="p3.2xlarge", zone="us-west-2a",
             spot_usd=0.92, on_demand_usd=3.06, in_stock=True),
    Offering(cloud="alicloud", region="cn-hangzhou", instance_type="ecs.gn6v-c8g1.2xlarge",
             zone="cn-hangzhou-h", spot_usd=1.05, on_demand_usd=2.90, in_stock=True),
]


def job(*options: str, gpus: float = 1, job_id: str = "j1") -> PendingJob:
    return PendingJob(id=job_id, gpus=gpus, gpu_model="V100", submitted_at=NOW - timedelta(minutes=1),
                      options=[PoolOption(pool=o) for o in options])


def refused(region: str, zone: str, ago: timedelta = timedelta(minutes=4)) -> CapacityError:
    return spot_refusal(zone, region=region, ago=ago)


def plan_for(pol: TeamPolicy, *jobs: PendingJob, nodes: tuple = (), observed: dict | None = None,
             **snap: Any) -> Plan:
    snap.setdefault("offerings", OFFERS)
    return decide({pol.team: pol}, fleet(*nodes),
                  snapshot(nodes=observed, pools={EAST: PoolObservation(pending=list(jobs))}, **snap), NOW)


def launches(plan: Plan) -> list[Launch]:
    return [a for a in plan.actions if isinstance(a, Launch)]


def test_the_cheapest_pool_with_stock_wins_and_the_reason_names_all_three():
    plan = plan_for(policy(), job(EAST, WEST, ALI))
    (launch,) = launches(plan)
    assert (launch.pool, launch.market, launch.zone) == (WEST, Market.SPOT, "us-west-2a")
    (choice,) = plan.placements
    assert (choice.job, choice.pool, choice.listed_under) == ("j1", WEST, EAST)
    assert "us-west-2) p3.2xlarge spot us-west-2a $0.92/GPU-h chosen over" in choice.reason
    assert "$1.20/GPU-h" in choice.reason and "$1.05/GPU-h" in choice.reason
    assert [c.split(" ")[0] for c in choice.compared] == [EAST, WEST, ALI]
    assert "placement group: job j1: vision/west (aws us-west-2)" in launch.reason


def test_a_refusal_moves_the_next_launch_in_the_same_decide_before_on_demand_at_home():
    plan = plan_for(policy(), job(EAST, WEST, ALI), capacity_errors=[refused("us-west-2", "us-west-2a")])
    (launch,) = launches(plan)
    assert (launch.pool, launch.market) == (ALI, Market.SPOT)
    assert "capacity error InsufficientInstanceCapacity at 11:56:00" in plan.placements[0].reason
    # every spot refused: on-demand where it is cheapest, the refusals named
    errors = [refused("us-east-1", "us-east-1a"), refused("us-west-2", "us-west-2a")]
    alone = policy()
    alone.pools.pop()
    plan = decide({"vision": alone}, fleet(), snapshot(
        pools={EAST: PoolObservation(pending=[job(EAST, WEST)])}, offerings=OFFERS,
        capacity_errors=errors), NOW)
    (launch,) = launches(plan)
    assert (launch.pool, launch.market) == (EAST, Market.ON_DEMAND)  # a tie stays home
    assert "spot: p3.2xlarge spot in us-east-1a: capacity error" in plan.placements[0].reason


def test_an_interruption_notice_ranks_a_zone_after_every_other_pool():
    interrupted = make_node("vision-west-1", pool="west", region="us-west-2", zone="us-west-2a",
                            market=Market.SPOT, state=NodeState.INTERRUPTED)
    plan = plan_for(policy(), job(EAST, WEST, ALI), nodes=(interrupted,))
    assert {a.pool for a in launches(plan) if a.trigger == "pending"} == {ALI}
    assert "interruption notice at 11:30:00" in plan.placements[0].reason


def test_a_pinned_region_never_leaves_it():
    plan = plan_for(policy(east={"pin_region": True}), job(EAST, WEST, ALI))
    (launch,) = launches(plan)
    assert (launch.pool, launch.market) == (EAST, Market.SPOT)
    assert plan.placements == []  # one pool left: nothing compared


def test_caps_hold_max_nodes_then_the_team_quota():
    full = policy(west={"max_nodes": 1})
    node = make_node("vision-west-1", pool="west", region="us-west-2", zone="us-west-2a",
                     market=Market.SPOT, state=NodeState.READY)
    plan = plan_for(full, job(EAST, WEST, ALI), nodes=(node,))
    assert [a.pool for a in launches(plan)] == [ALI]
    assert "vision/west (aws us-west-2): no room (max_nodes 1" in plan.placements[0].reason
    capped = policy(quota={"max_gpus": 1})
    plan = plan_for(capped, job(EAST, WEST, ALI, job_id="a"), job(EAST, WEST, ALI, job_id="b"))
    assert sum(a.count for a in launches(plan)) == 1  # the quota counts every pool of the team
    assert any(isinstance(a, Hold) and "GPU cap 1" in a.reason for a in plan.actions)


def test_capacity_on_its_way_keeps_the_job_where_it_is():
    booting = make_node("vision-east-1", pool="east", zone="us-east-1a", market=Market.SPOT,
                        state=NodeState.BOOTSTRAPPING, ready_for=None)
    plan = plan_for(policy(), job(EAST, WEST, ALI), nodes=(booting,))
    assert launches(plan) == []
    assert "fits on capacity already there or on its way" in plan.placements[0].reason
    assert plan.placements[0].pool == EAST


def test_options_from_an_untrusted_snapshot_stay_within_the_team_and_group():
    other = TeamPolicy.model_validate({"team": "nlp", "pools": [make_pool_dict(
        "cheap", region="us-west-2", instance_types=["p3.2xlarge"], capacity=SPOT,
        placement_group="v100")]})
    pol = policy()
    hostile = job(EAST, "nlp/cheap", "nobody/none", EAST)
    plan = decide({"vision": pol, "nlp": other}, fleet(), snapshot(
        pools={EAST: PoolObservation(pending=[hostile])}, offerings=OFFERS), NOW)
    assert [a.pool for a in launches(plan)] == [EAST]
    # listed under a pool not among its own options: left where it is
    plan = plan_for(pol, job(WEST, ALI))
    assert [a.pool for a in launches(plan)] == [EAST] and plan.placements == []
    with pytest.raises(ValidationError):
        PendingJob(id="x", gpus=1, options=[PoolOption(pool=EAST)] * 65)


def test_policy_checks_groups_and_forbidden_clouds():
    catalog = default_catalog()
    pol = policy(placement_groups={"other": ["east", "nope"]}, forbid_clouds=["alicloud"])
    problems = {".".join(map(str, loc)): msg for loc, msg in check_policy(pol, catalog)}
    assert "pool 'nope', which the team does not have" in problems["placement_groups.other.1"]
    assert "in placement group 'v100' here and in 'other'" in problems["pools.0.placement_group"]
    assert "forbids alicloud" in problems["pools.2.cloud"]
    mixed = TeamPolicy.model_validate({"team": "vision", "pools": [
        make_pool_dict("a", placement_group="g"),
        make_pool_dict("b", placement_group="g", cluster={"kind": "slurm", "partition": "gpu"})]})
    ((loc, msg),) = check_policy(mixed, catalog)
    assert loc[0] == "pools"
    assert "mixes cluster kinds" in msg
    assert pol.group_of("east") == "other" and pol.group_of("ali") == "v100"
    assert pol.group_mates("east") == [] and pol.group_mates("ali") == ["west"]
    assert mixed.group_mates("a") == ["b"]


def test_the_plan_command_and_the_status_page_show_the_pools_compared(tmp_path):
    from typer.testing import CliRunner

    from autoscaler.cli import app
    from autoscaler.model.snapshot import DecisionInput
    from autoscaler.service.http.ui import status_page

    pol = policy()
    (tmp_path / "vision.yaml").write_text(pol.model_dump_json(exclude_defaults=True))
    data = DecisionInput(now=NOW, snapshot=snapshot(
        pools={EAST: PoolObservation(pending=[job(EAST, WEST, ALI)])}, offerings=OFFERS))
    (tmp_path / "in.json").write_text(data.model_dump_json())
    args = ["plan", "--snapshot", str(tmp_path / "in.json"), "--policies", str(tmp_path)]
    table = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "Placement groups: where pending jobs launch" in table.output
    assert "$0.92/GPU-h" in table.output and "$1.20/GPU-h" in table.output
    markdown = CliRunner().invoke(app, [*args, "--markdown"])
    assert "- `j1` -> `vision/west`: vision/east (aws us-east-1) p3.2xlarge spot" in markdown.output
    plan = plan_for(pol, job(EAST, WEST, ALI))
    page = status_page({"last_plan": {"id": 1, "plan": plan.model_dump(mode="json")}}).body.decode()
    assert "<td>j1</td><td>vision/west</td><td>vision/east (aws us-east-1) p3.2xlarge spot" in page


def test_return_to_spot_moves_a_fallback_node_to_spot_in_another_pool_of_the_group():
    """Spot is back only in us-west-2: the fallback on-demand node of us-east-1 moves there,
    make-before-break, and its drain is its own pool's once the replacement is READY."""
    from autoscaler.engine import Drain
    from tests.builders import busy

    rule = {**SPOT, "return_to_spot": {"after": "1h", "checkpoint_every": "30m"}}
    two = TeamPolicy.model_validate({"team": "vision", "pools": [
        make_pool_dict("east", region="us-east-1", zones=["us-east-1a"], instance_types=["p3.2xlarge"],
                       capacity=rule, placement_group="v100"),
        make_pool_dict("west", region="us-west-2", zones=["us-west-2a"], instance_types=["p3.2xlarge"],
                       capacity=SPOT, placement_group="v100")]})
    fallback = make_node("vision-east-1", pool="east", zone="us-east-1a", age=timedelta(hours=2),
                         ready_for=timedelta(hours=1, minutes=50), fallback_from_spot=True)
    west_stock = [Offering(cloud="aws", region="us-west-2", instance_type="p3.2xlarge",
                           zone="us-west-2a", in_stock=True, spot_usd=0.92)]
    seen = {"vision-east-1": busy(util=50)}
    plan = decide({"vision": two}, fleet(fallback), snapshot(nodes=seen, offerings=west_stock), NOW)
    (move,) = [a for a in plan.actions if isinstance(a, Launch) and a.trigger == "return-to-spot"]
    assert (move.pool, move.market, move.zone, move.replaces) == (
        WEST, Market.SPOT, "us-west-2a", ["vision-east-1"])
    assert "spot is not back in us-east-1 but is in vision/west (us-west-2)" in move.reason
    # pinned to its region: it stays on-demand
    pinned = two.model_copy(update={"pools": [two.pools[0].model_copy(update={"pin_region": True}),
                                               two.pools[1]]})
    plan = decide({"vision": pinned}, fleet(fallback), snapshot(nodes=seen, offerings=west_stock), NOW)
    assert not [a for a in plan.actions if isinstance(a, Launch)]
    # the replacement READY in us-west-2: the east node drains, on the east pool's budget
    spot = make_node("vision-west-1", pool="west", region="us-west-2", zone="us-west-2a",
                     market=Market.SPOT, replaces="vision-east-1", launched_for="return-to-spot",
                     age=timedelta(minutes=20), ready_for=timedelta(minutes=5))
    seen["vision-west-1"] = busy(util=50)
    plan = decide({"vision": two}, fleet(fallback, spot), snapshot(nodes=seen, offerings=west_stock), NOW)
    (drain,) = [a for a in plan.actions if isinstance(a, Drain)]
    assert (drain.pool, drain.node, drain.trigger) == (EAST, "vision-east-1", "spot-returned")
    assert "vision-west-1 of vision/west (p3.2xlarge spot in us-west-2a) is READY" in drain.reason


def test_regional_list_prices_decide_and_a_stand_in_price_is_named():
    """No observed prices: eu-west-1's own list price (p3.2xlarge $3.305/h on-demand) loses
    to us-west-2, which has none of its own and is priced at us-east-1's, and says so."""
    od = {"on_demand_base": 0, "spot_percent": 0}
    pol = TeamPolicy.model_validate({"team": "vision", "placement_groups": {"g": ["eu", "west"]},
                                     "pools": [
        make_pool_dict("eu", region="eu-west-1", instance_types=["p3.2xlarge"], capacity=od),
        make_pool_dict("west", region="us-west-2", instance_types=["p3.2xlarge"], capacity=od)]})
    plan = decide({"vision": pol}, fleet(), snapshot(pools={"vision/eu": PoolObservation(
        pending=[job("vision/eu", WEST)])}), NOW)
    (launch,) = launches(plan)
    assert launch.pool == WEST and launch.hourly_usd == 3.06
    assert "us-east-1 list price used for us-west-2" in launch.reason
    assert "vision/eu (aws eu-west-1) p3.2xlarge on-demand $3.31/GPU-h" in plan.placements[0].reason


def test_a_pool_that_will_fall_back_for_the_job_is_quoted_on_demand():
    """High priority (max_wait 0): one refused zone makes east's growth go on-demand for
    the job, so east is compared at its on-demand price, and west's spot wins."""
    east = {"zones": ["us-east-1a", "us-east-1b"]}
    offers = [*OFFERS, Offering(cloud="aws", region="us-east-1", instance_type="p3.2xlarge",
                                zone="us-east-1b", spot_usd=0.90, on_demand_usd=3.06, in_stock=True)]
    pol = policy(east=east, priority="high")
    plan = plan_for(pol, job(EAST, WEST, ALI), offerings=offers,
                    capacity_errors=[refused("us-east-1", "us-east-1a")])
    (launch,) = launches(plan)
    assert (launch.pool, launch.market) == (WEST, Market.SPOT)
    assert "$3.06/GPU-h (spot refused (p3.2xlarge spot in us-east-1a" in plan.placements[0].reason
    # normal priority waits: east's other zone is still spot, and cheapest
    plan = plan_for(policy(east=east), job(EAST, WEST, ALI), offerings=offers,
                    capacity_errors=[refused("us-east-1", "us-east-1a")])
    assert [(a.pool, a.zone) for a in launches(plan)] == [(EAST, "us-east-1b")]


def score(region: str, zone: str, value: int, types: tuple[str, ...] = ("p3.2xlarge",)) -> SpotScore:
    return SpotScore(cloud="aws", region=region, zone=zone, instance_types=list(types), score=value)


def test_a_low_spot_placement_score_ranks_a_zone_after_every_other_pool_and_is_named():
    # us-west-2a is the cheapest, but AWS scores a spot request there 2 of 10.
    plan = plan_for(policy(), job(EAST, WEST, ALI),
                    spot_scores=[score("us-west-2", "us-west-2a", 2), score("us-east-1", "us-east-1a", 9)])
    (launch,) = launches(plan)
    assert (launch.pool, launch.market) == (ALI, Market.SPOT)
    (choice,) = plan.placements
    assert "us-west-2a $0.92/GPU-h (spot placement score 2/10)" in choice.reason
    assert "us-east-1a $1.20/GPU-h (spot placement score 9/10)" in choice.reason
    # A score above the low third changes nothing, and a score asked for another set of
    # types is not the pool's: the cheapest wins as before.
    for scores in ([score("us-west-2", "us-west-2a", LOW_SPOT_SCORE + 1)],
                   [score("us-west-2", "us-west-2a", 1, ("p3.2xlarge", "p3.8xlarge", "p3.16xlarge"))]):
        (launch,) = launches(plan_for(policy(), job(EAST, WEST, ALI), spot_scores=scores))
        assert launch.pool == WEST


def test_a_low_score_zone_is_tried_last_within_a_pool_but_never_ruled_out():
    two = {"zones": ["us-west-2a", "us-west-2b"]}
    offers = [*OFFERS, Offering(cloud="aws", region="us-west-2", instance_type="p3.2xlarge",
                                zone="us-west-2b", spot_usd=0.99, on_demand_usd=3.06, in_stock=True)]
    pol = policy(west=two)
    west_job = PendingJob(id="w1", gpus=1, gpu_model="V100", submitted_at=NOW - timedelta(minutes=1))

    def plan(*scores: SpotScore) -> Plan:
        return decide({pol.team: pol}, fleet(), snapshot(
            pools={WEST: PoolObservation(pending=[west_job])}, offerings=offers,
            spot_scores=list(scores)), NOW)

    assert [launch.zone for launch in launches(plan())] == ["us-west-2a"]  # the cheaper zone
    (launch,) = launches(plan(score("us-west-2", "us-west-2a", 3)))
    assert (launch.zone, launch.market) == ("us-west-2b", Market.SPOT)
    assert launch.reason.endswith("($0.990/h, $0.990/GPU-h; before the cheaper p3.2xlarge in "
                                  "us-west-2a (spot placement score 3/10))"), launch.reason
    # Both zones unlikely: still spot, in the cheaper one (a score is advice, not a refusal).
    (launch,) = launches(plan(score("us-west-2", "us-west-2a", 1), score("us-west-2", "us-west-2b", 2)))
    assert (launch.zone, launch.market) == ("us-west-2a", Market.SPOT)


@pytest.mark.parametrize("bad", [{"score": 0}, {"score": 11}, {"score": "9"}, {"instance_types": []},
                                 {"zone": "z" * 65}])
def test_a_spot_score_outside_what_aws_can_answer_is_refused(bad: dict[str, Any]):
    raw = {"cloud": "aws", "region": "us-west-2", "zone": "us-west-2a",
           "instance_types": ["p3.2xlarge"], "score": 5, **bad}
    with pytest.raises(ValidationError):
        Snapshot.model_validate({"taken_at": NOW.isoformat(), "spot_scores": [raw]}, strict=True)
