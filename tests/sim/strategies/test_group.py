"""Placement groups in the simulator: one cluster, pools in several regions, decide() routes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from autoscaler.model.lifecycle import NodeState
from autoscaler.policy.models import Market, Pool, TeamPolicy
from autoscaler.sim.replay import Replay
from autoscaler.sim.spot import SpotMarket, load_spot_traces
from autoscaler.sim.strategies.engine import EngineStrategy
from autoscaler.sim.strategies.failover import Region, SkyPilotFailover
from autoscaler.sim.strategies.group import GroupEngineStrategy
from autoscaler.traces import Job
from tests.sim.conftest import CATALOG, EXACT, workload, write_spot

EAST, WEST = "sim/east", "sim/west"
SPOT = {"on_demand_base": 0, "spot_percent": 100, "spot_fallback": "on-demand"}


def group_policy() -> TeamPolicy:
    def pool(name: str, region: str, zone: str) -> dict[str, Any]:
        return {"name": name, "cloud": "aws", "region": region, "zones": [zone],
                "instance_types": ["p3.2xlarge"], "max_nodes": 4, "capacity": SPOT,
                "placement_group": "v100", "scale_up": {"gpu_utilization_above": 100, "max_step": 4},
                "scale_down": {"idle_for": "10m", "cooldown": "1s"}}
    return TeamPolicy.model_validate({"team": "sim", "pools": [
        pool("east", "us-east-1", "us-east-1a"), pool("west", "us-west-2", "us-west-2a")]})


def dry_east(tmp_path: Path) -> SpotMarket:
    """us-east-1a has no spot capacity at all; us-west-2a always has."""
    write_spot(tmp_path / "us-east-1a_v100_1.json", [1])
    write_spot(tmp_path / "us-west-2a_v100_1.json", [0])
    return load_spot_traces(tmp_path)


def one_job(strategy: Any, pool: Pool, spot: SpotMarket, end: float = 1200) -> Replay:
    run = Replay(workload([Job("a", 0, 1800, 1.0)], end=end), pool, CATALOG, EXACT, strategy, spot=spot)
    return run.run()


def test_the_group_spills_to_the_other_regions_spot_when_its_zone_is_dry(tmp_path: Path) -> None:
    pol = group_policy()
    group = GroupEngineStrategy(pol, pol.pools, CATALOG, interval=30)
    run = one_job(group, pol.pools[0], dry_east(tmp_path))
    job = run.jobs[0]
    assert job.node is not None
    assert (job.node.pool, job.node.zone, job.node.market) == (WEST, "us-west-2a", Market.SPOT)
    # east spot was tried first (equal prices: the job stays where it is listed), refused
    # after one attempt, and never replaced by an on-demand node
    assert group.launched == {(EAST, "spot"): 1, (WEST, "spot"): 1}
    assert run.cluster.totals.failed_launches == 1
    # The refusal, 36 s in, is followed up 10 s after the last tick (30 s; the service's
    # tick.follow_up), not at the next one (60 s): the west launch boots from 40 s.
    assert job.wait == 30 + 10 + EXACT.boot_delay and run.stats.wakes == 1
    waits = GroupEngineStrategy(pol, pol.pools, CATALOG, interval=30, follow_up=None)
    late = one_job(waits, pol.pools[0], dry_east(tmp_path))
    assert late.jobs[0].wait == 60 + EXACT.boot_delay and late.stats.wakes == 0
    assert waits.launched == group.launched


def test_the_region_alone_falls_back_to_on_demand(tmp_path: Path) -> None:
    east = group_policy().pools[0]
    alone = Pool.model_validate({**east.model_dump(), "placement_group": None})
    team = TeamPolicy.model_validate({"team": "sim", "pools": [alone.model_dump()]})
    run = one_job(EngineStrategy(team, alone, CATALOG), alone, dry_east(tmp_path))
    node = run.jobs[0].node
    assert node is not None and (node.zone, node.market) == ("us-east-1a", Market.ON_DEMAND)


def test_refusals_carry_the_region_of_the_pool_they_happened_in(tmp_path: Path) -> None:
    pol = group_policy()
    group = GroupEngineStrategy(pol, pol.pools, CATALOG, interval=30)
    one_job(group, pol.pools[0], dry_east(tmp_path), end=120)  # within the back-off
    assert {(e.region, e.zone) for e in group.errors} == {("us-east-1", "us-east-1a")}


def test_failover_moves_to_the_next_region_and_never_back(tmp_path: Path) -> None:
    pol = group_policy()
    regions = [Region(EAST, ("us-east-1a",)), Region(WEST, ("us-west-2a",))]
    failover = SkyPilotFailover(regions)
    run = one_job(failover, pol.pools[0], dry_east(tmp_path))
    node = run.jobs[0].node
    assert node is not None and (node.pool, node.market) == (WEST, Market.SPOT)
    assert failover.buyer.current == 1 and len(failover.buyer.moves) == 1
    live = [n for n in run.cluster.nodes.values() if n.state is not NodeState.PROVISION_FAILED]
    assert all(n.pool == WEST for n in live)


def test_with_wake_after_an_arrival_is_decided_while_another_pool_of_the_group_is_free(
        tmp_path: Path) -> None:
    """Ticks every 60 s, spot everywhere. a (t=0) is launched at the tick at 0; b arrives at
    5 s. The group has a pool whose apply is not running, so the wake comes at 10 s and b
    waits 245 s. A pool decided alone applies one launch at a time: its wake waits for a's
    attempt (36 s), and b waits 271 s."""
    write_spot(tmp_path / "us-east-1a_v100_1.json", [0])
    write_spot(tmp_path / "us-west-2a_v100_1.json", [0])
    spot = load_spot_traces(tmp_path)
    config = replace(EXACT, tick=60.0, wake_after=10.0)
    jobs = workload([Job("a", 0, 1800, 1.0), Job("b", 5, 1800, 1.0)], end=1200)
    pol = group_policy()
    group = GroupEngineStrategy(pol, pol.pools, CATALOG, interval=60, wake_after=10.0)
    run = Replay(jobs, pol.pools[0], CATALOG, config, group, spot=spot).run()
    assert [j.wait for j in run.jobs] == [EXACT.boot_delay, 5 + EXACT.boot_delay]
    assert run.stats.wakes == 1 and group.parameters()["wake_after_s"] == 10.0
    east = pol.pools[0]
    alone = Pool.model_validate({**east.model_dump(), "placement_group": None})
    team = TeamPolicy.model_validate({"team": "sim", "pools": [alone.model_dump()]})
    single = EngineStrategy(team, alone, CATALOG, interval=60, wake_after=10.0)
    one = Replay(jobs, alone, CATALOG, config, single, spot=spot).run()
    assert [j.wait for j in one.jobs] == [EXACT.boot_delay, 31 + EXACT.boot_delay]
