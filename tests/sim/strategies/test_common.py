from __future__ import annotations

from pathlib import Path

from autoscaler.policy.models import Market
from autoscaler.sim.spot import load_spot_traces
from autoscaler.sim.strategies.common import Buyer, Limits, mix_for
from tests.sim.conftest import policy, ready_node, replay_for, write_spot


def _pool(fallback: str):  # type: ignore[no-untyped-def]
    return policy(zones=["us-east-1a", "us-east-1b"],
                  capacity={"on_demand_base": 0, "spot_percent": 100, "spot_fallback": fallback}).pools[0]


def _spot(tmp_path: Path, a: list[int], b: list[int]):  # type: ignore[no-untyped-def]
    write_spot(tmp_path / "us-east-1a_v100_1.json", a, gap=600)
    write_spot(tmp_path / "us-east-1b_v100_1.json", b, gap=600)
    return load_spot_traces(tmp_path)


def test_spot_goes_to_the_first_zone_with_capacity_after_a_failed_try(tmp_path: Path) -> None:
    replay = replay_for([], pool=_pool("none"), spot=_spot(tmp_path, [1, 1], [0, 0]))
    node = Buyer().buy(replay, "p3.2xlarge", mix_for(replay), 0)
    assert node is not None and (node.market, node.zone) == (Market.SPOT, "us-east-1b")
    ready_at = replay.clock.next_time()
    assert ready_at is not None and ready_at > 0.4 * 240  # the refused try in 1a cost time


def test_no_capacity_and_no_fallback_backs_off_five_minutes(tmp_path: Path) -> None:
    replay = replay_for([], pool=_pool("none"), spot=_spot(tmp_path, [1], [1]))
    buyer = Buyer()
    assert buyer.buy(replay, "p3.2xlarge", mix_for(replay), 0) is None
    assert buyer.buy(replay, "p3.2xlarge", mix_for(replay), 290) is None
    assert replay.cluster.totals.failed_launches == 1  # the second call did not even try
    buyer.buy(replay, "p3.2xlarge", mix_for(replay), 300)
    assert replay.cluster.totals.failed_launches == 2


def test_no_capacity_falls_back_to_on_demand_when_the_policy_allows(tmp_path: Path) -> None:
    replay = replay_for([], pool=_pool("on-demand"), spot=_spot(tmp_path, [1], [1]))
    node = Buyer().buy(replay, "p3.2xlarge", mix_for(replay), 0)
    assert node is not None and node.market is Market.ON_DEMAND


def test_limits_count_nodes_and_quota_gpus() -> None:
    replay = replay_for([])
    nodes = [ready_node(replay, "p3.8xlarge") for _ in range(3)]
    assert Limits(max_nodes=10, max_gpus=None).room(nodes, 4) == 7
    assert Limits(max_nodes=10, max_gpus=20).room(nodes, 4) == 2
