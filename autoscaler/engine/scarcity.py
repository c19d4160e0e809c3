"""A spot outage under way, read from the pool's own refusals (``capacity.spot_scarcity``).

A zone outage often spreads: on the V100 spot trace the benchmarks replay, with three of
the four zones dry within the last 30 minutes the fourth goes dry within the next 30 in
17% of cases, against 7% at any time. An idle node removed then cannot be replaced until
the outage ends, and the jobs that arrive meanwhile wait for it; kept, or with a few spare
GPUs bought while a zone still has spot, they start at once. The evidence is the pool's
own refusals, so it ends by itself ``within`` after the last one (a pool that launches
nothing is refused nothing), and zones the cloud scores low for spot (a Spot placement
score of 3 or less), which end with the score. Only spot nodes are kept: an on-demand node (a fallback pool's)
can be bought back at any time, and keeping it idle through an outage that can last hours
only pays for it (on a market where spot is almost never there, 1.33 x CA-like's bill
instead of 1.01 x; docs/designs/benchmark-misses.md)."""

from __future__ import annotations

from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices, low_spot_score
from autoscaler.model.node import Node
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Market


def scarce(ctx: PoolContext, prices: Prices) -> str | None:
    """The evidence that the pool's spot is scarce now, with its numbers; None if not (or
    the pool does not ask)."""
    rule = ctx.pool.capacity.spot_scarcity
    if rule is None:
        return None
    refused = prices.spot_refused_zones(ctx.pool, rule.within)
    # A zone the cloud scores as unlikely to meet a spot request is evidence too: a pool
    # that avoids such zones (engine/pricing.py) is refused there less, not because spot came back.
    low = {zone: score for zone in ctx.pool.zones if zone not in refused
           and low_spot_score(score := prices.spot_score(ctx.pool, zone))}
    if len(refused) + len(low) < rule.zones:
        return None
    of = f" of {len(ctx.pool.zones)}" if ctx.pool.zones else ""
    where = ", ".join(f"{zone or 'a launch naming no zone'} at {at:%H:%M:%S}"
                      for zone, at in sorted(refused.items(), key=lambda item: item[1], reverse=True))
    scored = ", ".join(f"{zone} {score}/10" for zone, score in sorted(low.items()))
    if not refused:
        return (f"spot placement scored low in {len(low)}{of} zone(s) ({scored}; "
                f"capacity.spot_scarcity from {rule.zones})")
    also = f"; scored low: {scored}" if low else ""
    return (f"spot refused in {len(refused)}{of} zone(s) within {format_duration(rule.within)} "
            f"({where}{also}; capacity.spot_scarcity from {rule.zones})")


def keeps(ctx: PoolContext, node: Node) -> bool:
    """Whether the outage keeps ``node`` from idle scale-down and consolidation: a spot node
    while the pool's spot is scarce and its rule keeps idle nodes."""
    if ctx.spot_scarce is None:
        return False
    rule = ctx.pool.capacity.spot_scarcity
    return rule is not None and rule.keep_idle and node.market is Market.SPOT
