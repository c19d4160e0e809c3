"""READY nodes that broke without a fault counter saying so: the scheduler calls them
unusable, or they went silent. Both are absence-shaped evidence, so each waits out a
per-cause grace counted from a time the observers give (never a clock of our own), and
all broken nodes together stay under a fleet-wide budget (Cluster Autoscaler's
max-total-unready-percentage / ok-total-unready-count): when many look broken at once, the
observer is the likelier fault, and replacing stops. Within that, each pool replaces the
nodes found here (``ctx.absent``: how long each has looked broken) only within its own
scale-down budget, longest first (unhealthy.py): a whole pool missing from its scheduler's
listing is 10 nodes of 30 (under the fleet-wide 45%), not 10 replacements in one tick.

* the scheduler says unusable (Slurm DOWN, NOT_RESPONDING, a drain not ours; Kubernetes
  NotReady): since its reason time / Ready's lastTransitionTime, or, not given or not
  believed, since the signal reader first saw it so (``unusable`` then says so), for
  health.unready_grace;
* fewer GPUs advertised than the type has, DCGM agreeing: since READY, unready_grace;
* no GPU metrics while >= silent_min_reporting other nodes report: since the newest
  sample (else since READY), for health.silent_grace.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from autoscaler.engine.context import PoolContext
from autoscaler.engine.settings import EngineSettings
from autoscaler.model.node import Node
from autoscaler.model.snapshot import GpuMetrics, SchedulerNode, Snapshot
from autoscaler.policy.duration import format_duration


def unusable(ctx: PoolContext, node: Node, sched: SchedulerNode, metrics: GpuMetrics | None,
             type_gpus: int, now: datetime) -> tuple[str, timedelta] | None:
    """Why the scheduler has called this READY node unusable for longer than the grace,
    and for how long (what unhealthy.py orders the pool's budget by, longest first)."""
    health = ctx.pool.health
    if not health.replace_when_unusable:
        return None
    grace = health.unready_grace
    if sched.unusable is not None:
        # The reason says how the time is known: the scheduler's, the reader's first tick
        # seen so (in ``unusable``'s words, ``model/bounds.Times``), or READY's.
        since, how = sched.unusable_since, ""
        if since is not None and since < node.created_at:
            # Said of the node's name before this machine existed (a DOWN its scheduler
            # kept from an earlier machine of that name): how long *this* one has been
            # unusable is not said. Counted from READY, the latest time it could have
            # begun for the grace to matter: never sooner than the scheduler's words (as
            # clamping to created_at would, at once for a boot longer than the grace), and
            # not never (as unknown would, for a node that stays DOWN).
            since, how = node.state_since, " since READY (its time predates this machine)"
        if since is None or now - since <= grace:
            return None  # not said since when (the reader says; a file may not), or not yet
        return (f"the scheduler says {sched.unusable} for {format_duration(now - since)}{how} "
                f"> unready_grace {format_duration(grace)}"), now - since
    if not sched.ready or not sched.gpus_total < type_gpus or metrics is None:
        return None
    # The device plugin restarting advertises 0 for a moment: only when DCGM, reporting
    # some GPUs, sees fewer too do two observers agree that a GPU is gone (none at all is
    # the silent case; 0 is also what a source that does not count GPUs leaves).
    seen = metrics.gpus_reporting
    ready_for = now - node.state_since
    if not 0 < seen < type_gpus or ready_for <= grace:
        return None
    return (f"the scheduler advertises {sched.gpus_total:g} of its type's {type_gpus} GPUs and "
            f"DCGM reports {seen}, READY for {format_duration(ready_for)} > unready_grace "
            f"{format_duration(grace)}"), ready_for


def silence(node: Node, metrics: GpuMetrics | None, now: datetime) -> tuple[timedelta, str]:
    """How long the node has sent no GPU metrics, at least, and how that is known."""
    if metrics is not None and metrics.sample_age_s is not None:
        return timedelta(seconds=metrics.sample_age_s), "newest sample"
    return now - node.state_since, "none since READY"


def review(contexts: list[PoolContext], snapshot: Snapshot, settings: EngineSettings,
           now: datetime) -> str | None:
    """File the silent nodes that are broken, then check the fleet-wide budget: the reason
    no broken node may be replaced this tick, or None."""
    reporting = sum(c.reporting for c in contexts)
    serving = sum(len(c.serving) for c in contexts)
    everyone_blind = "prometheus" in snapshot.missing
    for ctx in contexts:
        health = ctx.pool.health
        if not ctx.silent or not health.replace_when_silent:
            continue
        grace = health.silent_grace
        if everyone_blind or ctx.obs.metrics_missing or reporting < settings.silent_min_reporting:
            # No fleet to compare with: kept, said why (scale-down freezes in context.py).
            past = [node.name for node, age, _ in ctx.silent if age > grace]
            if past:
                names = ", ".join(past[:5]) + (" ..." if len(past) > 5 else "")
                ctx.silent_kept = (
                    f"{len(past)} node(s) without GPU metrics past silent_grace "
                    f"{format_duration(grace)} kept ({names}): {reporting} of {serving} READY "
                    f"nodes report, fewer than silent_min_reporting "
                    f"{settings.silent_min_reporting}, so the observer is the likelier fault")
            continue
        known = {node.name for node, _ in ctx.sick}
        for node, age, how in ctx.silent:
            if age > grace and node.name not in known:
                ctx.absent[node.name] = age
                ctx.sick.append((node, f"no GPU metrics for {format_duration(age)} ({how}) > "
                                       f"silent_grace {format_duration(grace)} while {reporting} "
                                       f"of {serving} READY nodes report"))
    broken = sum(len(c.sick) for c in contexts)
    share = settings.max_unready_percent * serving / 100
    if broken <= settings.ok_unready_count or broken <= share:
        return None
    return (f"{broken} of {serving} READY nodes look broken, more than "
            f"ok_unready_count {settings.ok_unready_count} and more than "
            f"max_unready_percent {settings.max_unready_percent:g}% ({math.floor(share)} nodes): "
            "the observer is the likelier fault, so none is replaced")
