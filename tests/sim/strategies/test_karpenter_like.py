"""Karpenter-like buying: spot spread over zones, refused zones cached, on-demand fallback."""

from __future__ import annotations

from pathlib import Path

from autoscaler.policy.models import Market
from autoscaler.sim.cluster import SimNode
from autoscaler.sim.replay import Replay
from autoscaler.sim.strategies.base import Strategy
from autoscaler.sim.strategies.common import mix_for
from autoscaler.sim.strategies.karpenter_like import ICE_TTL, SpreadBuyer
from tests.sim.conftest import EXACT
from tests.sim.conftest import replay_for as _replay_for
from tests.sim.strategies.test_common import _pool, _spot


class BuyTwo(Strategy):
    """Buys two nodes at the start, refusals go to the SpreadBuyer."""

    name, interval = "buy-two", 3600.0

    def __init__(self) -> None:
        self.buyer = SpreadBuyer(300.0)

    def begin(self, replay: Replay, now: float) -> None:
        for _ in range(2):
            self.buyer.buy(replay, "p3.2xlarge", mix_for(replay), now)

    def tick(self, replay: Replay, now: float) -> None:
        return None

    def capacity_error(self, replay: Replay, node: SimNode, now: float) -> None:
        self.buyer.refused(replay, node, now)


def _run(tmp_path: Path, a: list[int], b: list[int], fallback: str = "on-demand") -> Replay:
    replay = _replay_for([], strategy=BuyTwo(), pool=_pool(fallback), spot=_spot(tmp_path, a, b), end=600)
    replay.run()
    return replay


def _nodes(replay: Replay) -> list[tuple[str, str | None, float, str]]:
    return sorted((n.market.value, n.zone, n.created_at, n.state.value) for n in replay.cluster.nodes.values())


def test_spot_is_spread_over_the_zones(tmp_path: Path) -> None:
    assert _nodes(_run(tmp_path, [0], [0])) == [("spot", "us-east-1a", 0.0, "READY"),
                                                ("spot", "us-east-1b", 0.0, "READY")]


def test_a_refused_zone_is_skipped_by_the_next_launches(tmp_path: Path) -> None:
    replay = _run(tmp_path, [1], [0])
    a = EXACT.launch_attempt
    # The first launch goes to 1a, the second to 1b; the refused one retries in 1b, not 1a.
    assert _nodes(replay) == [("spot", "us-east-1a", 0.0, "PROVISION_FAILED"),
                              ("spot", "us-east-1b", 0.0, "READY"), ("spot", "us-east-1b", a, "READY")]
    buyer = replay.strategy.buyer  # type: ignore[attr-defined]
    assert buyer.dry_until["us-east-1a"] == a + ICE_TTL


def test_every_zone_refused_falls_back_to_on_demand_at_once(tmp_path: Path) -> None:
    replay = _run(tmp_path, [1], [1])
    a = EXACT.launch_attempt
    markets = [(m, t) for m, _, t, s in _nodes(replay) if s == "READY"]
    # 1a's refusal retries in 1b (refused too), then on-demand; 1b's refusal: both cached.
    assert sorted(markets) == [("on-demand", a), ("on-demand", 2 * a)]
    node = replay.strategy.buyer.buy(replay, "p3.2xlarge", mix_for(replay), 3 * a)  # type: ignore[attr-defined]
    assert node is not None and node.market is Market.ON_DEMAND  # no attempt while cached


def test_without_fallback_it_backs_off(tmp_path: Path) -> None:
    replay = _run(tmp_path, [1], [1], fallback="none")
    assert all(n.market is Market.SPOT for n in replay.cluster.nodes.values())
    assert replay.strategy.buyer.blocked_until > 0  # type: ignore[attr-defined]
