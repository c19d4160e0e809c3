from __future__ import annotations

from autoscaler.model.lifecycle import IN_FLIGHT
from autoscaler.sim.strategies.target_tracking import TargetTracking, fitting_type
from autoscaler.traces import Job
from tests.sim.conftest import CATALOG, policy, ready_node, replay_for, run_job, workload

POOL = policy(instance_types=["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]).pools[0]


def test_instance_type_fits_the_largest_job() -> None:
    assert fitting_type(workload([Job("a", 0, 1, 0.5), Job("b", 0, 1, 4.0)]), POOL, CATALOG) == "p3.8xlarge"
    assert fitting_type(workload([Job("a", 0, 1, 0.3)]), POOL, CATALOG) == "p3.2xlarge"


def test_scale_out_needs_three_datapoints_above_target() -> None:
    job = Job("busy", 0, 10**6, 1.0)  # 100% util (no duty-cycle data)
    tt = TargetTracking("p3.2xlarge")
    replay = replay_for([job], strategy=tt, pool=POOL)
    node = ready_node(replay, now=0)
    run_job(replay, job, node, 0)
    tt.tick(replay, 600)
    tt.tick(replay, 660)
    assert len(replay.cluster.nodes) == 1
    tt.tick(replay, 720)
    assert tt.desired == 2  # ceil(1 x 100 / 70)
    assert sum(1 for n in replay.cluster.nodes.values() if n.state in IN_FLIGHT) == 1


def test_warming_instances_do_not_report() -> None:
    job = Job("busy", 0, 10**6, 1.0)
    tt = TargetTracking("p3.2xlarge")
    replay = replay_for([job], strategy=tt, pool=POOL)
    node = ready_node(replay, now=0)
    run_job(replay, job, node, 0)
    for t in (60, 120, 180):  # within the 300 s warm-up of the node
        tt.tick(replay, t)
    assert tt.desired == 1 and not tt.points


def test_scale_in_needs_fifteen_datapoints_below_and_keeps_one() -> None:
    tt = TargetTracking("p3.2xlarge")
    replay = replay_for([], strategy=tt, pool=POOL)
    for _ in range(3):
        ready_node(replay, now=0)
    tt.desired = 3
    for i in range(14):
        tt.tick(replay, 600 + 60 * i)
    assert len(replay.cluster.nodes) == 3
    tt.tick(replay, 600 + 60 * 14)
    assert tt.desired == 1  # ceil(3 x 0 / 70) = 0, but the minimum capacity is 1
    assert len(replay.cluster.nodes) == 1


def test_scale_in_takes_the_least_loaded_node() -> None:
    job = Job("j", 0, 10**6, 0.1)  # 10% util: below the scale-in threshold
    tt = TargetTracking("p3.2xlarge")
    replay = replay_for([job], strategy=tt, pool=POOL)
    busy = ready_node(replay, now=0)
    run_job(replay, job, busy, 0)
    ready_node(replay, now=0)
    tt.desired = 2
    for i in range(15):
        tt.tick(replay, 600 + 60 * i)
    assert list(replay.cluster.nodes) == [busy.name]
    assert not replay.cluster.totals.kills
