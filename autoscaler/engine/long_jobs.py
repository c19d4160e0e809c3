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
"""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime

from autoscaler.engine.context import PoolContext
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
    out = []
    for node, job in ctx.long_jobs:
        started = job.started_at or now
        out.append(ReportJob(
            pool=ctx.key, node=node.name, job=job.id, signal=lifetime.signal_long_jobs,
            release=release, started_at=job.started_at,
            reason=(f"{ctx.key}: job {job.id} on {node.name} has run "
                    f"{format_duration(now - started)}, past max_job_runtime "
                    f"{format_duration(limit)}{then}")))
    return out
