"""Jobs past their pool's ``lifetime.max_job_runtime`` (found by ``survey``): what each
report asks of the executor.

========================  ==================  =============================================
``lifetime.action``       the team's priority  the report
========================  ==================  =============================================
report                    any                  reported; signalled if ``signal_long_jobs``
release                   not exempt           checkpoint signal, then after the pool's
                                               ``checkpoint_grace`` requeued (Slurm) or
                                               evicted (Kubernetes): its GPUs are freed
release                   exempt (settings)    as report, and the reason says why
========================  ==================  =============================================

Releases have a budget: per pool and tick, at most ``max_draining_percent`` of the pool's
nodes (at least 1) of its jobs past the limit are released, the longest running first; the
others are reported without release, the reason saying so. A released job runs on through
its checkpoint grace, stays the oldest, and so is chosen again until it is gone: the limit
bounds the releases under way, not only those started per tick.
"""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.scale_down.budget import pool_nodes, share
from autoscaler.model.plan import ReportJob
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Priority


def reports(ctx: PoolContext, now: datetime, exempt: Set[Priority]) -> list[ReportJob]:
    lifetime = ctx.pool.lifetime
    limit = lifetime.max_job_runtime
    if limit is None:
        return []
    release = lifetime.action == "release" and ctx.policy.priority not in exempt
    sd = ctx.pool.scale_down
    if release:
        then = (f": checkpoint signal {sd.checkpoint_signal}, requeue after "
                f"{format_duration(sd.checkpoint_grace)} grace")
    elif lifetime.action == "release":
        then = f": {ctx.policy.priority.value} priority is exempt from release, reported only"
    else:
        then = ""
    # None: every job past the limit is released (within the budget, as most ticks).
    released = _released(ctx, now) if release else None
    held = _held_why(ctx, len(released)) if released is not None else ""
    out = []
    for node, job in ctx.long_jobs:
        started = job.started_at or now
        freed = release and (released is None or (node.name, job.id) in released)
        out.append(ReportJob(
            pool=ctx.key, node=node.name, job=job.id, signal=lifetime.signal_long_jobs,
            release=freed, started_at=job.started_at,
            reason=(f"{ctx.key}: job {job.id} on {node.name} has run "
                    f"{format_duration(now - started)}, past max_job_runtime "
                    f"{format_duration(limit)}{then if freed or not release else held}")))
    return out


def release_limit(ctx: PoolContext) -> int:
    """Jobs the pool may release per tick: its max_draining_percent of its nodes (as
    scale_down/budget.py counts them), at least 1."""
    return share(pool_nodes(ctx), ctx.pool.scale_down.max_draining_percent)


def _released(ctx: PoolContext, now: datetime) -> set[tuple[str, str]] | None:
    """The (node, job) pairs released this tick (None: all of them): the longest running
    first, within release_limit. A released job keeps running through its checkpoint grace
    and stays the oldest, so the limit also bounds the releases under way."""
    limit = release_limit(ctx)
    if len(ctx.long_jobs) <= limit:
        return None
    oldest = sorted(ctx.long_jobs, key=lambda nj: (nj[1].started_at or now, nj[0].name, nj[1].id))
    return {(node.name, job.id) for node, job in oldest[:limit]}


def _held_why(ctx: PoolContext, released: int) -> str:
    return (f": reported, its release waits: {released} of {len(ctx.long_jobs)} job(s) past "
            f"it released this tick, longest running first (at most max_draining_percent "
            f"{ctx.pool.scale_down.max_draining_percent:g} of the pool's {pool_nodes(ctx)} "
            "node(s), at least 1, per tick)")
