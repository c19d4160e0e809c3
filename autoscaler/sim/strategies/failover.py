"""SkyPilot-like failover across regions: CA-like scaling, one region at a time.

SkyPilot's provisioner retries a launch the cloud refuses in the next zone of the region,
then in the next region of its list (the optimizer's order, cheapest first; with equal
prices, the order given), and a managed job that failed over stays where it landed. Here:

* regions are tried in a fixed order; every launch goes to the current region, first zone;
* a spot refusal goes to the next zone of that region, and after its last zone to the
  next region, which becomes the current one for good (never back to an earlier region);
* refused in the last region's every zone: the pool's ``spot_fallback`` (on-demand there,
  as for ours), else the buyer pauses like :class:`.common.Buyer`;
* a refusal from a region already left retries in the current region.

Scaling (how many nodes, when to remove them) is :mod:`.ca_like`'s; the region walk is the
only difference, so the comparison with ours is about where capacity is bought.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.engine.mix import MarketMix
from autoscaler.policy.models import Market
from autoscaler.sim.cluster import SimNode
from autoscaler.sim.replay import Replay, SimError
from autoscaler.sim.strategies.ca_like import CaSettings, ClusterAutoscalerLike
from autoscaler.sim.strategies.common import Buyer, _spot_cheap_enough


@dataclass(frozen=True)
class Region:
    pool: str  # "team/pool" of the region's pool
    zones: tuple[str, ...]


class FailoverBuyer(Buyer):
    """Buys in the current region; moves to the next one when a region refuses in every zone."""

    def __init__(self, regions: list[Region], backoff: float = 300.0):
        if not regions:
            raise SimError("failover needs at least one region")
        super().__init__(backoff)
        self.regions = regions
        self.current = 0
        self.moves: list[float] = []  # when the buyer moved to the next region

    def _launch(self, replay: Replay, type_name: str, market: Market, now: float,
                zone_index: int = 0) -> SimNode:
        region = self.regions[self.current]
        zone = region.zones[zone_index] if region.zones else None
        return replay.launch(type_name, market, zone, now, pool=region.pool)

    def buy(self, replay: Replay, type_name: str, mix: MarketMix, now: float) -> SimNode | None:
        if now < self.blocked_until:
            return None
        if mix.peek() is Market.SPOT:
            if _spot_cheap_enough(replay, type_name):
                mix.take(Market.SPOT)
                return self._launch(replay, type_name, Market.SPOT, now)
            if replay.pool.capacity.spot_fallback != "on-demand":
                return None
        mix.take(Market.ON_DEMAND)
        return self._launch(replay, type_name, Market.ON_DEMAND, now)

    def refused(self, replay: Replay, node: SimNode, now: float) -> SimNode | None:
        name = node.itype.name
        at = next((i for i, r in enumerate(self.regions) if r.pool == node.pool), self.current)
        if at < self.current:
            return self._launch(replay, name, Market.SPOT, now)
        zones = self.regions[self.current].zones
        nxt = zones.index(node.zone) + 1 if node.zone in zones else len(zones)
        if nxt < len(zones):
            return self._launch(replay, name, Market.SPOT, now, nxt)
        if self.current + 1 < len(self.regions):
            self.current += 1
            self.moves.append(now)
            return self._launch(replay, name, Market.SPOT, now)
        if replay.pool.capacity.spot_fallback == "on-demand":
            return self._launch(replay, name, Market.ON_DEMAND, now)
        self.blocked_until = max(self.blocked_until, now + self.backoff)
        return None


class SkyPilotFailover(ClusterAutoscalerLike):
    name = "failover"
    description = "CA-like scaling; regions in a fixed order, next region on refusal, never back"

    def __init__(self, regions: list[Region], quota_gpus: int | None = None,
                 settings: CaSettings | None = None):
        super().__init__(quota_gpus, settings)
        self.buyer: FailoverBuyer = FailoverBuyer(regions, 0.0)  # back-off per node group (CA's)

    def parameters(self) -> dict[str, object]:
        return {**super().parameters(), "regions": [r.pool for r in self.buyer.regions],
                "region_moves": len(self.buyer.moves)}
