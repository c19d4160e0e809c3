"""What a node can report, by the catalog: every number a scheduler or Prometheus gives of
a node, and the size of every pending job, is checked here before it reaches the snapshot
(``signals/reader.py``), and a recorded snapshot file is refused for the same numbers
(``engine/snapshot_file.py``).

A source that reports the impossible (``nvidia.com/gpu: "1e9"``, ``gpu:nan`` gres, a
utilization of 500%) is not believed for that node: its scheduler view or its metrics are
replaced by a reason (``NodeObservation.scheduler_missing`` / ``metrics_missing``), so
the engine neither places jobs on GPUs that do not exist nor scales the node down, and no
other node or pool sees a difference. A pending job no pool node could ever hold is
unserved, never bought for. Engine cost then depends on counts of nodes, jobs and shapes
only, never on a value a source reported.

==================================  ===============================================
what                                possible
==================================  ===============================================
GPUs, allocated GPUs, a job's GPUs  0 .. the GPUs of the node's instance type (in GPUs:
                                    MIG slices and shared replicas are counted as
                                    the share of a GPU they are)
GPU utilization (mean, max)         0 .. 100 (%: DCGM_FI_DEV_GPU_UTIL, or
                                    GR_ENGINE_ACTIVE x 100)
GPUs reporting metrics              0 .. GPUs x 7 (a MIG GPU reports per instance)
XID errors                          0 or more
memory, power, sample age           a number, 0 or more
GPU temperature                     -50 .. 200 °C
a pending job's GPUs per node       a number (more than any type has: the engine says
                                    no type fits)
a pending job's nodes               1 .. the pool's max_nodes
a time a scheduler gives (a node's  now - MAX_AGE .. now + SKEW, with a zone (a time
unusable_since, a job's started_at  without one is UTC, as the Kubernetes API always
and submitted_at)                   means): see ``Times``
==================================  ===============================================

The node's instance type: its fleet record's; for a host the fleet does not know, the
largest type of the pool its name is attributed to, else the catalog's largest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from autoscaler.catalog import Catalog, CatalogError
from autoscaler.catalog.mig import COMPUTE_SLICES
from autoscaler.model.node import Node
from autoscaler.model.snapshot import (
    GpuMetrics,
    NodeObservation,
    PendingJob,
    PendingShape,
    RunningJob,
    SchedulerNode,
)
from autoscaler.policy.models import Pool

# MIG and replica shares add up in floating point, above a whole count; never below zero: a
# sum of shares is negative only when a share is, and the engine reads a negative
# allocation as a full node.
EPS = 1e-6
UTIL_MAX = 100.0
TEMPERATURE_C = (-50.0, 200.0)


@dataclass(frozen=True)
class Bound:
    gpus: int
    why: str  # "p3.2xlarge has 1 GPU(s)"


def _within(value: float, low: float, high: float) -> bool:
    return low <= value <= high + EPS  # False for NaN


def _says(field: str, value: float) -> str:
    return f"{field}={value:g}" + (" (not a number)" if math.isnan(value) else "")


class NodeBounds:
    """The most GPUs each node can have, by its instance type in the catalog."""

    def __init__(self, catalog: Catalog, fleet: Mapping[str, Node], pools: Mapping[str, Pool],
                 pool_of: Callable[[str], str | None]):
        self._catalog, self._fleet, self._pools, self._pool_of = catalog, fleet, pools, pool_of
        biggest = max(catalog.types(), key=lambda t: t.gpus, default=None)
        self._anything = Bound(biggest.gpus if biggest else 0,
                               f"the largest type in the catalog ({biggest.name if biggest else '-'}) "
                               f"has {biggest.gpus if biggest else 0} GPU(s)")
        self._by_pool: dict[str, Bound] = {}

    def of(self, name: str) -> Bound:
        node = self._fleet.get(name)
        if node is not None:
            try:
                itype = self._catalog.get(node.cloud, node.instance_type)
            except CatalogError:
                return self._pool_bound(node.pool_key)
            return Bound(itype.gpus, f"{itype.name} has {itype.gpus} GPU(s)")
        key = self._pool_of(name)
        return self._pool_bound(key) if key is not None else self._anything

    def _pool_bound(self, key: str) -> Bound:
        if key in self._by_pool:
            return self._by_pool[key]
        pool = self._pools.get(key)
        found = []
        for name in pool.instance_types if pool is not None else []:
            try:
                found.append(self._catalog.get(pool.cloud.value, name))  # type: ignore[union-attr]
            except CatalogError:
                continue
        if not found:
            bound = self._anything
        else:
            top = max(found, key=lambda t: t.gpus)
            bound = Bound(top.gpus, f"the largest type of {key} ({top.name}) has {top.gpus} GPU(s)")
        self._by_pool[key] = bound
        return bound


def scheduler_problem(sched: SchedulerNode, bound: Bound) -> str | None:
    """Why the scheduler's view of a node is impossible, or None."""
    counts = [("GPUs", sched.gpus_total), ("allocated GPUs", sched.gpus_allocated)]
    counts += [(f"GPUs of job {job.id[:80]}", job.gpus) for job in sched.jobs]
    for field, value in counts:
        if not _within(value, 0, bound.gpus):
            return f"the scheduler reports {_says(field, value)}; {bound.why}"
    if sched.gpus_free is not None and len(sched.gpus_free) > bound.gpus:
        return f"the scheduler reports {len(sched.gpus_free)} GPUs by device; {bound.why}"
    return None


def metrics_problem(m: GpuMetrics, bound: Bound) -> str | None:
    """Why a node's GPU metrics are impossible, or None."""
    ranges: list[tuple[str, float | None, float, float]] = [
        ("util_mean", m.util_mean, 0, UTIL_MAX),
        ("util_max", m.util_max, 0, UTIL_MAX),
        ("util_max_idle_window", m.util_max_idle_window, 0, UTIL_MAX),
        ("temperature_max_c", m.temperature_max_c, *TEMPERATURE_C),
        ("mem_used_mib", m.mem_used_mib, 0, math.inf),
        ("mem_free_mib", m.mem_free_mib, 0, math.inf),
        ("power_w", m.power_w, 0, math.inf),
        ("sample_age_s", m.sample_age_s, 0, math.inf),
        ("xid_errors", m.xid_errors, 0, math.inf),
        ("ecc_dbe_errors", m.ecc_dbe_errors, 0, math.inf),
        ("row_remap_failures", m.row_remap_failures, 0, math.inf),
        ("retired_pages_pending", m.retired_pages_pending, 0, math.inf),
    ]
    for field, value, low, high in ranges:
        if value is not None and not (_within(value, low, high) and math.isfinite(value)):
            unit = f"outside {low:g}..{high:g}" if high < math.inf else f"not a number >= {low:g}"
            return f"the metrics report {_says(field, value)}: {unit}"
    most = bound.gpus * COMPUTE_SLICES
    if not 0 <= m.gpus_reporting <= most:
        return (f"the metrics report {m.gpus_reporting} GPUs reporting; {bound.why} "
                f"(at most {COMPUTE_SLICES} MIG instances each)")
    return None


def checked(obs: NodeObservation, bound: Bound) -> tuple[NodeObservation, list[str]]:
    """``obs`` with what is impossible in it replaced by the reason, and the reasons."""
    sched_why = scheduler_problem(obs.scheduler, bound) if obs.scheduler is not None else None
    metrics_why = metrics_problem(obs.metrics, bound) if obs.metrics is not None else None
    if sched_why is None and metrics_why is None:
        return obs, []
    return NodeObservation(
        metrics=None if metrics_why else obs.metrics,
        metrics_missing=metrics_why or obs.metrics_missing,
        metrics_silent=obs.metrics_silent and metrics_why is None,
        scheduler=None if sched_why else obs.scheduler,
        scheduler_missing=sched_why or obs.scheduler_missing,
        health_check_failed=obs.health_check_failed,
    ), [w for w in (sched_why, metrics_why) if w]


def pending_problem(job: PendingJob, pool: Pool) -> str | None:
    """Why no node of ``pool`` could ever hold ``job``, for sizes the engine would work
    through one by one, or None."""
    if not math.isfinite(job.gpus):
        return f"asks {job.gpus:g} GPUs per node: not a number of GPUs"
    if job.nodes > pool.max_nodes:
        return f"asks {job.nodes} nodes; the pool has at most {pool.max_nodes} (max_nodes)"
    return None


def split_pending(jobs: Iterable[PendingJob], pool: Pool) -> tuple[list[PendingJob],
                                                                   list[tuple[PendingJob, str]]]:
    """(jobs the pool could hold, (job, why not) for the others)."""
    ok: list[PendingJob] = []
    refused: list[tuple[PendingJob, str]] = []
    for job in jobs:
        why = pending_problem(job, pool)
        if why is None:
            ok.append(job)
        else:
            refused.append((job, why))
    return ok, refused


# A scheduler's clock may run this far ahead of ours; a time later than that is no time.
SKEW = timedelta(minutes=5)
# No node stays unusable, no job runs or waits, this long and still matters: an older time
# is a placeholder (0 = 1970) or a bug, not an age.
MAX_AGE = timedelta(days=365)
UNUSABLE_CHARS = 300  # SchedulerNode.unusable's max_length


class Times:
    """The times schedulers give, made plausible at the snapshot's ``now``: a time is
    believed within [now - MAX_AGE, now + SKEW] (a naive one read as UTC); outside, it is
    unknown, and unknown is read the way that removes nothing and rushes nothing:

    ================  ===========================================================
    field             not believed
    ================  ===========================================================
    started_at        None: the job's age is unknown, so it is never past
                      max_job_runtime, never consolidated (the engine's meanings)
    unusable_since    (also when not given: a Slurm DOWN without a reason, an
                      ``idle*``, a NotReady without lastTransitionTime) the first
                      tick this reader saw the node unusable so: the grace counts
                      from then, a lower bound of how long it has been unusable,
                      not from a 1970 that replaces at once nor a 9999 (or none)
                      that never does; ``unusable`` then says so, for the
                      engine's reason
    submitted_at      (also when not given) the first tick this reader saw the job
                      pending: it waits burst_after / max_wait from then, so it
                      never bursts sooner than it really waited, and never hangs
    ================  ===========================================================

    Those first ticks live in the reader (``since_seen`` / ``pending_seen``, handed to the
    next tick's ``Times``, forgotten once not needed): a restart counts again, later, never
    sooner. A snapshot file is one tick with nothing remembered: its ``taken_at``
    (``engine/snapshot_file.py``). Only a time not believed is logged (``why``): a time not
    given is ordinary scheduler output. (The engine, with no clock of its own, adds what
    needs the fleet: a job start or an unusable-since before its node was created is not
    about this machine; see ``engine/survey.py`` and ``engine/scale_down/broken.py``.)
    ``ends_at`` only gets a zone: a far deadline is a real one, and a past one only keeps a
    node (the return to spot waits for the job). One ``Times`` per tick; the checks are
    comparisons, allocating only for what they change."""

    def __init__(self, now: datetime, since_seen: Mapping[str, datetime],
                 pending_seen: Mapping[str, datetime]):
        self.now = now
        self.earliest, self.latest = now - MAX_AGE, now + SKEW
        self._since_seen, self._pending_seen = since_seen, pending_seen
        self.since_seen: dict[str, datetime] = {}  # node -> first tick seen so (next tick's)
        self.pending_seen: dict[str, datetime] = {}  # job id -> first tick seen so
        self.pending_refused = 0  # jobs whose submit time was not given or not believed

    def believe(self, at: datetime | None) -> datetime | None:
        """``at`` if plausible (naive: UTC), else None."""
        if at is None:
            return None
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        return at if self.earliest <= at <= self.latest else None

    def _fine(self, at: datetime) -> bool:
        return at.tzinfo is not None and self.earliest <= at <= self.latest

    def scheduler(self, name: str, sched: SchedulerNode) -> tuple[SchedulerNode, tuple[str, ...]]:
        """``sched`` with its times made plausible, and what was not believed."""
        since, said = sched.unusable_since, sched.unusable
        if (said is None or (since is not None and self._fine(since))) and all(
                (j.started_at is None or self._fine(j.started_at))
                and (j.ends_at is None or j.ends_at.tzinfo is not None) for j in sched.jobs):
            return sched, ()  # nearly every node, every tick: nothing allocated
        why: list[str] = []
        new_since = since
        if said is not None and (since is None or not self._fine(since)):
            new_since = self.believe(since)
            if new_since is None:
                self.since_seen[name] = new_since = self._since_seen.get(name, self.now)
                first = new_since.isoformat()
                if since is None:
                    note = f" (no time given; first seen so at {first})"
                else:
                    note = f" (its time {since.isoformat()} not believed; first seen so at {first})"
                    why.append(f"unusable_since {since.isoformat()} (counted from {first})")
                # What the engine's reason quotes: how the time is known.
                said = said[:UNUSABLE_CHARS - len(note)] + note
        jobs = sched.jobs
        new_jobs: list[RunningJob] | None = None
        for i, job in enumerate(jobs):
            started, ends = job.started_at, job.ends_at
            if (started is None or self._fine(started)) and (ends is None or ends.tzinfo is not None):
                continue
            kept = self.believe(started)
            if kept is None and started is not None:
                why.append(f"started_at {started.isoformat()} of job {job.id[:80]} (unknown)")
            if new_jobs is None:
                new_jobs = list(jobs)
            new_jobs[i] = replace(job, started_at=kept, ends_at=(
                ends.replace(tzinfo=UTC) if ends is not None and ends.tzinfo is None else ends))
        if new_since is since and new_jobs is None:
            return sched, tuple(why)
        return replace(sched, unusable=said, unusable_since=new_since,
                       jobs=jobs if new_jobs is None else new_jobs), tuple(why)

    def pending(self, job: PendingJob) -> PendingJob:
        """``job`` with a plausible submit time (see the class)."""
        at = job.submitted_at
        if at is not None and self._fine(at):
            return job
        return job.model_copy(update={"submitted_at": self._submitted(job.id, at)})

    def shape(self, shape: PendingShape) -> PendingShape:
        """``shape`` with a plausible submit time for each of its jobs."""
        if all(at is not None and self._fine(at) for at in shape.submitted_at):
            return shape
        return shape.model_copy(update={"submitted_at": [
            at if at is not None and self._fine(at) else self._submitted(job_id, at)
            for job_id, at in zip(shape.ids, shape.submitted_at, strict=True)]})

    def _submitted(self, job_id: str, at: datetime | None) -> datetime:
        kept = self.believe(at)
        if kept is None:
            self.pending_refused += 1
            self.pending_seen[job_id] = kept = self._pending_seen.get(job_id, self.now)
        return kept


__all__ = ["MAX_AGE", "SKEW", "Bound", "NodeBounds", "Times", "checked", "metrics_problem", "pending_problem",
           "scheduler_problem", "split_pending"]
