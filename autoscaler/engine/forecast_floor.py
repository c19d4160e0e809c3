"""A forecast floor (GPUs, from the Snapshot) as a floor in nodes; the higher floor wins.

Nodes with work count first (idle scale-down does not take them), then idle nodes,
smallest first (so idle scale-down may not drop the pool below the forecast whichever
idle nodes it picks); the GPUs still missing are bought as the pool's smallest type
(what a floor launches).
"""

from __future__ import annotations

import math

from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices
from autoscaler.model.snapshot import ForecastFloor


def raise_floor(ctx: PoolContext, forecast: ForecastFloor | None, prices: Prices) -> None:
    if forecast is None or forecast.gpus <= 0:
        return
    idle = {n.name for n in ctx.idle}
    busy = [n for n in ctx.active if n.name not in idle]
    held, nodes = sum(prices.node_gpus(n) for n in busy), len(busy)
    for gpus in sorted(prices.node_gpus(n) for n in ctx.active if n.name in idle):
        if held >= forecast.gpus:
            break
        held, nodes = held + gpus, nodes + 1
    if held < forecast.gpus:
        cloud = ctx.pool.cloud.value
        sizes = [t.gpus for t in (prices.itype(cloud, name) for name in ctx.pool.instance_types)
                 if t is not None and t.gpus > 0]
        nodes += math.ceil((forecast.gpus - held) / min(sizes, default=1) - 1e-9)
    nodes = min(nodes, ctx.pool.max_nodes)
    if nodes > ctx.floor:
        ctx.floor, ctx.floor_why = nodes, f"{forecast.reason}: {nodes} node(s)"
