from __future__ import annotations

import statistics

import pytest

from autoscaler.sim.generate import SHAPES, fleet_workload, nodes_needed
from autoscaler.sim.replay import Replay, SimConfig
from autoscaler.sim.strategies.engine import EngineStrategy
from tests.sim.conftest import CATALOG, policy


def test_same_seed_same_jobs_other_seed_other_jobs() -> None:
    one, again, other = fleet_workload(200, seed=0), fleet_workload(200, seed=0), fleet_workload(200, seed=1)
    assert one.jobs == again.jobs
    assert one.jobs != other.jobs
    assert {j.gpus for j in one.jobs} == {g for g, _, _ in SHAPES}


@pytest.mark.parametrize("nodes", [100, 1000])
def test_the_jobs_need_about_the_nodes_asked_throughout(nodes: int) -> None:
    workload = fleet_workload(nodes, seed=0, hours=2)
    for at in (0, 1800, 3600, 7199):
        assert nodes_needed(workload, at) == pytest.approx(nodes, rel=0.1), at
    carried = [j for j in workload.jobs if j.carried]
    assert carried and all(j.arrival == 0 for j in carried)
    assert all(0 < j.arrival < workload.end for j in workload.jobs if not j.carried)


def test_a_replay_holds_about_the_nodes_asked() -> None:
    team = policy(instance_types=["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"], max_nodes=200,
                  scale_up={"gpu_utilization_above": 100, "max_step": 100})
    pool = team.pools[0]
    workload = fleet_workload(50, seed=0, hours=0.75)
    replay = Replay(workload, pool, CATALOG, SimConfig(), EngineStrategy(team, pool, CATALOG)).run()
    held = [n for t, n in zip(replay.series.t, replay.series.ready_nodes, strict=True) if t >= 1200]
    assert statistics.median(held) == pytest.approx(50, rel=0.15)


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        fleet_workload(0)
