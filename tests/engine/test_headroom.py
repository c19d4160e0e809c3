"""The headroom floor (scale_up.headroom_gpus): free GPUs kept for the next jobs."""

from __future__ import annotations

from datetime import timedelta

from autoscaler.engine import Drain, Launch, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.snapshot import CapacityError, NodeObservation, PoolObservation, SchedulerNode
from autoscaler.policy.models import Market
from tests.builders import NOW, busy, fleet, idle, make_node, make_policy, pending, snapshot, spot_refusal

KEY = "vision/gpu"
OLD = timedelta(hours=3)
MINUTE = timedelta(minutes=1)


def run(headroom, nodes=(), obs=None, jobs=(), **policy):
    policy = make_policy(scale_up={"headroom_gpus": headroom, "max_step": 10}, **policy)
    snap = snapshot(obs or {}, pools={KEY: PoolObservation(pending=pending(*jobs))} if jobs else None)
    return decide({policy.team: policy}, fleet(*nodes), snap, NOW)


def launches(plan) -> list[Launch]:
    return [a for a in plan.actions if isinstance(a, Launch)]


def drains(plan) -> list[Drain]:
    return [a for a in plan.actions if isinstance(a, Drain)]


def test_a_full_pool_launches_the_headroom_with_its_reason():
    plan = run(1, [make_node("n1")], {"n1": busy(50)})
    (launch,) = launches(plan)
    assert (launch.instance_type, launch.count, launch.trigger) == ("p3.2xlarge", 1, "floor")
    assert "scale_up.headroom_gpus 1: 0 free GPU(s) ready or coming after 0 pending: 2 node(s)" in launch.reason
    assert plan.pools[KEY].floor == 2


def test_free_whole_gpus_on_busy_nodes_are_the_headroom():
    half = NodeObservation(metrics=busy(50, gpus=4).metrics, scheduler=SchedulerNode(
        state="mixed", gpus_total=4, gpus_allocated=2.5, gpus_free=[0, 0.5, 1, 1]))
    assert launches(run(2, [make_node("n1", instance_type="p3.8xlarge")], {"n1": half})) == []
    # Only whole GPUs count: the 0.5 free GPU does not make a third.
    assert sum(a.count for a in launches(run(3, [make_node("n1", instance_type="p3.8xlarge")],
                                                 {"n1": half}))) == 1


def test_pending_jobs_take_room_before_the_headroom():
    coming = make_node("n1", state=NodeState.BOOTSTRAPPING, ready_for=None)
    plan = run(1, [coming], jobs=[1.0])
    # The node coming up serves the pending job; one more is the headroom.
    assert sum(a.count for a in launches(plan)) == 1
    assert "1 pending" in launches(plan)[0].reason


def test_idle_nodes_the_headroom_needs_are_kept_and_the_rest_drained():
    nodes = [make_node(f"n{i}", ready_for=OLD, state_since=NOW - OLD) for i in range(3)]
    every = {"max_draining_percent": 100}
    plan = run(1, nodes, {f"n{i}": idle() for i in range(3)}, scale_down=every)
    assert len(drains(plan)) == 2
    assert launches(plan) == []
    assert len(drains(run(0, nodes, {f"n{i}": idle() for i in range(3)}, scale_down=every))) == 3


def test_a_node_without_a_scheduler_report_counts_no_free_gpu():
    plan = run(1, [make_node("n1")], {"n1": NodeObservation(metrics=busy(50).metrics)})
    assert sum(a.count for a in launches(plan)) == 1


def test_max_nodes_still_applies():
    assert launches(run(4, [make_node("n1")], {"n1": busy(50)}, max_nodes=1)) == []
    assert sum(a.count for a in launches(run(4, [make_node("n1")], {"n1": busy(50)}, max_nodes=3))) == 2


def test_pending_jobs_that_go_on_prem_take_no_cloud_room():
    from autoscaler.model.snapshot import OnPremNode

    policy = make_policy(scale_up={"headroom_gpus": 1, "max_step": 10},
                         cluster={"kind": "slurm", "on_prem": {"nodes": "gpu01"}})
    coming = make_node("n1", state=NodeState.BOOTSTRAPPING, ready_for=None)
    obs = PoolObservation(pending=pending(1.0, 1.0),
                          on_prem=[OnPremNode(name="gpu01", gpus=4, allocated=3)])
    plan = decide({policy.team: policy}, fleet(coming), snapshot({}, pools={KEY: obs}), NOW)
    # One job goes on-prem, the other on the node coming up; one more is the headroom.
    (launch,) = launches(plan)
    assert launch.count == 1 and "after 1 pending (1 more go on-prem)" in launch.reason


def test_spot_scarcity_raises_the_headroom_only_while_enough_zones_refused_spot():
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    capacity = {"spot_percent": 100, "spot_scarcity": {"zones": 2, "within": "30m", "headroom_gpus": 2}}
    nodes, obs = [make_node("n1", market=Market.SPOT, zone="us-east-1a")], {"n1": busy(50)}

    def plan(*errors: CapacityError):
        policy = make_policy(zones=zones, capacity=capacity, scale_up={"max_step": 10})
        return decide({policy.team: policy}, fleet(*nodes), snapshot(obs, capacity_errors=list(errors)), NOW)

    # Two zones refused within 30 minutes: two spare GPUs, bought in the zone still open
    # (the others are within capacity_error_backoff), with the evidence in the reason.
    (launch,) = launches(plan(spot_refusal("us-east-1a", ago=10 * MINUTE),
                              spot_refusal("us-east-1b", ago=3 * MINUTE)))
    assert (launch.count, launch.zone, launch.market) == (2, "us-east-1c", Market.SPOT)
    assert launch.reason.startswith(
        f"{KEY}: capacity.spot_scarcity.headroom_gpus 2 (spot refused in 2 of 3 zone(s) within 30m "
        "(us-east-1b at 11:57:00, us-east-1a at 11:50:00; capacity.spot_scarcity from 2)): 0 free "
        "GPU(s) ready or coming after 0 pending")
    # One zone, or a refusal past the window: the pool's own headroom (none) holds.
    assert launches(plan(spot_refusal("us-east-1b", ago=3 * MINUTE))) == []
    assert launches(plan(spot_refusal("us-east-1a", ago=31 * MINUTE),
                         spot_refusal("us-east-1b", ago=3 * MINUTE))) == []
