"""Unhealthy GPUs (XID and memory errors, heat, throttling, failed health check) are
replaced; so are nodes broken.py finds broken (unusable, silent).

Positive evidence of a fault is acted on even when other data is missing, and is not
held back by the concurrency limit: a node with a broken GPU is not capacity.
"""

from __future__ import annotations

from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices
from autoscaler.engine.scale_down.budget import Budget
from autoscaler.model.plan import Replace
from autoscaler.model.snapshot import GpuMetrics, NodeObservation


def problem(ctx: PoolContext, obs: NodeObservation) -> str | None:
    health = ctx.pool.health
    if obs.health_check_failed and health.replace_on_failed_health_check:
        return f"health check failed: {obs.health_check_failed}"
    m = obs.metrics
    if m is None or obs.metrics_missing:
        return None
    if m.xid_errors > 0 and health.replace_on_xid:
        return f"{m.xid_errors} XID error(s) in the window"
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


def candidates(ctx: PoolContext, prices: Prices, now: datetime, budget: Budget) -> list[Replace]:
    actions: list[Replace] = []
    for node, why in ctx.sick:
        if node.name in budget.taken:
            continue
        budget.swap(node)
        actions.append(Replace(
            pool=ctx.key, node=node.name, instance_type=node.instance_type, market=node.market,
            zone=node.zone, trigger="unhealthy",
            reason=f"{ctx.key}: {node.name} is unhealthy ({why}); draining and replacing it",
        ))
    return actions
