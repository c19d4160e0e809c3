"""Which node goes first: most expensive $/GPU-h first, keeping the on-demand base."""

from __future__ import annotations

from collections.abc import Iterable

from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices
from autoscaler.model.node import Node
from autoscaler.policy.models import Market


def per_gpu(prices: Prices, node: Node) -> float:
    gpus, usd = prices.node_cost(node)
    return usd / (gpus or 1)


def removal_order(ctx: PoolContext, prices: Prices, nodes: Iterable[Node]) -> list[Node]:
    """On-demand nodes inside the base go last: they are what on_demand_base keeps."""
    od_spare = ctx.on_demand_count() - ctx.pool.capacity.on_demand_base
    ranked = sorted(nodes, key=lambda n: (-per_gpu(prices, n), -n.created_at.timestamp(), n.name))
    out, protected = [], []
    for node in ranked:
        if node.market is Market.ON_DEMAND:
            if od_spare <= 0:
                protected.append(node)
                continue
            od_spare -= 1
        out.append(node)
    return out + protected
