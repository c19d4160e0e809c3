"""Emptiness: a node with no jobs, below the idle threshold for ``idle_for``, is drained.

The window is of utilization, not of emptiness: a job that ran below the threshold until
a minute ago does not restart the wait (the scheduler's view has no "empty since")."""

from __future__ import annotations

from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices
from autoscaler.engine.scale_down.budget import Budget, draining_said
from autoscaler.engine.scale_down.order import per_gpu, removal_order
from autoscaler.engine.scarcity import keeps
from autoscaler.model.node import Node
from autoscaler.model.plan import Action, Drain, Hold
from autoscaler.model.snapshot import NodeObservation
from autoscaler.policy.duration import format_duration


def idle_util(ctx: PoolContext, node: Node, obs: NodeObservation,
              ready_by: datetime) -> float | None:
    """The max utilization proving ``node`` idle, or None when it is not idle.
    ``ready_by`` is now - idle_for: a node ready later has its boot in the idle window."""
    sd = ctx.pool.scale_down
    if node.ready_at is None or node.ready_at > ready_by:
        return None
    m = obs.metrics
    if m is None or obs.metrics_missing or m.util_max_idle_window is None:
        return None
    if m.util_max_idle_window >= sd.gpu_utilization_below:
        return None
    sched = obs.scheduler
    if sched is None:
        return None if ctx.pool.cluster.kind != "none" else m.util_max_idle_window
    if sched.jobs or sched.gpus_allocated > 0:
        return None
    return m.util_max_idle_window


def idle_nodes(ctx: PoolContext, now: datetime) -> list[Node]:
    """Idle serving nodes (found by the tick's survey); ``ctx.idle_max`` has their max
    utilization over the idle window."""
    return ctx.idle


def _removable(ctx: PoolContext) -> int:
    """Nodes the pool can lose without the rest crossing the scale-up threshold.

    Removing an idle node concentrates nothing, but the utilization rule looks at the
    mean over serving nodes: without this bound a drain would trigger a scale-up (or a
    cancel) on the next tick.
    """
    # An idle node's own utilization (below the idle threshold, no jobs) is noise that
    # moves nowhere when it leaves, so only the busy nodes' load has to fit the rest.
    return len(ctx.serving) - ctx.nodes_for(_busy(ctx))


def _busy(ctx: PoolContext) -> float:
    return max(0.0, ctx.util_sum - ctx.idle_load)


def candidates(ctx: PoolContext, prices: Prices, now: datetime, budget: Budget) -> list[Action]:
    sd = ctx.pool.scale_down
    idle = [n for n in idle_nodes(ctx, now) if n.name not in budget.taken and not keeps(ctx, n)]
    idle_for = format_duration(sd.idle_for)
    actions: list[Action] = []
    removable = _removable(ctx)
    for node in removal_order(ctx, prices, idle):
        if not budget.can_shrink(node) or removable <= 0:
            why = (f"the pool is at its floor ({ctx.floor}) with {ctx.size} node(s)"
                   if budget.above_floor <= 0 else draining_said(ctx, budget)
                   if budget.concurrent <= 0 else
                   f"the busy nodes' load needs {ctx.nodes_for(_busy(ctx))} node(s) to average "
                   f"under the scale-up threshold "
                   f"({ctx.pool.scale_up.gpu_utilization_above:g}%), "
                   f"{len(ctx.serving) - len(actions)} left")
            actions.append(Hold(pool=ctx.key, what="scale-down",
                                reason=f"{ctx.key}: {len(idle) - len(actions)} idle node(s) kept: {why}"))
            break
        removable -= 1
        budget.shrink(node)
        actions.append(Drain(
            pool=ctx.key, node=node.name, trigger="idle",
            reason=(f"{ctx.key}: {node.name} idle: max GPU util {ctx.idle_max[node.name]:.0f}% < "
                    f"{sd.gpu_utilization_below:g}% for {idle_for}, no jobs; "
                    f"{node.instance_type} {node.market.value} at ${per_gpu(prices, node):.3f}/GPU-h "
                    "(most expensive first)"),
        ))
    return actions
