"""What the service would observe, built from the simulated cluster: FleetView + Snapshot.

Per node, the GPU metrics are aggregates of the util samples taken at each tick (what
Prometheus ``avg_over_time``/``max_over_time`` over the scrapes would return): util_mean
and util_max over the pool's ``scale_up.window``, util_max_idle_window over
``scale_down.idle_for``. The scheduler view lists the node's jobs and allocated GPUs;
every pending job is a PendingJob with reason "Resources". Models are built with
``model_construct`` (no re-validation) because the simulator fills them from typed data,
and each node's Node model is cached until the node changes; job views are cached while
the job waits or runs and evicted after (caches stay bounded by what is live).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import FleetView, Node, PoolHistory
from autoscaler.model.snapshot import (
    CapacityError,
    GpuMetrics,
    NodeObservation,
    PendingJob,
    PoolObservation,
    RunningJob,
    SchedulerNode,
    Snapshot,
)
from autoscaler.policy.models import Pool
from autoscaler.sim.cluster import SimJob, SimNode

# Trace second 0 is mapped to a Monday 00:00 UTC so weekday schedules line up with
# "day N of the trace" (the traces' own dates are anonymised).
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
S = NodeState
_OBSERVED = (S.READY, S.DRAINING, S.DRAINED, S.INTERRUPTED)


def to_datetime(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


class Observer:
    def __init__(self, team: str, pool: Pool, cloud: str, region: str):
        self.team, self.pool, self.cloud, self.region = team, pool, cloud, region
        self.key = f"{team}/{pool.name}"
        self._nodes: dict[str, tuple[int, Node]] = {}
        self._running: dict[tuple[str, int], RunningJob] = {}
        self._sched: dict[str, tuple[tuple[int, NodeState], SchedulerNode]] = {}
        self._views: tuple[list[SimJob], int, list[PendingJob]] | None = None

    def node(self, sim: SimNode) -> Node:
        cached = self._nodes.get(sim.name)
        if cached is not None and cached[0] == sim.epoch:
            return cached[1]
        node = Node.model_construct(
            name=sim.name, team=self.team, pool=self.pool.name, cloud=self.cloud,
            region=self.region, zone=sim.zone, instance_type=sim.itype.name, market=sim.market,
            state=sim.state, state_since=to_datetime(sim.state_since),
            created_at=to_datetime(sim.created_at),
            ready_at=None if sim.ready_at is None else to_datetime(sim.ready_at),
            instance_id=None, address=None, reason=sim.reason, drain_trigger=sim.drain_trigger,
            replacement_requested=sim.replacement_requested, replaces=sim.replaces,
            launched_for=sim.launched_for, fallback_from_spot=sim.fallback_from_spot,
        )
        self._nodes[sim.name] = (sim.epoch, node)
        return node

    def fleet(self, nodes: list[SimNode], history: PoolHistory) -> FleetView:
        live = {n.name for n in nodes}
        for name in [k for k in self._nodes if k not in live]:
            del self._nodes[name]
            self._sched.pop(name, None)
        return FleetView.model_construct(nodes=[self.node(n) for n in nodes],
                                         history={self.key: history})

    def snapshot(self, nodes: list[SimNode], pending: list[SimJob], errors: list[CapacityError],
                 now: float) -> Snapshot:
        window = self.pool.scale_up.window.total_seconds()
        idle = self.pool.scale_down.idle_for.total_seconds()
        obs = {n.name: self._observe(n, now, window, idle) for n in nodes if n.state in _OBSERVED}
        views = self._pending_views(pending)
        self._evict(nodes)
        return Snapshot.model_construct(
            taken_at=to_datetime(now), nodes=obs,
            pools={self.key: PoolObservation.model_construct(
                pending=views, metrics_missing=None, scheduler_missing=None)},
            capacity_errors=errors, offerings=[],
            interrupted=[n.name for n in nodes if n.state is S.INTERRUPTED], missing=[],
            # Given, not defaulted: pydantic inspects a default factory's signature each time.
            unserved=[], cluster_quotas={}, held={}, forecasts={},
        )

    def _evict(self, nodes: list[SimNode]) -> None:
        """Keep the running-job views bounded by what is live: drop finished and killed
        runs once the cache holds twice what is live (amortised: rarely a full pass).
        Pending views live on the pending jobs themselves (``SimJob.view``)."""
        running = sum(len(n.jobs) for n in nodes)
        if len(self._running) > 2 * running + 64:
            runs = {(j.job.id, j.run_id) for n in nodes for j in n.jobs.values()}
            self._running = {k: v for k, v in self._running.items() if k in runs}

    def _pending_views(self, pending: list[SimJob]) -> list[PendingJob]:
        """The views of ``pending``, in order. The cluster replaces its pending list on any
        change but arrivals, which it appends (``Cluster.pending``): the same list, longer,
        only needs views for its new tail."""
        cached = self._views
        if cached is not None and cached[0] is pending and len(pending) >= cached[1]:
            views = cached[2] + [_pending_job(j) for j in pending[cached[1]:]]
        else:
            views = [j.view or _pending_job(j) for j in pending]  # type: ignore[misc]
        self._views = (pending, len(pending), views)
        return views

    def _running_job(self, job: SimJob) -> RunningJob:
        key = (job.job.id, job.run_id)
        found = self._running.get(key)
        if found is None:
            found = RunningJob.model_construct(id=job.job.id, gpus=job.gpus,
                                               started_at=to_datetime(job.run_start), name="")
            self._running[key] = found
        return found

    def _observe(self, node: SimNode, now: float, window: float, idle: float) -> NodeObservation:
        recent = node.util_since(now - window)
        quiet = node.util_since(now - idle)
        metrics = GpuMetrics(
            util_mean=sum(recent) / len(recent) if recent else None,
            util_max=max(recent) if recent else None,
            util_max_idle_window=max(quiet) if quiet else None,
            gpus_reporting=node.gpus, sample_age_s=0.0)
        return NodeObservation(metrics=metrics, scheduler=self._scheduler(node))

    def _scheduler(self, node: SimNode) -> SchedulerNode:
        key = (node.jobs_version, node.state)
        cached = self._sched.get(node.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        allocated = node.allocated
        state = {S.DRAINING: "draining", S.DRAINED: "drained", S.INTERRUPTED: "draining"}.get(
            node.state, "idle" if allocated <= 0 else "allocated" if allocated >= node.gpus else "mixed")
        sched = SchedulerNode(
            state=state, gpus_total=float(node.gpus), gpus_allocated=allocated,
            jobs=[self._running_job(j) for j in node.jobs.values()], cordoned=node.state is not S.READY)
        self._sched[node.name] = (key, sched)
        return sched


def _pending_job(job: SimJob) -> PendingJob:
    """The job's view for its current wait, kept on the job until it starts or requeues."""
    view = job.view
    if not isinstance(view, PendingJob):
        # Pending since its arrival or its last requeue (a replacement pod's creation
        # time): the wait that capacity.max_wait compares with.
        view = job.view = PendingJob.model_construct(
            id=job.job.id, gpus=job.gpus, nodes=1, reason="Resources",
            submitted_at=to_datetime(job.pending_since), gpu_model=None)
    return view
