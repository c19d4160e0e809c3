"""GPU floors as floors in nodes; the higher floor wins.

* the forecast floor (GPUs, from the Snapshot): the pool holds that many GPUs;
* the headroom floor (``scale_up.headroom_gpus``): the pool keeps that many whole GPUs
  free for the next jobs, beyond what its pending jobs take.

Nodes with work count first (idle scale-down does not take them), then idle nodes,
smallest first (so idle scale-down may not drop the pool below the floor whichever idle
nodes it picks); the GPUs still missing are bought as the pool's smallest type (what a
floor launches).
"""

from __future__ import annotations

import math

from autoscaler.engine.binpack import Bin
from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.plan import MOVES
from autoscaler.model.snapshot import ForecastFloor


def raise_floor(ctx: PoolContext, forecast: ForecastFloor | None, prices: Prices) -> None:
    if forecast is None or forecast.gpus <= 0:
        return
    busy = _busy(ctx)
    _raise(ctx, prices, forecast.gpus, sum(prices.node_gpus(n) for n in busy), len(busy), forecast.reason)


def raise_headroom(ctx: PoolContext, prices: Prices) -> None:
    """Free GPUs: whole free GPUs of busy serving nodes (as the scheduler reports them;
    none without a report) and in-flight nodes' GPUs (not a make-before-break replacement's,
    promised to the jobs it moves), less what the pending jobs ask for."""
    want = ctx.pool.scale_up.headroom_gpus
    label = f"scale_up.headroom_gpus {want}"
    rule = ctx.pool.capacity.spot_scarcity
    if rule is not None and rule.headroom_gpus > want and ctx.spot_scarce is not None:
        want = rule.headroom_gpus
        label = f"capacity.spot_scarcity.headroom_gpus {want} ({ctx.spot_scarce})"
    if want <= 0:
        return
    busy = _busy(ctx)
    pending = math.ceil(sum(s.gpus * s.count for s in ctx.demand_shapes()) - 1e-9)
    on_prem = ""
    if ctx.pool.cluster.on_prem is not None and ctx.obs.on_prem:
        # What on-prem's free whole GPUs take needs no cloud room (a rough count: the
        # packing itself is scale_up's).
        there = min(pending, sum(Bin.with_allocated(n.gpus, n.allocated).whole_free()
                                 for n in ctx.obs.on_prem))
        pending -= there
        on_prem = f" ({there} more go on-prem)" if there else ""
    free = sum(_whole_free(ctx, n, prices) for n in busy) - pending
    _raise(ctx, prices, want, free, len(busy),
           f"{label}: {max(free, 0)} free GPU(s) ready or coming after "
           f"{pending} pending{on_prem}")


def _busy(ctx: PoolContext) -> list[Node]:
    """Serving and in-flight nodes that idle scale-down does not take."""
    idle = {n.name for n in ctx.idle}
    return [n for n in ctx.active if n.name not in idle]


def _whole_free(ctx: PoolContext, node: Node, prices: Prices) -> int:
    if node.state is not NodeState.READY:
        return 0 if node.launched_for in MOVES else prices.node_gpus(node)
    sched = ctx.observation(node).scheduler
    if sched is None or not sched.places_jobs:
        return 0
    return Bin.observed(sched.gpus_total, sched.gpus_allocated, sched.gpus_free,
                        most=prices.node_gpus(node)).whole_free()


def _raise(ctx: PoolContext, prices: Prices, want: float, held: float, nodes: int, why: str) -> None:
    for gpus in sorted(prices.node_gpus(n) for n in ctx.idle):
        if held >= want:
            break
        held, nodes = held + gpus, nodes + 1
    if held < want:
        cloud = ctx.pool.cloud.value
        sizes = [t.gpus for t in (prices.itype(cloud, name) for name in ctx.pool.instance_types)
                 if t is not None and t.gpus > 0]
        nodes += math.ceil((want - held) / min(sizes, default=1) - 1e-9)
    nodes = min(nodes, ctx.pool.max_nodes)
    if nodes > ctx.floor:
        ctx.floor, ctx.floor_why = nodes, f"{why}: {nodes} node(s)"
