"""What the service would observe, built from the simulated cluster: FleetView + Snapshot.

Per node, the GPU metrics are aggregates of the util samples taken at each tick (what
Prometheus ``avg_over_time``/``max_over_time`` over the scrapes would return): util_mean
and util_max over the pool's ``scale_up.window``, util_max_idle_window over
``scale_down.idle_for``. The scheduler view lists the node's jobs and allocated GPUs;
pending jobs are reported by shape (``PendingShape``, reason "Resources"), from an index
of the queue kept up to date with the jobs the cluster moved in or out of it, so a tick
costs the shapes and the moves, not the backlog. Records are built without re-validation
(``model_construct``, and ``record.construct`` for the slotted per-node ones) because the
simulator fills them from typed data, and each node's Node is cached until the node
changes; running-job views are evicted once their run ends (caches stay bounded by what is
live).
"""

from __future__ import annotations

from bisect import bisect_left
from datetime import UTC, datetime, timedelta

from autoscaler.model.lifecycle import REPORTING, NodeState
from autoscaler.model.node import FleetView, Node, PoolHistory
from autoscaler.model.progress import NodeProgress
from autoscaler.model.record import construct
from autoscaler.model.snapshot import (
    CapacityError,
    GpuMetrics,
    NodeObservation,
    OnPremNode,
    PendingJob,
    PendingShape,
    PoolObservation,
    RunningJob,
    SchedulerNode,
    Snapshot,
    SpotScore,
)
from autoscaler.policy.models import Pool
from autoscaler.sim.cluster import Cluster, SimJob, SimNode

# Trace second 0 is mapped to a Monday 00:00 UTC so weekday schedules line up with
# "day N of the trace" (the traces' own dates are anonymised).
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
S = NodeState
_NO_PROGRESS = NodeProgress()  # nothing an executor keeps: the simulator has none


def to_datetime(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


class Observer:
    def __init__(self, team: str, pool: Pool, cloud: str, region: str):
        self.team, self.pool, self.cloud, self.region = team, pool, cloud, region
        self.key = f"{team}/{pool.name}"
        self._nodes: dict[str, tuple[int, Node]] = {}
        self._running: dict[tuple[str, int], RunningJob] = {}
        self._sched: dict[str, tuple[tuple[int, NodeState], SchedulerNode]] = {}
        self._cluster: Cluster | None = None
        self._queues: dict[float, _Queue] = {}  # GPUs asked -> its pending jobs
        # Views shared while their values stay the same (the models are frozen): metrics by
        # (util_mean, util_max, util_max_idle_window, GPUs), a node's observation while
        # its metrics and scheduler views are the same objects.
        self._metrics: dict[tuple[float | None, float | None, float | None, int], GpuMetrics] = {}
        self._obs: dict[str, tuple[GpuMetrics, SchedulerNode, NodeObservation]] = {}
        # (latest util, samples in the window, in the idle window, GPUs) -> metrics
        self._settled: dict[tuple[float, int, int, int], GpuMetrics] = {}

    def node(self, sim: SimNode) -> Node:
        cached = self._nodes.get(sim.name)
        if cached is not None and cached[0] == sim.epoch:
            return cached[1]
        node = construct(Node,
            name=sim.name, team=self.team, pool=self.pool.name, cloud=self.cloud,
            region=self.region, zone=sim.zone, instance_type=sim.itype.name, market=sim.market,
            state=sim.state, state_since=to_datetime(sim.state_since),
            created_at=to_datetime(sim.created_at),
            ready_at=None if sim.ready_at is None else to_datetime(sim.ready_at),
            instance_id=None, address=None, reason=sim.reason, drain_trigger=sim.drain_trigger,
            replacement_requested=sim.replacement_requested, replaces=sim.replaces,
            launched_for=sim.launched_for, fallback_from_spot=sim.fallback_from_spot,
            # Given, not defaulted: pydantic's default factory costs most of the
            # construction (some 15 us a node); the record is frozen, so one serves all.
            progress=_NO_PROGRESS,
        )
        self._nodes[sim.name] = (sim.epoch, node)
        return node

    def fleet(self, nodes: list[SimNode], history: PoolHistory) -> FleetView:
        cache, views = self._nodes, []
        for sim in nodes:
            cached = cache.get(sim.name)
            views.append(cached[1] if cached is not None and cached[0] == sim.epoch else self.node(sim))
        view = FleetView.model_construct(nodes=views, history={self.key: history})
        if len(self._nodes) > 2 * len(nodes) + 64:  # names are never reused: drop the gone
            live = {n.name for n in nodes}
            self._nodes = {k: v for k, v in self._nodes.items() if k in live}
            self._sched = {k: v for k, v in self._sched.items() if k in live}
            self._obs = {k: v for k, v in self._obs.items() if k in live}
        return view

    def snapshot(self, nodes: list[SimNode], cluster: Cluster, errors: list[CapacityError],
                 now: float, pending: list[PendingJob] | None = None,
                 scores: list[SpotScore] | None = None) -> Snapshot:
        """``pending``: the jobs to report one by one instead of the queue by shape (a
        placement group lists each job with its options under one pool, none under the
        others); the queue is then not followed. ``scores``: Spot placement scores."""
        window = self.pool.scale_up.window.total_seconds()
        idle = self.pool.scale_down.idle_for.total_seconds()
        obs = self._observations(nodes, now - window, now - idle)
        shapes = self._pending_shapes(cluster) if pending is None else []
        self._evict(nodes, cluster)
        return Snapshot.model_construct(
            taken_at=to_datetime(now), nodes=obs,
            pools={self.key: PoolObservation.model_construct(
                pending=pending or [], pending_shapes=shapes, metrics_missing=None,
                scheduler_missing=None, on_prem=self._on_prem(cluster))},
            capacity_errors=errors, offerings=[], spot_scores=scores or [],
            missing=[],
            # Given, not defaulted: pydantic inspects a default factory's signature each time.
            unserved=[], cluster_quotas={}, held={}, forecasts={},
        )

    def _on_prem(self, cluster: Cluster) -> list[OnPremNode] | None:
        """The static nodes as the Slurm reader reports them to a pool with on_prem."""
        if self.pool.cluster.on_prem is None:
            return None
        return [OnPremNode.model_construct(name=n.name, gpus=n.gpus, allocated=n.allocated,
                                           gpus_free=_free_shares(n),
                                           gpu_model=n.itype.gpu_model) for n in cluster.static]

    def _evict(self, nodes: list[SimNode], cluster: Cluster) -> None:
        """Keep the running-job views bounded by what is live: drop finished and killed
        runs once the cache holds twice what runs in the cluster (amortised: rarely a full
        pass)."""
        if len(self._running) > 2 * len(cluster.running) + 64:
            runs = {(j.job.id, j.run_id) for n in nodes for j in n.jobs.values()}
            self._running = {k: v for k, v in self._running.items() if k in runs}

    def _pending_shapes(self, cluster: Cluster) -> list[PendingShape]:
        """The queue by shape, ids in order (ties: oldest first, as a stable sort of the
        FIFO would put them). Only the jobs the cluster moved since the last tick are
        looked at (``Cluster.queue_moves``); a shape's record is rebuilt (its lists copied)
        only when one of its jobs moved."""
        if self._cluster is not cluster or cluster.queue_moves is None:
            self._cluster, self._queues = cluster, {}
            cluster.queue_moves = cluster.pending  # start following: index what waits now
        for job in dict.fromkeys(cluster.queue_moves):  # each job once, as it is now
            self._queues.setdefault(job.gpus, _Queue()).move(job)
        cluster.queue_moves = []
        for g in [g for g, q in self._queues.items() if not q.ids]:
            del self._queues[g]
        return [q.shown(g) for g, q in self._queues.items()]

    def _running_job(self, job: SimJob) -> RunningJob:
        key = (job.job.id, job.run_id)
        found = self._running.get(key)
        if found is None:
            found = construct(RunningJob, id=job.job.id, gpus=job.gpus,
                                               started_at=to_datetime(job.run_start), name="")
            self._running[key] = found
        return found

    def _observations(self, nodes: list[SimNode], window_from: float,
                      idle_from: float) -> dict[str, NodeObservation]:
        """Each reporting node's observation, by name. One loop over the fleet with the
        common case inline (a settled util's metrics and an unchanged scheduler view, both
        looked up): it runs for every node of a 3,000-node fleet each tick, where three
        calls per node cost more than the lookups."""
        observed: dict[str, NodeObservation] = {}
        views, scheds, settled = self._obs, self._sched, self._settled
        for node in nodes:
            state = node.state
            if state not in REPORTING:
                continue
            name = node.name
            # Mean and max of the util samples since window_from, max since idle_from.
            # Where every one of those samples is the node's latest value (its util has
            # not changed for a while), the figures depend only on that value and the two
            # counts: looked up, not summed again.
            samples, times = node.sample_u, node.sample_t
            i, j = bisect_left(times, window_from), bisect_left(times, idle_from)
            n = len(samples)
            if node.run_from <= (i if i < j else j) and n > (j if i < j else i):
                metrics = settled.get((samples[-1], n - i, n - j, node.itype.gpus))
                if metrics is None:
                    metrics = self._settle(samples, i, j, node.itype.gpus)
            else:
                metrics = self._metrics_of(samples[i:], samples[j:], node.itype.gpus)
            seen = scheds.get(name)
            sched = (seen[1] if seen is not None and seen[0] == (node.jobs_version, state)
                     else self._scheduler(node))
            cached = views.get(name)
            if cached is not None and cached[0] is metrics and cached[1] is sched:
                observed[name] = cached[2]
                continue
            obs = observed[name] = construct(NodeObservation,
                metrics=metrics, metrics_missing=None, metrics_silent=False, scheduler=sched,
                scheduler_missing=None, health_check_failed=None)
            views[name] = (metrics, sched, obs)
        return observed

    def _settle(self, samples: list[float], i: int, j: int, gpus: int) -> GpuMetrics:
        """The metrics of a node whose samples since ``min(i, j)`` all equal its latest,
        kept for every node that settles on the same value and counts."""
        if len(self._settled) > 4096:
            self._settled.clear()
        n = len(samples)
        found = self._metrics_of(samples[i:], samples[j:], gpus)
        self._settled[samples[-1], n - i, n - j, gpus] = found
        return found

    def _metrics_of(self, recent: list[float], quiet: list[float], gpus: int) -> GpuMetrics:
        key = (sum(recent) / len(recent) if recent else None, max(recent) if recent else None,
               max(quiet) if quiet else None, gpus)
        metrics = self._metrics.get(key)
        if metrics is None:
            if len(self._metrics) > 4096:  # util values that vary with a duty cycle
                self._metrics.clear()
            metrics = self._metrics[key] = construct(GpuMetrics,
                util_mean=key[0], util_max=key[1], util_max_idle_window=key[2], mem_used_mib=None,
                mem_free_mib=None, temperature_max_c=None, power_w=None, xid_errors=0,
                ecc_dbe_errors=0, row_remap_failures=0, retired_pages_pending=0,
                thermal_throttle=False, gpus_reporting=gpus, sample_age_s=0.0)
        return metrics

    def _scheduler(self, node: SimNode) -> SchedulerNode:
        key = (node.jobs_version, node.state)
        cached = self._sched.get(node.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        allocated = node.allocated
        state = {S.DRAINING: "draining", S.DRAINED: "drained", S.INTERRUPTED: "draining"}.get(
            node.state, "idle" if allocated <= 0 else "allocated" if allocated >= node.gpus else "mixed")
        sched = construct(SchedulerNode,
            state=state, gpus_total=float(node.gpus), gpus_allocated=float(allocated),
            gpus_free=_free_shares(node),
            jobs=[self._running_job(j) for j in node.jobs.values()], cordoned=node.state is not S.READY,
            ready=True, unusable=None, unusable_since=None)
        self._sched[node.name] = (key, sched)
        return sched


class _Queue:
    """One shape's pending jobs in (id, FIFO) order, as the lists a PendingShape copies."""

    __slots__ = ("ids", "keys", "record", "submitted")

    def __init__(self) -> None:
        self.keys: list[tuple[str, tuple[float, int]]] = []
        self.ids: list[str] = []
        self.submitted: list[datetime | None] = []
        self.record: PendingShape | None = None  # what the last snapshot showed, until a move

    def shown(self, gpus: float) -> PendingShape:
        if self.record is None:
            self.record = PendingShape.model_construct(
                gpus=gpus, nodes=1, reason="Resources", gpu_model=None, priority=0, zones=None,
                instance_types=None, ids=self.ids.copy(), submitted_at=self.submitted.copy())
        return self.record

    def move(self, job: SimJob) -> None:
        """Drop the job's entry for its last wait, if any; enter it again if it waits now
        (a requeued job waits since its requeue, the wait that capacity.max_wait reads)."""
        key = (job.job.id, job.key)
        self.record = None
        i = bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            del self.keys[i], self.ids[i], self.submitted[i]
        if job.state == "pending":
            self.keys.insert(i, key)
            self.ids.insert(i, job.job.id)
            self.submitted.insert(i, to_datetime(job.pending_since))


def _free_shares(node: SimNode) -> list[float]:
    """Each GPU's free share as a scheduler reports it: within 0..1 (float sums leave -5e-17)."""
    return [min(1.0, max(0.0, float(f))) for f in node.free]
