"""Emptiness: a node below the idle threshold with no jobs for ``idle_for`` is drained."""

from __future__ import annotations

import math
from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.plan import Action, Drain, Hold
from autoscaler.engine.pricing import Prices
from autoscaler.engine.scale_down.budget import Budget
from autoscaler.engine.scale_down.order import per_gpu, removal_order
from autoscaler.fleet.node import Node
from autoscaler.policy.duration import format_duration


def idle_nodes(ctx: PoolContext, now: datetime) -> list[tuple[Node, float]]:
    """Idle serving nodes with the max utilization that proves it."""
    sd = ctx.pool.scale_down
    needs_scheduler = ctx.pool.cluster.kind != "none"
    out = []
    for node in ctx.serving:
        if node.ready_at is None or now - node.ready_at < sd.idle_for:
            continue  # the idle window would include its boot
        obs = ctx.observation(node)
        m = obs.metrics
        if m is None or obs.metrics_missing or m.util_max_idle_window is None:
            continue
        if m.util_max_idle_window >= sd.gpu_utilization_below:
            continue
        sched = obs.scheduler
        if needs_scheduler and sched is None:
            continue
        if sched is not None and (sched.jobs or sched.gpus_allocated > 0):
            continue
        out.append((node, m.util_max_idle_window))
    return out


def _removable(ctx: PoolContext) -> int:
    """Nodes the pool can lose without the rest crossing the scale-up threshold.

    Removing an idle node concentrates nothing, but the utilization rule looks at the
    mean over serving nodes: without this bound a drain would trigger a scale-up (or a
    cancel) on the next tick.
    """
    total = sum(m.util_mean for n in ctx.serving
                if ctx.fresh(n) and (m := ctx.observation(n).metrics) and m.util_mean is not None)
    needed = math.ceil(total / ctx.pool.scale_up.gpu_utilization_above - 1e-9)
    return len(ctx.serving) - max(needed, 1 if total > 0 else 0)


def candidates(ctx: PoolContext, prices: Prices, now: datetime, budget: Budget) -> list[Action]:
    sd = ctx.pool.scale_down
    idle = {n: u for n, u in idle_nodes(ctx, now) if n.name not in budget.taken}
    actions: list[Action] = []
    removable = _removable(ctx)
    for node in removal_order(ctx, prices, idle):
        if not budget.can_shrink(node.name) or removable <= 0:
            why = (f"the pool is at its floor ({ctx.floor})" if budget.above_floor <= 0 else
                   f"max_draining_percent {sd.max_draining_percent:g}% allows no more drains now"
                   if budget.concurrent <= 0 else
                   "the remaining nodes would average above the scale-up threshold "
                   f"({ctx.pool.scale_up.gpu_utilization_above:g}%)")
            actions.append(Hold(pool=ctx.key, what="scale-down",
                                reason=f"{ctx.key}: {len(idle) - len(actions)} idle node(s) kept: {why}"))
            break
        removable -= 1
        budget.shrink(node.name)
        actions.append(Drain(
            pool=ctx.key, node=node.name, trigger="idle",
            reason=(f"{ctx.key}: {node.name} idle: max GPU util {idle[node]:.0f}% < "
                    f"{sd.gpu_utilization_below:g}% for {format_duration(sd.idle_for)}, no jobs; "
                    f"{node.instance_type} {node.market.value} at ${per_gpu(prices, node):.3f}/GPU-h "
                    "(most expensive first)"),
        ))
    return actions
