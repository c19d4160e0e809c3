from __future__ import annotations

from autoscaler.model.lifecycle import IN_FLIGHT
from autoscaler.sim.strategies.static import StaticFleet, peak_demand
from autoscaler.traces import Job
from tests.sim.conftest import CATALOG, policy, replay_for, workload

POOL = policy(instance_types=["p3.2xlarge", "p3.16xlarge"]).pools[0]


def test_peak_counts_overlapping_jobs_and_ends_before_starts() -> None:
    jobs = [Job("a", 0, 100, 3.0), Job("b", 50, 100, 6.0), Job("c", 150, 10, 0.5), Job("d", 100, 10, 0.5)]
    assert peak_demand(workload(jobs)) == 9.0  # a + b; at 100 a ends before d starts (not 9.5)


def test_fleet_sized_for_the_peak_with_the_largest_type() -> None:
    jobs = [Job("a", 0, 100, 3.0), Job("b", 50, 100, 6.0)]
    static = StaticFleet.for_workload(workload(jobs), POOL, CATALOG)
    assert (static.type_name, static.count) == ("p3.16xlarge", 2)


def test_lost_nodes_are_replaced() -> None:
    static = StaticFleet("p3.2xlarge", 3)
    replay = replay_for([], strategy=static, pool=POOL)
    static.begin(replay, 0)
    nodes = list(replay.cluster.nodes.values())
    assert len(nodes) == 3 and all(n.state in IN_FLIGHT for n in nodes)
    replay.terminate(nodes[0], 100, "test")
    static.tick(replay, 160)
    assert len(replay.cluster.nodes) == 3
    assert replay.cluster.totals.launches == 4


def test_fleet_stays_within_max_nodes_and_the_gpu_quota() -> None:
    jobs = [Job(f"j{i}", 0, 100, 8.0) for i in range(30)]  # the peak needs 30 x 8 GPUs
    static = StaticFleet.for_workload(workload(jobs), POOL, CATALOG, quota_gpus=160)
    assert (static.count, static.wanted) == (20, 30)  # 160 GPUs / 8
    capped = policy(instance_types=["p3.16xlarge"], max_nodes=5).pools[0]
    assert StaticFleet.for_workload(workload(jobs), capped, CATALOG, quota_gpus=160).count == 5
