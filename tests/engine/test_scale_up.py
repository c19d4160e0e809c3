"""Demand first: pending jobs, utilization, floors, cancel-drain before launch."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from autoscaler.engine import CancelDrain, Hold, Launch, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import PoolHistory
from autoscaler.model.snapshot import PendingJob, PoolObservation
from tests.builders import NOW, busy, fleet, idle, make_node, make_policy, pending, snapshot

KEY = "vision/gpu"


def launches(plan) -> list[Launch]:
    return [a for a in plan.actions if isinstance(a, Launch)]


def run(policy, nodes=(), obs=None, pools=None, history=None, **snap):
    return decide({policy.team: policy}, fleet(*nodes, history=history),
                  snapshot(obs or {}, pools or {}, **snap), NOW)


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ((1,), [("p3.2xlarge", 1)]),
        ((4,), [("p3.8xlarge", 1)]),
        ((1, 1), [("p3.2xlarge", 2)]),
        ((4, 1), [("p3.8xlarge", 1), ("p3.2xlarge", 1)]),
        ((0.5, 0.25, 0.25), [("p3.2xlarge", 1)]),  # shares pack onto one GPU
        ((0.5, 0.6), [("p3.2xlarge", 2)]),  # 1.1 GPUs of shares cannot share one GPU
    ],
)
def test_pending_jobs_are_bin_packed_onto_cheapest_fitting_type(jobs, expected):
    plan = run(make_policy(), pools={KEY: PoolObservation(pending=pending(*jobs))})
    got = [(a.instance_type, a.count) for a in launches(plan)]
    assert got == expected
    assert all(a.trigger == "pending" and "pending job" in a.reason for a in launches(plan))


def test_jobs_that_fit_free_or_in_flight_capacity_launch_nothing():
    nodes = [make_node("n1"), make_node("n2", state=NodeState.PROVISIONING, instance_type="p3.8xlarge")]
    obs = {"n1": idle()}
    plan = run(make_policy(), nodes, obs, {KEY: PoolObservation(pending=pending(1, 4))})
    assert launches(plan) == []


@pytest.mark.parametrize(("gpus_free", "launched"), [
    (None, 0),  # only the total is known: 0.3 of one GPU looks free, the share fits
    ([0.1, 0.1, 0.1, 0.0], 1),  # per GPU: no GPU has 0.3 left
    ([0.0, 0.0, 0.0, 0.3], 0),
])
def test_shares_fit_a_serving_node_by_its_per_gpu_free_shares_when_the_scheduler_reports_them(
        gpus_free, launched):
    node = make_node("n1", instance_type="p3.8xlarge")
    obs = busy(util=40.0, gpus=4, jobs=3)  # below the utilization target: only demand buys
    obs = dataclasses.replace(obs, scheduler=dataclasses.replace(
        obs.scheduler, state="mixed", gpus_allocated=3.7, gpus_free=gpus_free))
    plan = run(make_policy(), [node], {"n1": obs}, {KEY: PoolObservation(pending=pending(0.3))})
    assert sum(a.count for a in launches(plan)) == launched


def test_only_resource_and_priority_reasons_count_as_demand():
    jobs = pending(1, reason="Dependency") + pending(1, reason="QOSMaxGRESPerUser")
    plan = run(make_policy(), pools={KEY: PoolObservation(pending=jobs)})
    assert launches(plan) == []


def test_job_larger_than_any_type_is_held_with_reason():
    plan = run(make_policy(instance_types=["p3.2xlarge"]), pools={KEY: PoolObservation(pending=pending(4))})
    assert launches(plan) == []
    holds = [a for a in plan.actions if isinstance(a, Hold)]
    assert any("4 GPUs" in h.reason for h in holds)


def test_gpu_model_constraint_restricts_types():
    policy = make_policy(instance_types=["g4dn.xlarge", "p3.2xlarge"])
    plan = run(policy, pools={KEY: PoolObservation(pending=pending(1, model="V100"))})
    assert [a.instance_type for a in launches(plan)] == ["p3.2xlarge"]


def test_draining_node_is_undrained_before_anything_is_launched():
    node = make_node("n1", state=NodeState.DRAINING, drain_trigger="idle")
    plan = run(make_policy(), [node], {"n1": idle()}, {KEY: PoolObservation(pending=pending(1))})
    assert [type(a) for a in plan.changes()] == [CancelDrain]
    assert "pending job" in plan.actions[0].reason


def test_unhealthy_draining_node_is_not_undrained():
    node = make_node("n1", state=NodeState.DRAINING, drain_trigger="unhealthy")
    plan = run(make_policy(), [node], {"n1": idle()}, {KEY: PoolObservation(pending=pending(1))})
    assert not any(isinstance(a, CancelDrain) for a in plan.actions)
    assert len(launches(plan)) == 1


def test_utilization_above_threshold_adds_capacity_with_numbers_in_reason():
    nodes = [make_node(f"n{i}") for i in range(4)]
    obs = {f"n{i}": busy(95) for i in range(4)}
    plan = run(make_policy(), nodes, obs)
    (launch,) = launches(plan)
    # ceil(4 * 95 / 80) = 5 nodes wanted, 4 present
    assert launch.count == 1 and launch.trigger == "utilization"
    assert "95%" in launch.reason and "80%" in launch.reason and "target 5" in launch.reason


def test_utilization_scale_up_respects_cooldown():
    nodes = [make_node("n1")]
    history = {KEY: PoolHistory(last_scale_up_at=NOW - timedelta(minutes=1))}
    plan = run(make_policy(), nodes, {"n1": busy(99)}, history=history)
    assert launches(plan) == []
    assert any(isinstance(a, Hold) and "cooldown" in a.reason for a in plan.actions)


def test_utilization_counts_in_flight_nodes():
    nodes = [make_node("n1"), make_node("n2", state=NodeState.BOOTSTRAPPING)]
    plan = run(make_policy(), nodes, {"n1": busy(99)})
    assert launches(plan) == []  # ceil(1 * 99 / 80) = 2 = 1 ready + 1 on its way


def test_min_nodes_floor_launches():
    plan = run(make_policy(min_nodes=2))
    (launch,) = launches(plan)
    assert launch.count == 2 and launch.trigger == "floor" and "min_nodes is 2" in launch.reason


def test_max_nodes_bounds_pending_launches_and_max_step_only_growth_without_demand():
    """A burst of pending jobs launches for all of them in one tick, up to max_nodes
    (issue 33: max_step held a 3,123-job burst to 120 nodes a minute); utilization and
    floors, which carry no demand evidence, are paced by max_step."""
    policy = make_policy(max_nodes=30, scale_up={"max_step": 2})
    plan = run(policy, pools={KEY: PoolObservation(pending=pending(*[1] * 25))})
    assert sum(a.count for a in launches(plan)) == 25
    assert not any(isinstance(a, Hold) for a in plan.actions)
    plan = run(make_policy(max_nodes=3, scale_up={"max_step": 2}), [make_node("n0"), make_node("n1")],
               {"n0": busy(), "n1": busy()}, {KEY: PoolObservation(pending=pending(1, 1, 1))})
    assert sum(a.count for a in launches(plan)) == 1
    assert any(isinstance(a, Hold) and "max_nodes (3)" in a.reason for a in plan.actions)
    # ceil(4 * 99 / 80) = 5 wanted of 4; at 20 nodes, 25 wanted: max_step 2 of the 5 more
    nodes = [make_node(f"n{i}") for i in range(20)]
    plan = run(policy, nodes, {n.name: busy(99) for n in nodes})
    (launch,) = launches(plan)
    assert launch.count == 2 and launch.trigger == "utilization"
    assert any(isinstance(a, Hold) and "max_step (2) nodes per tick reached" in a.reason
               for a in plan.actions)
    floor = run(make_policy(min_nodes=5, scale_up={"max_step": 2}))
    assert sum(a.count for a in launches(floor)) == 2


def test_scheduler_missing_means_no_pending_demand():
    plan = run(make_policy(), pools={KEY: PoolObservation(pending=pending(1), scheduler_missing="down")})
    assert launches(plan) == []


def _hold(plan) -> str:
    return next(a.reason for a in plan.actions if isinstance(a, Hold) and "not placed" in a.reason)


def test_a_backlog_is_packed_in_id_order_and_counted_whole():
    """Parts go largest first, then by id; once a shape finds no room the rest of it is
    counted without being looked at one by one, and the reason names the first three."""
    import random

    ids = [f"j{i:05d}" for i in range(4000)]
    random.Random(7).shuffle(ids)
    jobs = [PendingJob(id=i, gpus=4 if n < 1000 else 1) for n, i in enumerate(ids)]
    plan = run(make_policy(max_nodes=2), pools={KEY: PoolObservation(pending=jobs)})
    assert [(a.instance_type, a.count) for a in launches(plan)] == [("p3.8xlarge", 2)]
    big = sorted(j.id for j in jobs if j.gpus == 4)
    assert _hold(plan) == (f"{KEY}: 3998 pending job(s) not placed: " + "; ".join(
        f"{i} (4 GPUs): pool is at max_nodes (2)" for i in big[2:5]))


def test_jobs_of_one_size_with_different_models_are_not_counted_as_one_shape():
    """p1 needs a model the pool lacks; p0 and p2 (same size, any model) still get nodes."""
    jobs = [PendingJob(id="p0", gpus=1), PendingJob(id="p1", gpus=1, gpu_model="T4"),
            PendingJob(id="p2", gpus=1)]
    plan = run(make_policy(), pools={KEY: PoolObservation(pending=jobs)})
    assert [(a.instance_type, a.count) for a in launches(plan)] == [("p3.2xlarge", 2)]
    assert _hold(plan) == f"{KEY}: 1 pending job(s) not placed: p1 needs T4, not offered by this pool"


def test_a_job_bound_to_a_zone_the_pool_lacks_does_not_hold_back_its_size_class():
    """Same size, different zones: one shape each, so p0's refusal says nothing of p1."""
    policy = make_policy(instance_types=["p3.2xlarge"], zones=["us-east-1a"])
    jobs = [PendingJob(id="p0", gpus=1, zones=["us-east-1f"]), PendingJob(id="p1", gpus=1)]
    plan = run(policy, pools={KEY: PoolObservation(pending=jobs)})
    assert [(a.zone, a.count) for a in launches(plan)] == [("us-east-1a", 1)]
    assert _hold(plan).startswith(f"{KEY}: 1 pending job(s) not placed: p0 (1 GPUs): ")
