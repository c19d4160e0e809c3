"""Unhealthy GPUs (XID and memory errors, heat, throttling, failed health check) are
replaced; so are nodes broken.py finds broken (unusable, silent).

Positive evidence of a fault (a fault counter, a failed health check) is acted on even
when other data is missing, and is not held back by the concurrency limit: a node with a
broken GPU is not capacity; only the fleet-wide broken.review applies to it. Absence-shaped
evidence (broken.py) is also held to the pool's max_draining_percent, longest broken first.
"""

from __future__ import annotations

from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices
from autoscaler.engine.scale_down.budget import Budget, draining_said
from autoscaler.model.node import Node
from autoscaler.model.plan import Hold, Replace
from autoscaler.model.snapshot import GpuMetrics, NodeObservation
from autoscaler.policy.duration import format_duration


def problem(ctx: PoolContext, obs: NodeObservation) -> str | None:
    health = ctx.pool.health
    if obs.health_check_failed and health.replace_on_failed_health_check:
        return f"health check failed: {obs.health_check_failed}"
    m = obs.metrics
    if m is None or obs.metrics_missing:
        return None
    if m.xid_errors > 0 and health.replace_on_xid:
        return (f"{m.xid_errors} GPU(s) with an XID error in the last "
                f"{format_duration(ctx.pool.scale_up.window)}")
    if health.replace_on_ecc and (faults := _memory_faults(m)):
        return faults
    if m.temperature_max_c is not None and m.temperature_max_c > health.max_gpu_temperature:
        return f"GPU at {m.temperature_max_c:.0f}°C > {health.max_gpu_temperature:g}°C"
    if m.thermal_throttle and health.replace_on_thermal_throttle:
        return "GPU is thermally throttled"
    return None


def _memory_faults(m: GpuMetrics) -> str | None:
    """DCGM's uncorrectable memory faults: the GPU needs a reset at least, so the node goes."""
    found = [f"{n} {what}" for n, what in (
        (m.ecc_dbe_errors, "uncorrectable (double-bit) ECC error(s)"),
        (m.row_remap_failures, "GPU(s) with a failed row remapping"),
        (m.retired_pages_pending, "GPU(s) with a page retirement pending")) if n > 0]
    return "DCGM reports " + ", ".join(found) if found else None


def candidates(ctx: PoolContext, prices: Prices, now: datetime,
               budget: Budget) -> list[Replace | Hold]:
    """The pool's sick nodes to replace this tick, in the order they were found, and a Hold
    for those the pool's budget keeps.

    Positive fault counters (XID, ECC, heat, throttling, a failed health check) are replaced
    whatever the budget has left; they still spend it. Absence-shaped findings (broken.py:
    unusable, not listed, fewer GPUs, silent) are one missing listing or a dead exporter
    away from being the observer's fault, so they take only what max_draining_percent has
    left after those, the longest broken first (fleet-wide, broken.review caps them all).
    """
    sick = [(node, why) for node, why in ctx.sick if node.name not in budget.taken]
    allowed: set[str] | None = None
    if ctx.absent and any(node.name in ctx.absent for node, _ in sick):
        allowed = _within_budget(ctx, sick, budget)
    actions: list[Replace | Hold] = []
    for node, why in sick:
        if allowed is not None and node.name in ctx.absent and node.name not in allowed:
            continue
        budget.swap(node)
        actions.append(Replace(
            pool=ctx.key, node=node.name, instance_type=node.instance_type, market=node.market,
            zone=node.zone, trigger="unhealthy",
            reason=f"{ctx.key}: {node.name} is unhealthy ({why}); draining and replacing it",
        ))
    if allowed is not None:
        absent = [node for node, _ in sick if node.name in ctx.absent]
        kept = [node for node in absent if node.name not in allowed]
        ctx.broken_waiting = len(kept)
        if kept:
            actions.append(_held(ctx, absent, kept, len(sick) - len(absent), budget))
    return actions


def _within_budget(ctx: PoolContext, sick: list[tuple[Node, str]], budget: Budget) -> set[str]:
    """The absence-shaped sick nodes the pool's budget lets go this tick, longest first."""
    positive = sum(1 for node, _ in sick if node.name not in ctx.absent)
    room = max(0, budget.concurrent - positive)
    absent = sorted((node for node, _ in sick if node.name in ctx.absent),
                    key=lambda n: (-ctx.absent[n.name], n.name))
    return {node.name for node in absent[:room]}


def _held(ctx: PoolContext, absent: list[Node], kept: list[Node], positive: int,
          budget: Budget) -> Hold:
    names = ", ".join(n.name for n in kept[:5]) + (" ..." if len(kept) > 5 else "")
    faults = f", {positive} with fault counters first" if positive else ""
    return Hold(pool=ctx.key, what="scale-down", reason=(
        f"{ctx.key}: {len(absent) - len(kept)} of {len(absent)} broken node(s) replaced this "
        f"tick, {len(kept)} kept ({names}): {draining_said(ctx)}{faults}; absence-shaped "
        "evidence (unusable, not listed, "
        "silent) is replaced within the pool's budget, longest broken first"))
