"""One pass over serving nodes that records what each rule needs.

A 10,000-node fleet makes every extra walk over the nodes cost milliseconds, so the
per-node tests of the rules (idle? unhealthy? fresh utilization?) run here once per tick;
the rule modules own the tests themselves and read the findings from the context.
"""

from __future__ import annotations

from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.scale_down import idle, unhealthy


def survey(contexts: list[PoolContext], now: datetime) -> None:
    for ctx in contexts:
        observed = ctx.node_obs
        for node in ctx.serving:
            obs = observed.get(node.name)
            if obs is None:
                continue
            m = obs.metrics
            if m is not None and obs.metrics_missing is None and m.util_mean is not None:
                ctx.util_sum += m.util_mean
                ctx.util_count += 1
            util = idle.idle_util(ctx, node, obs, now)
            if util is not None:
                ctx.idle.append((node, util))
            why = unhealthy.problem(ctx, obs)
            if why is not None:
                ctx.sick.append((node, why))
