"""Return to spot (engine/return_to_spot.py): a fallback on-demand node moves back to spot
make-before-break, only on evidence that spot is back and when the move pays."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from autoscaler.engine import Drain, Hold, Launch, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.plan import Plan
from autoscaler.model.snapshot import (
    CapacityError,
    NodeObservation,
    Offering,
    RunningJob,
    SchedulerNode,
    SpotScore,
)
from autoscaler.policy.models import Capacity, Market, TeamPolicy
from tests.builders import NOW, busy, fleet, make_node, make_policy, make_pool_dict, snapshot

S = NodeState
KEY = "vision/gpu"
ZONES = ["us-east-1a", "us-east-1c"]
RULE = {"after": "1h", "checkpoint_every": "30m"}


def od(name: str = "vision-gpu-1", age: timedelta = timedelta(hours=2), **kw: Any) -> Node:
    # READY 10 minutes after its request: the pool's boot time, launch to READY
    return make_node(name, age=age, ready_for=age - timedelta(minutes=10), zone="us-east-1a",
                     fallback_from_spot=True, **kw)


def granted(name: str = "vision-gpu-9", age: timedelta = timedelta(minutes=5), zone: str = "us-east-1c",
            **kw: Any) -> Node:
    return make_node(name, market=Market.SPOT, zone=zone, age=age, ready_for=None, **kw)


def plan_for(*nodes: Node, rule: dict[str, Any] | None = None, obs: dict[str, NodeObservation] | None = None,
             quota: dict[str, Any] | None = None, scale_down: dict[str, Any] | None = None,
             capacity_extra: dict[str, Any] | None = None, **snap: Any) -> Plan:
    capacity: dict[str, Any] = {"spot_percent": 100, "spot_fallback": "on-demand", **(capacity_extra or {})}
    if rule is not None:
        capacity["return_to_spot"] = rule
    policy = make_policy(instance_types=["p3.2xlarge"], zones=ZONES, capacity=capacity,
                         quota=quota, scale_down=scale_down or {})
    seen = {n.name: busy(util=50) for n in nodes}
    seen.update(obs or {})
    return decide({policy.team: policy}, fleet(*nodes), snapshot(nodes=seen, **snap), NOW)


def moves(plan: Plan) -> list[Launch]:
    return [a for a in plan.actions if isinstance(a, Launch) and a.trigger == "return-to-spot"]


def test_a_fallback_node_moves_to_a_zone_where_spot_was_just_granted():
    (launch,) = moves(plan_for(od(), granted(), rule=RULE))
    assert (launch.market, launch.zone, launch.replaces) == (Market.SPOT, "us-east-1c", ["vision-gpu-1"])
    # saving 3.06 - 0.918; one-off at spot prices: the job started 1h ago is drained 12m from
    # now (10m boot + 2m grace), 12m after its checkpoint at 1h: 12m of 1 GPU redone + 12m
    assert "saves $2.14/h, one-off $0.37" in launch.reason and "$1.96/h net" in launch.reason
    assert "a spot p3.2xlarge was granted in us-east-1c" in launch.reason


@pytest.mark.parametrize("case, nodes, snap", [
    ("rule off", None, {}),
    ("no evidence", [od()], {}),
    ("evidence too old", [od(), granted(age=timedelta(minutes=20))], {}),
    ("too young", [od(age=timedelta(minutes=40)), granted()], {}),
    ("not a fallback", [make_node("vision-gpu-1", zone="us-east-1a"), granted()], {}),
    ("refused since", [od(), granted()], {"capacity_errors": [CapacityError(
        cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone="us-east-1c",
        market=Market.SPOT, code="InsufficientInstanceCapacity", at=NOW - timedelta(minutes=2))]}),
    ("interrupted since", [od(), granted(), granted("vision-gpu-8", state=S.INTERRUPTED,
                                                   state_since=NOW - timedelta(minutes=1))], {}),
    ("out of stock", [od(), granted()], {"offerings": [Offering(
        cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone="us-east-1c", in_stock=False)]}),
])
def test_no_move_without_fresh_evidence_or_outside_the_rule(case, nodes, snap):
    rule = None if case == "rule off" else RULE
    assert moves(plan_for(*(nodes or [od(), granted()]), rule=rule, **snap)) == [], case


def test_a_stock_signal_is_evidence_too():
    stock = Offering(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone="us-east-1c",
                     in_stock=True)
    (launch,) = moves(plan_for(od(), rule=RULE, offerings=[stock]))
    assert launch.zone == "us-east-1c" and "in stock in us-east-1c" in launch.reason


def test_unknown_checkpoints_assume_all_work_since_the_start_is_redone():
    strict = {**RULE, "min_saving": 1.7}
    assert moves(plan_for(od(), granted(), rule=strict))  # net $1.96/h with 30m checkpoints
    unknown = {"after": "1h", "min_saving": 1.7}  # 1h12m redone: net $1.50/h
    assert moves(plan_for(od(), granted(), rule=unknown)) == []


def test_never_when_the_scheduler_says_a_job_ends_soon():
    ending = NodeObservation(metrics=busy(util=50).metrics, scheduler=SchedulerNode(
        state="allocated", gpus_total=1, gpus_allocated=1, jobs=[RunningJob(
            id="j0", gpus=1, started_at=NOW - timedelta(hours=1), ends_at=NOW + timedelta(minutes=5))]))
    assert moves(plan_for(od(), granted(), rule=RULE, obs={"vision-gpu-1": ending})) == []
    later = dataclasses.replace(ending, scheduler=dataclasses.replace(ending.scheduler, jobs=[
        dataclasses.replace(ending.scheduler.jobs[0], ends_at=NOW + timedelta(hours=3))]))
    assert moves(plan_for(od(), granted(), rule=RULE, obs={"vision-gpu-1": later}))


def test_no_move_when_the_scheduler_does_not_report_the_node():
    blind = NodeObservation(metrics=busy(util=50).metrics)
    assert moves(plan_for(od(), granted(), rule=RULE, obs={"vision-gpu-1": blind})) == []


def test_moves_per_hour_and_the_disruption_budget_bound_the_moves():
    nodes = [od(f"vision-gpu-{i}") for i in range(1, 5)] + [granted()]
    assert len(moves(plan_for(*nodes, rule={**RULE, "max_moves_per_hour": 2},
                              scale_down={"max_draining_percent": 100}))) == 2
    earlier = make_node("vision-gpu-7", market=Market.SPOT, zone="us-east-1c", age=timedelta(minutes=30),
                        replaces="gone-1", launched_for="return-to-spot")
    assert len(moves(plan_for(*nodes, earlier, rule={**RULE, "max_moves_per_hour": 2},
                              scale_down={"max_draining_percent": 100}))) == 1
    # 20% of 5 nodes: one drain at a time, so one move
    assert len(moves(plan_for(*nodes, rule={**RULE, "max_moves_per_hour": 4}))) == 1


def test_the_team_quota_refuses_the_replacement_with_a_reason():
    plan = plan_for(od(), granted(), rule=RULE, quota={"max_gpus": 2})
    assert moves(plan) == []
    assert any(isinstance(a, Hold) and "stays on-demand although spot is back" in a.reason
               for a in plan.actions)


def test_make_before_break_drains_the_old_node_only_once_its_replacement_is_ready():
    booting = make_node("vision-gpu-5", market=Market.SPOT, zone="us-east-1c", state=S.BOOTSTRAPPING,
                        age=timedelta(minutes=3), replaces="vision-gpu-1", launched_for="return-to-spot")
    plan = plan_for(od(), granted(), booting, rule=RULE)
    assert moves(plan) == [] and not [a for a in plan.actions if isinstance(a, Drain)]
    ready = dataclasses.replace(booting, state=S.READY)
    plan = plan_for(od(), granted(), ready, rule=RULE, obs={"vision-gpu-5": busy(util=0)})
    (drain,) = [a for a in plan.actions if isinstance(a, Drain)]
    assert (drain.node, drain.trigger) == ("vision-gpu-1", "spot-returned")
    assert "vision-gpu-5 (p3.2xlarge spot in us-east-1c) is READY" in drain.reason
    # the rule turned off meanwhile: the move is still finished
    plan = plan_for(od(), granted(), ready, rule=None, obs={"vision-gpu-5": busy(util=0)})
    assert [a.node for a in plan.actions if isinstance(a, Drain)] == ["vision-gpu-1"]


def test_a_failed_replacement_leaves_the_node_and_it_may_move_again():
    failed = make_node("vision-gpu-5", market=Market.SPOT, zone="us-east-1c", state=S.PROVISION_FAILED,
                       age=timedelta(minutes=3), replaces="vision-gpu-1", launched_for="return-to-spot")
    plan = plan_for(od(), granted(), failed, rule=RULE)
    assert not [a for a in plan.actions if isinstance(a, Drain)]
    assert [m.replaces for m in moves(plan)] == [["vision-gpu-1"]]


def test_the_rule_is_validated():
    assert Capacity().return_to_spot is None  # off by default
    with pytest.raises(ValidationError, match="longer than 0s"):
        Capacity(return_to_spot={"after": "0s"})
    with pytest.raises(ValidationError):
        Capacity(return_to_spot={"max_moves_per_hour": 0})


def test_a_probe_moves_without_evidence_unless_the_offering_was_refused_within_the_backoff():
    probe = {**RULE, "probe": True}
    (launch,) = moves(plan_for(od(), rule=probe))
    assert launch.market is Market.SPOT and launch.replaces == ["vision-gpu-1"]
    assert "probe: the replacement's launch" in launch.reason and "saves $2.14/h" in launch.reason
    refused = CapacityError(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone=launch.zone,
                            market=Market.SPOT, code="InsufficientInstanceCapacity",
                            at=NOW - timedelta(minutes=2))
    (other,) = moves(plan_for(od(), rule=probe, capacity_errors=[refused]))
    assert other.zone != launch.zone  # the refused zone backs off, the other one is probed
    both = [refused.model_copy(update={"zone": z}) for z in ZONES]
    assert moves(plan_for(od(), rule=probe, capacity_errors=both)) == []
    assert moves(plan_for(od(), rule=RULE)) == []  # off by default: evidence only


def test_no_probe_where_the_spot_placement_score_is_low_but_a_grant_still_counts():
    probe = {**RULE, "probe": True}

    def score(zone: str, value: int) -> SpotScore:
        return SpotScore(cloud="aws", region="us-east-1", zone=zone, instance_types=["p3.2xlarge"],
                         score=value)

    (launch,) = moves(plan_for(od(), rule=probe, spot_scores=[score("us-east-1a", 2)]))
    assert launch.zone == "us-east-1c" and "probe" in launch.reason  # 1a scored low: 1c probed
    low = [score(z, 3) for z in ZONES]
    assert moves(plan_for(od(), rule=probe, spot_scores=low)) == []
    # A spot node granted minutes ago in 1c is evidence the score does not overrule.
    (launch,) = moves(plan_for(od(), granted(), rule=probe, spot_scores=low))
    assert launch.zone == "us-east-1c" and "was granted in us-east-1c" in launch.reason


def test_a_refused_replacement_does_not_count_as_a_move():
    failed = [make_node(f"vision-gpu-{i}", market=Market.SPOT, zone="us-east-1c", state=S.PROVISION_FAILED,
                        age=timedelta(minutes=3), replaces=f"gone-{i}", launched_for="return-to-spot")
              for i in (7, 8)]
    plan = plan_for(od(), granted(), *failed, rule={**RULE, "max_moves_per_hour": 2})
    assert [m.replaces for m in moves(plan)] == [["vision-gpu-1"]]


def test_probe_is_off_by_default_and_a_boolean():
    assert Capacity(return_to_spot={}).return_to_spot.probe is False
    assert Capacity(return_to_spot={"probe": True}).return_to_spot.probe is True
    with pytest.raises(ValidationError):
        Capacity(return_to_spot={"probe": "sometimes"})


def test_a_move_waits_for_a_checkpoint_due_soon_when_staying_until_then_costs_less():
    def job_started(ago: timedelta) -> dict[str, NodeObservation]:
        seen = busy(util=50)
        sched = dataclasses.replace(seen.scheduler, jobs=[RunningJob(id="j0", gpus=1, started_at=NOW - ago)])
        return {"vision-gpu-1": dataclasses.replace(seen, scheduler=sched)}

    # drained in 12m at 57m of run: 27m redone, vs 3m more on-demand until its checkpoint
    assert moves(plan_for(od(), granted(), rule=RULE, obs=job_started(timedelta(minutes=45)))) == []
    # drained at 37m of run: 7m redone, less than 23m more on-demand
    assert moves(plan_for(od(), granted(), rule=RULE, obs=job_started(timedelta(minutes=25))))


def test_a_job_start_before_its_node_was_created_reads_as_not_given():
    """The node is 2h old. A start 2h15m ago cannot be (27m to redo at the drain, 3m to its
    checkpoint: it would stay); like a start not given, the job's work counts from the
    node's creation (2h12m at the drain: 12m redone, 18m to its checkpoint): it moves."""
    def job_started(at: Any) -> dict[str, NodeObservation]:
        seen = busy(util=50)
        sched = dataclasses.replace(seen.scheduler, jobs=[RunningJob(id="j0", gpus=1, started_at=at)])
        return {"vision-gpu-1": dataclasses.replace(seen, scheduler=sched)}

    before = moves(plan_for(od(), granted(), rule=RULE, obs=job_started(NOW - timedelta(hours=2, minutes=15))))
    unknown = moves(plan_for(od(), granted(), rule=RULE, obs=job_started(None)))
    assert len(before) == 1 and before == unknown


def test_a_move_respects_max_spot_share_per_zone():
    """Spot was just granted in 1c. With one spot node in each zone, 1c may take the move
    (2 of 3 <= ceil(0.5 x 3)); with both in 1c it would hold 3 of 3, and the node stays."""
    share = {"max_spot_share_per_zone": 0.5}
    older = timedelta(minutes=30)  # no evidence of its own
    (launch,) = moves(plan_for(od(), granted(), granted("vision-gpu-8", zone="us-east-1a", age=older),
                               rule=RULE, capacity_extra=share))
    assert launch.zone == "us-east-1c"
    assert moves(plan_for(od(), granted(), granted("vision-gpu-8", age=older), rule=RULE,
                          capacity_extra=share)) == []
    assert len(moves(plan_for(od(), granted(), granted("vision-gpu-8", age=older), rule=RULE))) == 1


# -- across a placement group: the pools each running job may run in (RunningJob.pools) ----

EAST, WEST = "vision/east", "vision/west"
GROUP_CAPACITY = {"on_demand_base": 0, "spot_percent": 100, "spot_fallback": "on-demand"}
IN_STOCK = {  # spot is back in the pool's one zone
    EAST: Offering(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone="us-east-1a",
                   in_stock=True, spot_usd=1.20),
    WEST: Offering(cloud="aws", region="us-west-2", instance_type="p3.2xlarge", zone="us-west-2a",
                   in_stock=True, spot_usd=0.92),
}
FALLBACK = make_node("vision-east-1", pool="east", zone="us-east-1a", age=timedelta(hours=2),
                     ready_for=timedelta(hours=1, minutes=50), fallback_from_spot=True)


def group_pool(name: str, region: str, **kw: Any) -> dict[str, Any]:
    return make_pool_dict(name, region=region, zones=[f"{region}a"], instance_types=["p3.2xlarge"],
                          placement_group="v100", **kw)


def group_policies() -> dict[str, TeamPolicy]:
    """vision's east (return to spot on) and west share a group; search has a pool named west
    in a group of the same name."""
    return {"vision": make_policy(pools=[
        group_pool("east", "us-east-1", capacity={**GROUP_CAPACITY, "return_to_spot": RULE}),
        group_pool("west", "us-west-2", capacity=GROUP_CAPACITY)]),
        "search": make_policy("search", pools=[group_pool("west", "us-west-2", capacity=GROUP_CAPACITY)])}


def running(**jobs: list[str] | None) -> NodeObservation:
    """A busy 1-GPU node running ``jobs`` (id: the pools it may run in), started 1h ago."""
    return NodeObservation(metrics=busy(util=50).metrics, scheduler=SchedulerNode(
        state="allocated", gpus_total=1, gpus_allocated=1, jobs=[
            RunningJob(id=job, gpus=1 / len(jobs), started_at=NOW - timedelta(hours=1), pools=pools)
            for job, pools in jobs.items()]))


def group_plan(seen: NodeObservation, back_in: tuple[str, ...] = (WEST,)) -> Plan:
    return decide(group_policies(), fleet(FALLBACK), snapshot(
        nodes={FALLBACK.name: seen}, offerings=[IN_STOCK[k] for k in back_in]), NOW)


def pin_holds(plan: Plan) -> list[str]:
    return [a.reason for a in plan.actions if isinstance(a, Hold) and "refused for a pin" in a.reason]


def test_a_job_pinned_to_its_region_does_not_return_to_spot_in_another_regions_pool() -> None:
    # the unpinned twin moves to spot in west, the only pool of the group where spot is back
    plan = group_plan(running(train=None))
    (launch,) = moves(plan)
    assert (launch.pool, launch.market, launch.zone, launch.replaces) == (
        WEST, Market.SPOT, "us-west-2a", ["vision-east-1"])
    assert "spot is not back in us-east-1 but is in vision/west (us-west-2)" in launch.reason
    assert pin_holds(plan) == []
    # its job may run only in east (a region nodeSelector): it stays on-demand, and says why
    plan = group_plan(running(train=[EAST]))
    assert [a for a in plan.actions if isinstance(a, Launch | Drain)] == []
    (why,) = pin_holds(plan)
    assert why.startswith("vision/east: fallback on-demand vision-east-1 stays on-demand: spot is "
                          "not back for it in us-east-1 but is in vision/west (us-west-2) of its "
                          "placement group (p3.2xlarge spot is in stock in us-west-2a; ")
    assert why.endswith("would save $2.14/h), but the move is refused for a pin: "
                        "job train may run only in vision/east")
    # of two jobs, only the one whose pin refuses west is named
    (why,) = pin_holds(group_plan(running(train=[EAST], evals=None, tune=[EAST, WEST])))
    assert why.endswith("refused for a pin: job train may run only in vision/east")
    # a list naming west lets it go there
    (launch,) = moves(group_plan(running(train=[EAST, WEST])))
    assert launch.pool == WEST
    # spot back in its own pool too: it returns there, pinned or not, and nothing is held
    for pools in ([EAST], None):
        plan = group_plan(running(train=pools), back_in=(EAST, WEST))
        (launch,) = moves(plan)
        assert (launch.pool, launch.zone, launch.replaces) == (EAST, "us-east-1a", ["vision-east-1"])
        assert pin_holds(plan) == []


def test_pins_naming_pools_outside_the_team_or_group_are_ignored_by_the_return_to_spot() -> None:
    # search/west is another team's real pool: it names no pool of vision's group
    hostile = running(train=["search/west", "vision/ghost", "../west"])
    plan = group_plan(hostile)
    assert moves(plan) == []
    (why,) = pin_holds(plan)
    assert why.endswith("refused for a pin: job train may run only in no pool of its group")
    assert "search" not in why and "ghost" not in why
    # a pool of the group among them still counts
    (launch,) = moves(group_plan(running(train=["search/west", WEST])))
    assert (launch.pool, launch.zone) == (WEST, "us-west-2a")
    # pinned to nothing: its own pool still takes it back to spot
    (launch,) = moves(group_plan(hostile, back_in=(EAST, WEST)))
    assert (launch.pool, launch.zone) == (EAST, "us-east-1a")
