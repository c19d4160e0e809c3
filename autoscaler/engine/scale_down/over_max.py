"""A pool above ``max_nodes`` (the policy was lowered) sheds nodes, idle ones first."""

from __future__ import annotations

from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices
from autoscaler.engine.scale_down.budget import Budget
from autoscaler.engine.scale_down.idle import idle_nodes
from autoscaler.engine.scale_down.order import removal_order
from autoscaler.model.plan import Action, Drain, Terminate


def candidates(ctx: PoolContext, prices: Prices, now: datetime, budget: Budget) -> list[Action]:
    excess = ctx.size - ctx.pool.max_nodes
    if excess <= 0:
        return []
    idle = {n.name for n in idle_nodes(ctx, now)}
    # In-flight nodes hold no jobs yet: they are the cheapest to give up.
    order = ctx.in_flight[::-1] + sorted(
        removal_order(ctx, prices, ctx.serving), key=lambda n: n.name not in idle
    )
    actions: list[Action] = []
    for node in [n for n in order if n.name not in budget.taken][:excess]:
        if budget.concurrent <= 0:
            break
        budget.shrink(node)
        reason = (f"{ctx.key}: pool has {ctx.size} nodes, above max_nodes "
                  f"{ctx.pool.max_nodes}; removing {node.name}"
                  + (" (idle)" if node.name in idle else ""))
        if node in ctx.in_flight:
            actions.append(Terminate(pool=ctx.key, node=node.name, reason=reason))
        else:
            actions.append(Drain(pool=ctx.key, node=node.name, trigger="over-max", reason=reason))
    return actions
