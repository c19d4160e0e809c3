"""One pass over serving nodes that records what each rule needs.

A 10,000-node fleet makes every extra walk over the nodes cost milliseconds, so the
per-node tests of the rules (idle? unhealthy? fresh utilization?) run here once per tick;
the rule modules own the tests themselves and read the findings from the context.
"""

from __future__ import annotations

from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.scale_down import idle, unhealthy
from autoscaler.engine.snapshot import NodeObservation
from autoscaler.fleet.node import Node


def survey(contexts: list[PoolContext], now: datetime) -> None:
    for ctx in contexts:
        observed = ctx.node_obs
        limit = ctx.pool.lifetime.max_job_runtime
        started_before = now - limit if limit is not None else None
        ready_by = now - ctx.pool.scale_down.idle_for
        for node in ctx.draining:
            obs = observed.get(node.name)
            if obs is not None and started_before is not None:
                _long_jobs(ctx, node, obs, started_before)
        for node in ctx.serving:
            obs = observed.get(node.name)
            if obs is None:
                continue
            if started_before is not None:
                _long_jobs(ctx, node, obs, started_before)
            m = obs.metrics
            if m is not None and obs.metrics_missing is None and m.util_mean is not None:
                ctx.util_sum += m.util_mean
                ctx.util_count += 1
            util = idle.idle_util(ctx, node, obs, ready_by)
            if util is not None:
                ctx.idle.append((node, util))
            why = unhealthy.problem(ctx, obs)
            if why is not None:
                ctx.sick.append((node, why))


def _long_jobs(ctx: PoolContext, node: Node, obs: NodeObservation, started_before: datetime) -> None:
    if obs.scheduler is None:
        return
    for job in obs.scheduler.jobs:
        if job.started_at is not None and job.started_at < started_before:
            ctx.long_jobs.append((node, job))
