"""Consolidation across a placement group: a fragmented node's jobs move to free GPUs of
another pool of the group, or to a cheaper node there (make-before-break), within the old
pool's budget; a pin_region pool's nodes stay in their region; pools in no group as before."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from autoscaler.engine import Drain, Launch, Replace, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.plan import Hold, Plan
from autoscaler.model.snapshot import (
    GpuMetrics,
    NodeObservation,
    Offering,
    PoolObservation,
    RunningJob,
    SchedulerNode,
)
from autoscaler.policy.models import Market, TeamPolicy
from tests.builders import NOW, fleet, make_node, make_pool_dict, pending, snapshot

EAST, WEST, EAST2 = "vision/east", "vision/west", "vision/east2"
P38, P32 = "p3.8xlarge", "p3.2xlarge"  # 4 and 1 V100, $12.24/h and $3.06/h on-demand
SCALE: dict[str, Any] = {"scale_up": {"gpu_utilization_above": 90},
         "scale_down": {"consolidate_below": 50, "max_draining_percent": 50}}
WEST_CHEAP = [Offering(cloud="aws", region="us-west-2", instance_type=P32, on_demand_usd=2.40)]


def policy(east: dict[str, Any] | None = None, west: dict[str, Any] | None = None,
           group: bool = True, east2: bool = False) -> TeamPolicy:
    grouped: dict[str, Any] = {"placement_group": "v100"} if group else {}
    pools = [make_pool_dict("east", region="us-east-1", **{"instance_types": [P38], **SCALE,
                                                           **grouped, **(east or {})}),
             make_pool_dict("west", region="us-west-2", **{"instance_types": [P38, P32], **SCALE,
                                                           **grouped, **(west or {})})]
    if east2:
        pools.append(make_pool_dict("east2", region="us-east-1", instance_types=[P38], **SCALE,
                                    **grouped))
    return TeamPolicy.model_validate({"team": "vision", "pools": pools})


def on(total: int, *jobs: float, util: float = 30.0, pools: list[str] | None = None) -> NodeObservation:
    """A node with ``jobs`` (GPUs each); ``pools``: the pools each job may run in."""
    return NodeObservation(
        metrics=GpuMetrics(util_mean=util, util_max_idle_window=util, util_max=util,
                           gpus_reporting=total, sample_age_s=5),
        scheduler=SchedulerNode(
            state="mixed" if sum(jobs) < total else "allocated", gpus_total=total,
            gpus_allocated=sum(jobs),
            jobs=[RunningJob(id=f"j{i}-{g}", gpus=g, started_at=NOW - timedelta(hours=2), pools=pools)
                  for i, g in enumerate(jobs)]))


def east(name: str, instance_type: str = P38, **kw: Any) -> Node:
    return make_node(name, pool="east", instance_type=instance_type, **kw)


def west(name: str, instance_type: str = P38, **kw: Any) -> Node:
    return make_node(name, pool="west", region="us-west-2", instance_type=instance_type, **kw)


def plan_of(pol: TeamPolicy, nodes: list[Node], seen: dict[str, NodeObservation], **snap: Any) -> Plan:
    return decide({"vision": pol}, fleet(*nodes), snapshot(nodes=seen, **snap), NOW)


def changes(plan: Plan) -> list[Drain | Launch | Replace]:
    return [a for a in plan.actions if isinstance(a, Drain | Launch | Replace)]


def only_drain(plan: Plan) -> Drain:
    """The plan's one change, a drain."""
    (drain,) = changes(plan)
    assert isinstance(drain, Drain), drain
    return drain


# east-1 holds one job of 1 GPU on a 4-GPU on-demand node; west-1 has 2 GPUs free
# (50% allocated: not fragmented itself).
NODES = [east("east-1"), west("west-1")]
SEEN = {"east-1": on(4, 1), "west-1": on(4, 1, 1)}


def test_work_that_fits_on_free_gpus_of_another_pool_of_the_group_is_consolidated_away() -> None:
    plan = plan_of(policy(), NODES, SEEN)
    drain = only_drain(plan)
    assert (drain.pool, drain.node, drain.trigger) == (EAST, "east-1", "consolidate")
    assert "its 1 job(s), 1 GPUs of work, fit on free GPUs of vision/west of its placement group" in drain.reason
    assert "(west-1: 2 GPUs free)" in drain.reason
    assert "vision/east p3.8xlarge on-demand $3.06/GPU-h -> vision/west $3.06/GPU-h" in drain.reason
    assert "1 of 4 GPUs allocated (25% < 50%)" in drain.reason


def test_a_pool_in_no_group_is_decided_as_before() -> None:
    # The same nodes and prices, no placement group: east-1's job fits nowhere in its pool.
    assert changes(plan_of(policy(group=False), NODES, SEEN)) == []
    plan = plan_of(policy(group=False), NODES, SEEN, offerings=WEST_CHEAP)
    assert changes(plan) == []


def test_a_pin_region_pools_node_moves_only_within_its_region() -> None:
    pinned = policy(east={"pin_region": True})
    assert changes(plan_of(pinned, NODES, SEEN)) == []
    # a pool of the group in us-east-1 takes it
    pinned = policy(east={"pin_region": True}, east2=True)
    nodes = [*NODES, make_node("east2-1", pool="east2", instance_type=P38)]
    drain = only_drain(plan_of(pinned, nodes, {**SEEN, "east2-1": on(4, 1, 1)}))
    assert drain.node == "east-1" and "fit on free GPUs of vision/east2" in drain.reason
    assert "west" not in drain.reason


def test_nothing_moves_when_the_old_pools_budget_is_spent() -> None:
    # east has a node draining already: max_draining_percent 50 of 2 nodes is spent
    leaving = east("east-0", state=NodeState.DRAINING, drain_trigger="idle")
    seen = {**SEEN, "east-0": on(4)}
    plan = plan_of(policy(), [leaving, *NODES], seen)
    assert changes(plan) == []
    plan = plan_of(policy(), [leaving, *NODES], {**SEEN, "west-1": on(4, 1, 1, 1, 1)},
                   offerings=WEST_CHEAP)
    assert changes(plan) == []  # no replacement elsewhere either
    # its floor: min_nodes 1 keeps its one node, here or elsewhere
    assert changes(plan_of(policy(east={"min_nodes": 1}), NODES, SEEN)) == []
    plan = plan_of(policy(east={"min_nodes": 1}), NODES, SEEN, offerings=WEST_CHEAP)
    assert changes(plan) == []


def test_never_on_absence_of_evidence() -> None:
    # west's GPU metrics are missing: its free room is not believed
    pools = {WEST: PoolObservation(metrics_missing="query timed out")}
    assert changes(plan_of(policy(), NODES, SEEN, pools=pools)) == []


def test_free_room_that_pending_jobs_of_its_pool_want_is_left_to_them() -> None:
    pools = {WEST: PoolObservation(pending=pending(1))}
    plan = plan_of(policy(), NODES, SEEN, pools=pools)
    assert [a for a in changes(plan) if a.pool == EAST] == []


def test_a_cheaper_node_in_another_pool_replaces_it_make_before_break() -> None:
    full = {**SEEN, "west-1": on(4, 1, 1, 1, 1)}  # no free GPU anywhere
    plan = plan_of(policy(), NODES, full, offerings=WEST_CHEAP)
    (launch,) = changes(plan)
    assert isinstance(launch, Launch)
    assert (launch.pool, launch.instance_type, launch.trigger, launch.replaces, launch.count) == (
        WEST, P32, "consolidate-move", ["east-1"], 1)
    assert ("on a cheaper node in vision/west (aws us-west-2): vision/east p3.8xlarge on-demand "
            "$12.24/h ($3.06/GPU-h) -> vision/west p3.2xlarge on-demand ($2.400/h, $2.400/GPU-h)"
            ", saves $9.84/h") in launch.reason
    assert "east-1 drains once it is READY" in launch.reason
    # booting: east-1 keeps serving, and no second replacement is launched
    booting = west("west-9", instance_type=P32, state=NodeState.BOOTSTRAPPING, age=timedelta(minutes=3),
                   ready_for=None, replaces="east-1", launched_for="consolidate-move")
    plan = plan_of(policy(), [*NODES, booting], full, offerings=WEST_CHEAP)
    assert changes(plan) == []
    # READY: east-1 drains, on the east pool's budget
    ready = west("west-9", instance_type=P32, age=timedelta(minutes=10), ready_for=timedelta(minutes=1),
                 replaces="east-1", launched_for="consolidate-move")
    plan = plan_of(policy(), [*NODES, ready], {**full, "west-9": on(1)}, offerings=WEST_CHEAP)
    drain = only_drain(plan)
    assert (drain.pool, drain.node, drain.trigger) == (EAST, "east-1", "consolidate")
    assert "west-9 of vision/west (p3.2xlarge on-demand in us-west-2) is READY in place of east-1" in drain.reason
    # ... and waits while that budget is spent
    spent = policy(east={"scale_down": {"consolidate_below": 50, "max_draining_percent": 0}})
    plan = plan_of(spent, [*NODES, ready], {**full, "west-9": on(1)}, offerings=WEST_CHEAP)
    assert changes(plan) == []
    assert any(isinstance(a, Hold) and ("its drain waits: max_draining_percent 0 of 1 node(s) lets 0 leave at once, 0 already "
                                             "draining") in a.reason
               for a in plan.actions)


def test_its_own_pools_cheaper_type_wins_unless_the_group_offers_less() -> None:
    full = {**SEEN, "west-1": on(4, 1, 1, 1, 1)}
    own = policy(east={"instance_types": [P38, P32]})
    (replace,) = changes(plan_of(own, NODES, full))  # west's p3.2xlarge costs the same
    assert isinstance(replace, Replace) and replace.pool == EAST and replace.instance_type == P32
    (launch,) = changes(plan_of(own, NODES, full, offerings=WEST_CHEAP))
    assert isinstance(launch, Launch) and launch.pool == WEST
    assert "its own pool's cheapest: p3.2xlarge on-demand ($3.060/h" in launch.reason


def test_the_team_quota_refuses_the_replacement_with_a_reason() -> None:
    full = {**SEEN, "west-1": on(4, 1, 1, 1, 1)}
    pol = policy().model_copy(update={"quota": policy().quota.model_copy(update={"max_gpus": 8})})
    plan = plan_of(pol, NODES, full, offerings=WEST_CHEAP)
    assert changes(plan) == []
    (hold,) = [a for a in plan.actions if isinstance(a, Hold) and a.pool == EAST]
    assert "would cost less, but the replacement is refused by" in hold.reason


def test_the_reason_names_both_pools_and_their_prices() -> None:
    nodes = [east("east-1"), west("west-1", market=Market.SPOT, zone="us-west-2a")]
    offers = [Offering(cloud="aws", region="us-west-2", instance_type=P38, zone="us-west-2a", spot_usd=3.68)]
    drain = only_drain(plan_of(policy(), nodes, SEEN, offerings=offers))
    assert ("vision/east p3.8xlarge on-demand $3.06/GPU-h -> vision/west $0.92/GPU-h (already paid for)"
            in drain.reason)


def test_free_gpus_taken_by_one_move_are_no_room_for_the_next() -> None:
    # west-1 has one GPU free; east-1's job takes it, so west-2's job does not fit there
    # any more and west-2 goes to a cheaper type of its own pool instead.
    nodes = [*NODES, west("west-2")]
    seen = {"east-1": on(4, 1), "west-1": on(4, 1, 1, 1), "west-2": on(4, 1)}
    plan = plan_of(policy(), nodes, seen)
    drains = [a for a in changes(plan) if isinstance(a, Drain)]
    assert [(d.pool, d.node) for d in drains] == [(EAST, "east-1")]
    (replace,) = [a for a in changes(plan) if isinstance(a, Replace)]
    assert (replace.pool, replace.node, replace.instance_type) == (WEST, "west-2", P32)


def test_a_replacement_still_booting_counts_as_a_drain_to_come() -> None:
    # east-1's replacement boots in west: with max_draining_percent 50 of east's 2 nodes,
    # east-2 stays, whether its job could go to free GPUs or to a cheaper node
    booting = west("west-9", instance_type=P32, state=NodeState.BOOTSTRAPPING, age=timedelta(minutes=3),
                   ready_for=None, replaces="east-1", launched_for="consolidate-move")
    nodes = [east("east-1"), east("east-2"), west("west-1"), booting]
    seen = {"east-1": on(4, 1), "east-2": on(4, 1), "west-1": on(4, 1, 1)}
    assert changes(plan_of(policy(), nodes, seen)) == []
    full = {**seen, "west-1": on(4, 1, 1, 1, 1)}
    assert changes(plan_of(policy(), nodes, full, offerings=WEST_CHEAP)) == []
    # with room in the budget for both, east-2 moves
    wide = policy(east={"scale_down": {"consolidate_below": 50, "max_draining_percent": 100}})
    drain = only_drain(plan_of(wide, nodes, seen))
    assert drain.node == "east-2" and "fit on free GPUs of vision/west" in drain.reason


# -- pins: the pools each running job may run in (RunningJob.pools) -------------------------

PINNED = "j0-1 may run only in vision/east"


def holds(plan: Plan, pool: str = EAST) -> list[str]:
    return [a.reason for a in plan.actions if isinstance(a, Hold) and a.pool == pool]


def test_a_job_pinned_to_its_region_is_not_moved_onto_another_regions_free_gpus() -> None:
    # the unpinned twin moves to west-1's free GPUs
    drain = only_drain(plan_of(policy(), NODES, SEEN))
    assert (drain.pool, drain.node) == (EAST, "east-1")
    # the same node whose job may run only in east (a region nodeSelector) stays, and a Hold says why
    plan = plan_of(policy(), NODES, {**SEEN, "east-1": on(4, 1, pools=[EAST])})
    assert changes(plan) == []
    (why,) = holds(plan)
    assert why.startswith("vision/east: consolidating east-1: 1 of 4 GPUs allocated")
    assert ("its jobs would fit on free GPUs of vision/west of its placement group, but the move "
            f"is refused for a pin: job {PINNED}") in why
    # a list that names west lets it go there
    drain = only_drain(plan_of(policy(), NODES, {**SEEN, "east-1": on(4, 1, pools=[EAST, WEST])}))
    assert (drain.node, drain.trigger) == ("east-1", "consolidate")
    assert "fit on free GPUs of vision/west" in drain.reason


def test_each_jobs_pin_chooses_its_own_room() -> None:
    # two jobs on east-1; west and east2 have room; job 0 may run in east or east2 only
    pol = policy(east2=True)
    nodes = [*NODES, make_node("east2-1", pool="east2", instance_type=P38)]
    seen = {"east-1": NodeObservation(
        metrics=SEEN["east-1"].metrics, scheduler=SchedulerNode(
            state="mixed", gpus_total=4, gpus_allocated=1.5, jobs=[
                RunningJob(id="a", gpus=1, started_at=NOW - timedelta(hours=2), pools=[EAST, EAST2]),
                RunningJob(id="b", gpus=0.5, started_at=NOW - timedelta(hours=2))])),
        "west-1": on(4, 1, 1), "east2-1": on(4, 1, 1, 1)}  # east2-1: one GPU free, west-1: two
    drain = only_drain(plan_of(pol, nodes, seen))
    assert drain.node == "east-1"
    assert "fit on free GPUs of vision/east2, vision/west of its placement group" in drain.reason
    assert "(east2-1, west-1: 3 GPUs free)" in drain.reason


def test_a_replacement_goes_only_to_a_pool_in_every_jobs_list() -> None:
    full = {**SEEN, "west-1": on(4, 1, 1, 1, 1)}  # no free GPU: only a replacement moves it
    for pools in ([EAST, WEST], [WEST, "vision/nowhere"], None):
        (launch,) = changes(plan_of(policy(), NODES, {**full, "east-1": on(4, 1, pools=pools)},
                                    offerings=WEST_CHEAP))
        assert isinstance(launch, Launch) and (launch.pool, launch.replaces) == (WEST, ["east-1"])
    # pinned to east: no node is launched in west, and a Hold says what the pin refused
    plan = plan_of(policy(), NODES, {**full, "east-1": on(4, 1, pools=[EAST])}, offerings=WEST_CHEAP)
    assert changes(plan) == []
    (why,) = holds(plan)
    assert ("a cheaper node in vision/west (p3.2xlarge on-demand ($2.400/h, $2.400/GPU-h)) would "
            f"hold its jobs, but the move is refused for a pin: job {PINNED}") in why
    # its own pool's cheaper type still replaces it, and says why not west
    own = policy(east={"instance_types": [P38, P32]})
    (replace,) = changes(plan_of(own, NODES, {**full, "east-1": on(4, 1, pools=[EAST])},
                                 offerings=WEST_CHEAP))
    assert isinstance(replace, Replace) and (replace.pool, replace.instance_type) == (EAST, P32)
    assert "not moved to another pool of its group: a cheaper node in vision/west" in replace.reason


def test_a_replacement_after_free_gpus_refused_for_a_pin_says_so() -> None:
    # east-1's job may run in east and west only: west-1 is full, east2-1's free GPU is not for it
    pol = policy(east2=True)
    nodes = [*NODES, make_node("east2-1", pool="east2", instance_type=P38)]
    seen = {"east-1": on(4, 1, pools=[EAST, WEST]), "west-1": on(4, 1, 1, 1, 1),
            "east2-1": on(4, 1, 1, 1)}
    (launch,) = changes(plan_of(pol, nodes, seen, offerings=WEST_CHEAP))
    assert isinstance(launch, Launch) and (launch.pool, launch.instance_type) == (WEST, P32)
    assert "fit on no free GPUs of its placement group they may use, but on a cheaper node" in launch.reason
    assert ("saves $9.84/h; its jobs would fit on free GPUs of vision/east2 of its placement group, "
            "but the move is refused for a pin: job j0-1 may run only in vision/east, vision/west"
            ) in launch.reason


def test_pins_naming_pools_outside_the_team_or_group_are_ignored() -> None:
    # another team's pool and a pool of no group: ignored, so the job is pinned to nothing
    hostile = on(4, 1, pools=["search/west", "vision/ghost", "../west"])
    plan = plan_of(policy(), NODES, {**SEEN, "east-1": hostile})
    assert changes(plan) == []
    (why,) = holds(plan)
    assert "refused for a pin: job j0-1 may run only in no pool of its group" in why
    assert "search/west" not in why and "ghost" not in why
    # a real pool among them still counts
    drain = only_drain(plan_of(policy(), NODES, {**SEEN, "east-1": on(4, 1, pools=["search/x", WEST])}))
    assert drain.node == "east-1" and "fit on free GPUs of vision/west" in drain.reason
    # a pool of the group outside a pin_region pool's region stays refused by pin_region
    pinned = policy(east={"pin_region": True})
    assert changes(plan_of(pinned, NODES, {**SEEN, "east-1": on(4, 1, pools=[EAST, WEST])})) == []


@pytest.mark.parametrize("pools", [
    [f"vision/p{i}" for i in range(65)],  # more than MAX_POOL_OPTIONS
    ["vision/" + "x" * 200],  # longer than a pool key may be
])
def test_an_oversized_pin_list_is_refused_at_validation(pools: list[str]) -> None:
    with pytest.raises(ValidationError):
        RunningJob(id="j", gpus=1, pools=pools)
    assert RunningJob(id="j", gpus=1, pools=[f"vision/p{i}" for i in range(64)]).pools is not None
