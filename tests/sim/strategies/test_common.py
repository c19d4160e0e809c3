from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.sim.cluster import SimNode
from autoscaler.sim.replay import Replay
from autoscaler.sim.spot import load_spot_traces
from autoscaler.sim.strategies.base import Strategy
from autoscaler.sim.strategies.common import Buyer, Limits, mix_for
from tests.sim.conftest import EXACT, policy, ready_node, write_spot
from tests.sim.conftest import replay_for as _replay_for


def _pool(fallback: str):  # type: ignore[no-untyped-def]
    return policy(zones=["us-east-1a", "us-east-1b"],
                  capacity={"on_demand_base": 0, "spot_percent": 100, "spot_fallback": fallback}).pools[0]


def _spot(tmp_path: Path, a: list[int], b: list[int]):  # type: ignore[no-untyped-def]
    write_spot(tmp_path / "us-east-1a_v100_1.json", a, gap=600)
    write_spot(tmp_path / "us-east-1b_v100_1.json", b, gap=600)
    return load_spot_traces(tmp_path)


class BuyOnce(Strategy):
    """Buys one node at the start and hands refusals to the Buyer, as the baselines do."""

    name, interval = "buy-once", 3600.0

    def __init__(self) -> None:
        self.buyer = Buyer()
        self.first: SimNode | None = None

    def begin(self, replay: Replay, now: float) -> None:
        self.first = self.buyer.buy(replay, "p3.2xlarge", mix_for(replay), now)

    def tick(self, replay: Replay, now: float) -> None:
        return None

    def capacity_error(self, replay: Replay, node: SimNode, now: float) -> None:
        self.buyer.refused(replay, node, now)


def replay_for(jobs: list, **kw):  # type: ignore[no-untyped-def,type-arg]
    return _replay_for(jobs, strategy=BuyOnce(), **kw)


def _launched(replay: Replay) -> list[tuple[str, str | None, float, str]]:
    return sorted((n.market.value, n.zone, n.created_at, n.state.value) for n in replay.cluster.nodes.values())


def test_a_refused_zone_costs_one_attempt_then_the_next_zone_is_tried(tmp_path: Path) -> None:
    replay = replay_for([], pool=_pool("none"), spot=_spot(tmp_path, [1, 1], [0, 0]), end=600)
    replay.run()
    a = EXACT.launch_attempt
    assert _launched(replay) == [("spot", "us-east-1a", 0.0, "PROVISION_FAILED"),
                                 ("spot", "us-east-1b", a, "READY")]
    assert replay.cluster.totals.failed_launches == 1
    from autoscaler.sim.results import summarize
    assert summarize(replay).cost_usd == pytest.approx(0.918 * (600 - a) / 3600, rel=0.2)


def test_no_zone_and_no_fallback_backs_off_five_minutes(tmp_path: Path) -> None:
    replay = replay_for([], pool=_pool("none"), spot=_spot(tmp_path, [1], [1]), end=3000)
    strategy = replay.strategy
    replay.run()
    assert replay.cluster.totals.failed_launches == 2  # 1a, then 1b; nothing else tried
    assert isinstance(strategy, BuyOnce)
    assert strategy.buyer.blocked_until == 2 * EXACT.launch_attempt + 300
    assert strategy.buyer.buy(replay, "p3.2xlarge", mix_for(replay), 300) is None
    assert replay.cluster.totals.cost_usd == 0  # refused launches are never billed


def test_no_capacity_falls_back_to_on_demand_when_the_policy_allows(tmp_path: Path) -> None:
    replay = replay_for([], pool=_pool("on-demand"), spot=_spot(tmp_path, [1], [1]), end=600)
    replay.run()
    a = EXACT.launch_attempt
    assert ("on-demand", "us-east-1a", 2 * a, "READY") in _launched(replay)


def test_limits_count_nodes_and_quota_gpus() -> None:
    replay = _replay_for([])
    nodes = [ready_node(replay, "p3.8xlarge") for _ in range(3)]
    assert Limits(max_nodes=10, max_gpus=None).room(nodes, 4) == 7
    assert Limits(max_nodes=10, max_gpus=20).room(nodes, 4) == 2
