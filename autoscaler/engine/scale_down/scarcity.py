"""Scale-down held while a spot outage is under way (``scale_down.keep_while_spot_scarce``).

A zone outage often spreads: on the V100 spot trace the benchmarks replay, the pool's last
zones go dry minutes after the first ones. An idle node removed then cannot be replaced until
the outage ends, and the jobs that arrive meanwhile wait for it; kept, it takes them at once.
The evidence is the pool's own spot refusals, so the hold ends by itself ``within`` after
the last one (a pool that launches nothing is refused nothing)."""

from __future__ import annotations

from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices
from autoscaler.policy.duration import format_duration


def held(ctx: PoolContext, prices: Prices) -> str | None:
    """Why the pool's idle scale-down and consolidation wait this tick, or None."""
    rule = ctx.pool.scale_down.keep_while_spot_scarce
    if rule is None:
        return None
    refused = prices.spot_refused_zones(ctx.pool, rule.within)
    if len(refused) < rule.zones:
        return None
    of = f" of {len(ctx.pool.zones)}" if ctx.pool.zones else ""
    where = ", ".join(f"{zone or 'a launch naming no zone'} at {at:%H:%M:%S}"
                      for zone, at in sorted(refused.items(), key=lambda item: item[1], reverse=True))
    return (f"spot refused in {len(refused)}{of} zone(s) within {format_duration(rule.within)} "
            f"({where}; keep_while_spot_scarce from {rule.zones}): a node removed now may not "
            "come back before the outage ends")
