"""What the baselines share: the pool's capacity mix, zone choice, limits.

Baselines buy capacity the way a cloud auto-scaling group would for the same pool: the
policy's on-demand base and spot share (the engine's own ``MarketMix``); for spot, the
pool's zones in order, each zone without capacity costing one failed attempt
(``launch_fail_delay``) before the group tries the next one; and the policy's spot
fallback to on-demand at once when no zone has any. Without a fallback the refused
scale-up backs the group off for 5 minutes (Cluster Autoscaler's
``initial-node-group-backoff-duration``; it doubles up to 30 min in CA, not here). Baselines
know which zone has capacity before they launch and never pay for a refused launch: both
generous to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.engine.mix import MarketMix
from autoscaler.fleet.lifecycle import IN_FLIGHT, NodeState
from autoscaler.policy.models import Market, Pool
from autoscaler.sim.cluster import SimNode
from autoscaler.sim.replay import Replay

ACTIVE = IN_FLIGHT | {NodeState.READY}


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
    """Launches for one baseline, remembering the back-off after a refused scale-up."""

    def __init__(self, backoff: float = 300.0):
        self.backoff = backoff
        self.blocked_until = float("-inf")

    def buy(self, replay: Replay, type_name: str, mix: MarketMix, now: float) -> SimNode | None:
        if now < self.blocked_until:
            return None
        node = buy(replay, type_name, mix, now)
        if node is None:
            self.blocked_until = now + self.backoff
            replay.cluster.totals.failed_launches += 1
        return node


def buy(replay: Replay, type_name: str, mix: MarketMix, now: float) -> SimNode | None:
    """Launch one node following the mix; None when spot is gone and fallback is off."""
    pool: Pool = replay.pool
    zones: list[str | None] = list(pool.zones) or [None]
    market = mix.peek()
    if market is Market.SPOT:
        itype = replay.itype(type_name)
        cheap_enough = (itype.spot_usd is not None and itype.on_demand_usd is not None
                        and itype.spot_usd <= pool.capacity.max_spot_price_ratio * itype.on_demand_usd)
        for tried, zone in enumerate(zones):
            if cheap_enough and replay.spot_available(zone, now):
                mix.take(Market.SPOT)
                lost = tried * replay.config.launch_fail_delay
                return replay.launch(type_name, Market.SPOT, zone, now, extra_delay=lost)
        if pool.capacity.spot_fallback != "on-demand":
            return None
    mix.take(Market.ON_DEMAND)
    lost = len(zones) * replay.config.launch_fail_delay if market is Market.SPOT else 0.0
    return replay.launch(type_name, Market.ON_DEMAND, zones[0], now, extra_delay=lost)


def reap(replay: Replay, now: float) -> None:
    """Clean up nodes that failed to launch (an ASG replaces them on its own)."""
    for node in list(replay.cluster.nodes.values()):
        if node.state is NodeState.PROVISION_FAILED:
            replay.terminate(node, now, "launch-failed")
