"""What each rule needs to know about a pool's nodes, recorded in one pass over them.

A 10,000-node fleet makes every extra walk over the nodes cost milliseconds, so the
per-node tests of the rules (idle? unhealthy? expired? free GPUs? long jobs?) run here
once per tick, on each pool right after build_contexts files its nodes; the rule modules
own the tests themselves and read the findings from the context.

Most nodes are busy and healthy, so each rule's test runs only for nodes that pass a
cheap necessary condition of it (a low idle-window maximum, a fault counter above zero):
calling three functions for each of 10,000 nodes would cost more than the tests do.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.scale_down import broken, idle, unhealthy
from autoscaler.model.bounds import SKEW
from autoscaler.model.node import Node
from autoscaler.model.snapshot import NodeObservation


def survey(ctx: PoolContext, now: datetime, gpus_of: Callable[[Node], int]) -> None:
    """Fill the context's findings from its draining and serving nodes (``gpus_of``: the
    GPUs of a node's type)."""
    observed = ctx.node_obs
    pool = ctx.pool
    limit = pool.lifetime.max_job_runtime
    started_before = now - limit if limit is not None else None
    ready_by = now - pool.scale_down.idle_for
    idle_below = pool.scale_down.gpu_utilization_below
    too_hot = pool.health.max_gpu_temperature
    age_limit = pool.lifetime.max_node_age
    born_before = now - age_limit if age_limit is not None else None
    if started_before is not None:
        for node in ctx.draining:
            obs = observed.get(node.name)
            if obs is not None and obs.scheduler is not None:
                ctx.long_jobs += [(node, job) for job in obs.scheduler.jobs
                                  if job.started_at is not None
                                  and node.created_at - SKEW <= job.started_at < started_before]
    # Sums stay in locals until the end: attribute updates on ctx per node cost more.
    util_sum, util_count, idle_load = ctx.util_sum, ctx.util_count, ctx.idle_load
    reporting = fallbacks = 0
    for node in ctx.serving:
        if node.fallback_from_spot:
            fallbacks += 1
        if born_before is not None and node.created_at < born_before:
            ctx.expired.append(node)
        obs = observed.get(node.name)
        if obs is None:
            continue
        sched = obs.scheduler
        if sched is not None:
            if started_before is not None:
                for job in sched.jobs:
                    started = job.started_at
                    # A job cannot have started on the node before it was created: such a
                    # start is unknown, not clamped to created_at (that would make it as
                    # old as its node, older than it provably is), so it is never released
                    # on our own account (long_jobs.py). Within SKEW it can: a scheduler's
                    # times are whole seconds (Slurm, the Kubernetes API) from another
                    # clock, so a job started in its node's first second reads as before it.
                    if started is not None and started < started_before \
                            and started >= node.created_at - SKEW:
                        ctx.long_jobs.append((node, job))
            if sched.gpus_allocated < sched.gpus_total:
                ctx.free.append(node)
            unusable = sched.unusable is not None
            if unusable or sched.ready:
                type_gpus = gpus_of(node)
                if unusable or sched.gpus_total < type_gpus:
                    found = broken.unusable(ctx, node, sched, obs.metrics, type_gpus, now)
                    if found is not None:
                        ctx.sick.append((node, found[0]))
                        ctx.absent[node.name] = found[1]
                        continue
        m = obs.metrics
        if obs.metrics_silent:
            ctx.silent.append((node, *broken.silence(node, m, now)))
        if m is None:
            if obs.health_check_failed:
                _check_health(ctx, node, obs)
            continue
        util_mean = m.util_mean
        if obs.metrics_missing is None:
            reporting += 1
            if util_mean is not None:
                util_sum += util_mean
                util_count += 1
        window = m.util_max_idle_window
        if window is not None and window < idle_below:
            util = idle.idle_util(ctx, node, obs, ready_by)
            if util is not None:
                ctx.idle.append(node)
                ctx.idle_max[node.name] = util
                if util_mean is not None:
                    idle_load += util_mean
        if (obs.health_check_failed or m.xid_errors > 0 or m.thermal_throttle
                or m.ecc_dbe_errors > 0 or m.row_remap_failures > 0 or m.retired_pages_pending > 0
                or (m.temperature_max_c is not None and m.temperature_max_c > too_hot)):
            _check_health(ctx, node, obs)
    ctx.util_sum, ctx.util_count, ctx.idle_load = util_sum, util_count, idle_load
    ctx.reporting, ctx.fallbacks = reporting, fallbacks


def _check_health(ctx: PoolContext, node: Node, obs: NodeObservation) -> None:
    why = unhealthy.problem(ctx, obs)
    if why is not None:
        ctx.sick.append((node, why))
