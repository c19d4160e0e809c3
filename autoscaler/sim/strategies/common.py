"""What the baselines share: the pool's capacity mix, zone choice, limits.

Baselines buy capacity the way a cloud auto-scaling group would for the same pool: the
policy's on-demand base and spot share (the engine's own ``MarketMix``); for spot, the
pool's first zone, and when the cloud refuses (learned after one provisioning attempt,
``launch_attempt``, as for ours) the next zone, then the policy's fallback to on-demand.
With no zone left and no fallback the buyer pauses for ``backoff`` (default 5 minutes,
Cluster Autoscaler's ``initial-node-group-backoff-duration``; ca_like passes 0 and keeps
CA's exponential back-off per node group itself). Refused attempts are not billed and are
counted like ours, one per node refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.engine.mix import MarketMix
from autoscaler.model.lifecycle import ACTIVE, NodeState
from autoscaler.policy.models import Market, Pool
from autoscaler.sim.cluster import SimNode
from autoscaler.sim.replay import Replay


@dataclass(frozen=True)
class Limits:
    max_nodes: int
    max_gpus: int | None

    @classmethod
    def of(cls, replay: Replay, quota_gpus: int | None) -> Limits:
        return cls(max_nodes=replay.pool.max_nodes, max_gpus=quota_gpus)

    def room(self, nodes: list[SimNode], gpus_per_node: int) -> int:
        """How many more nodes of ``gpus_per_node`` GPUs the limits allow."""
        left = self.max_nodes - len(nodes)
        if self.max_gpus is not None and gpus_per_node > 0:
            held = sum(n.gpus for n in nodes)
            left = min(left, (self.max_gpus - held) // gpus_per_node)
        return max(0, left)


def active_nodes(replay: Replay) -> list[SimNode]:
    return [n for n in replay.cluster.nodes.values() if n.state in ACTIVE]


def mix_for(replay: Replay) -> MarketMix:
    nodes = active_nodes(replay)
    od = sum(1 for n in nodes if n.market is Market.ON_DEMAND)
    return MarketMix(replay.pool.capacity, od, len(nodes) - od)


class Buyer:
    """Launches for one baseline; walks the pool's zones on refusals, then backs off."""

    def __init__(self, backoff: float = 300.0):
        self.backoff = backoff
        self.blocked_until = float("-inf")

    def buy(self, replay: Replay, type_name: str, mix: MarketMix, now: float) -> SimNode | None:
        """Launch one node following the mix; None while backed off or when spot is too
        dear and there is no fallback."""
        if now < self.blocked_until:
            return None
        pool: Pool = replay.pool
        zone = pool.zones[0] if pool.zones else None
        if mix.peek() is Market.SPOT:
            if _spot_cheap_enough(replay, type_name):
                mix.take(Market.SPOT)
                return replay.launch(type_name, Market.SPOT, zone, now)
            if pool.capacity.spot_fallback != "on-demand":
                return None
        mix.take(Market.ON_DEMAND)
        return replay.launch(type_name, Market.ON_DEMAND, zone, now)

    def refused(self, replay: Replay, node: SimNode, now: float) -> SimNode | None:
        """``node``'s spot launch was refused: the next zone, then on-demand, then back off."""
        zones: list[str | None] = list(replay.pool.zones) or [None]
        nxt = zones.index(node.zone) + 1 if node.zone in zones else len(zones)
        if nxt < len(zones):
            return replay.launch(node.itype.name, Market.SPOT, zones[nxt], now)
        if replay.pool.capacity.spot_fallback == "on-demand":
            return replay.launch(node.itype.name, Market.ON_DEMAND, zones[0], now)
        self.blocked_until = max(self.blocked_until, now + self.backoff)
        return None


def _spot_cheap_enough(replay: Replay, type_name: str) -> bool:
    itype, pool = replay.itype(type_name), replay.pool
    return (itype.spot_usd is not None and itype.on_demand_usd is not None
            and itype.spot_usd <= pool.capacity.max_spot_price_ratio * itype.on_demand_usd)


def reap(replay: Replay, now: float) -> None:
    """Clean up nodes that failed to launch (an ASG replaces them on its own)."""
    for node in list(replay.cluster.nodes.values()):
        if node.state is NodeState.PROVISION_FAILED:
            replay.terminate(node, now, "launch-failed")
