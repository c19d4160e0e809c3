"""Karpenter-like: Cluster-Autoscaler-like scaling with Karpenter's market behaviour.

What differs from :mod:`.ca_like` is only how a node is bought, the part the spot
comparison is about (scale-up sizing and scale-down are CA's, a simplification):

* spot first, spread over the pool's zones: each spot launch goes to the zone with the
  fewest active spot nodes among those not known to be dry (the sim's zones all cost the
  same, so "price-capacity-optimized" reduces to spreading);
* a refused offering is cached as unavailable for 3 minutes (Karpenter's ICE cache), so
  the next launches skip it at once; with every zone cached, on-demand (the pool's
  ``spot_fallback``) at once;
* nothing moves an on-demand node back to spot (aws/karpenter-provider-aws #7832);
* no node groups, so no CA node-group back-off: with every zone cached and no fallback,
  buying pauses 5 minutes.
"""

from __future__ import annotations

from autoscaler.engine.mix import MarketMix
from autoscaler.policy.models import Market
from autoscaler.sim.cluster import SimNode
from autoscaler.sim.replay import Replay
from autoscaler.sim.strategies.ca_like import CaSettings, ClusterAutoscalerLike
from autoscaler.sim.strategies.common import Buyer, _spot_cheap_enough, active_nodes

ICE_TTL = 180.0  # Karpenter's unavailable-offerings cache


class SpreadBuyer(Buyer):
    """Spot spread over the zones not recently refused; on-demand when none is left."""

    def __init__(self, backoff: float):
        super().__init__(backoff)
        self.dry_until: dict[str | None, float] = {}

    def _zones(self, replay: Replay) -> list[str | None]:
        return list(replay.pool.zones) or [None]

    def _launch(self, replay: Replay, type_name: str, now: float) -> SimNode | None:
        zones = self._zones(replay)
        open_ = [z for z in zones if self.dry_until.get(z, float("-inf")) <= now]
        if open_ and _spot_cheap_enough(replay, type_name):
            spot = [n.zone for n in active_nodes(replay) if n.market is Market.SPOT]
            zone = min(open_, key=lambda z: (spot.count(z), zones.index(z)))
            return replay.launch(type_name, Market.SPOT, zone, now)
        if replay.pool.capacity.spot_fallback != "on-demand":
            self.blocked_until = max(self.blocked_until, now + self.backoff)
            return None
        return replay.launch(type_name, Market.ON_DEMAND, zones[0], now)

    def buy(self, replay: Replay, type_name: str, mix: MarketMix, now: float) -> SimNode | None:
        if now < self.blocked_until:
            return None
        if mix.peek() is Market.SPOT:
            node = self._launch(replay, type_name, now)
            if node is not None:
                mix.take(node.market)
            return node
        mix.take(Market.ON_DEMAND)
        return replay.launch(type_name, Market.ON_DEMAND, self._zones(replay)[0], now)

    def refused(self, replay: Replay, node: SimNode, now: float) -> SimNode | None:
        self.dry_until[node.zone] = now + ICE_TTL
        return self._launch(replay, node.itype.name, now)


class KarpenterLike(ClusterAutoscalerLike):
    name = "karpenter_like"
    description = "CA-like scaling; spot spread over zones, ICE cache, on-demand fallback, no return"

    def __init__(self, quota_gpus: int | None = None, settings: CaSettings | None = None):
        super().__init__(quota_gpus, settings)
        self.buyer = SpreadBuyer(self.settings.node_group_backoff)
        self.backoff = None  # no node groups: the ICE cache and the buyer's pause instead

    def parameters(self) -> dict[str, object]:
        return {**super().parameters(), "ice_cache_s": ICE_TTL, "spot_spread": "fewest spot nodes"}
