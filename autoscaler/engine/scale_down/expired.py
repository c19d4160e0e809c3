"""Expiry: nodes older than ``max_node_age`` are replaced, oldest first, within budget."""

from __future__ import annotations

from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices
from autoscaler.engine.scale_down.budget import Budget
from autoscaler.model.plan import Replace
from autoscaler.policy.duration import format_duration


def candidates(ctx: PoolContext, prices: Prices, now: datetime, budget: Budget) -> list[Replace]:
    limit = ctx.pool.lifetime.max_node_age
    if limit is None:
        return []
    actions: list[Replace] = []
    max_age = format_duration(limit)
    # The survey found the serving nodes born before now - limit.
    for node in sorted(ctx.expired, key=lambda n: (n.created_at, n.name)):
        age = now - node.created_at
        if not budget.can_swap(node):
            continue
        budget.swap(node)
        actions.append(Replace(
            pool=ctx.key, node=node.name, instance_type=node.instance_type, market=node.market,
            zone=node.zone, trigger="expired",
            reason=(f"{ctx.key}: {node.name} is {format_duration(age)} old, past max_node_age "
                    f"{max_age}; draining and replacing it"),
        ))
    return actions
