"""The simulated cluster: nodes moving through the real lifecycle table, jobs on their GPUs.

Every state change goes through :func:`autoscaler.model.lifecycle.check_transition`, so the
simulator can only do what the service may do. Billing runs from the launch request until
the node is terminated (a failed launch is not billed); jobs are placed FIFO with first-fit
backfill (no reservations) by :mod:`autoscaler.sim.placement`.

Pending jobs are also indexed by shape (GPUs asked), each shape's jobs oldest first: when a
job does not fit, no younger job of its shape can fit in the same pass, so a pass costs the
jobs it starts plus one failed try per shape, not a scan of the whole backlog.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from autoscaler.catalog import InstanceType
from autoscaler.model.lifecycle import IN_FLIGHT, SIM_BILLABLE, NodeState, check_transition
from autoscaler.policy.models import Market
from autoscaler.sim.clock import Clock, Kind
from autoscaler.sim.placement import EPS, best_node, max_share_free, whole_free
from autoscaler.traces import Job

S = NodeState


@dataclass(eq=False)
class SimJob:
    job: Job
    index: int
    remaining: float
    duty: int = 0  # which duty-cycle series models its GPU use
    duty_offset: int = 0
    state: str = "future"  # future | pending | running | done
    pending_since: float = 0.0
    wait: float = 0.0
    first_start: float | None = None
    run_start: float = 0.0
    run_id: int = 0
    node: SimNode | None = None
    slots: list[tuple[int, float]] = field(default_factory=list)
    kills: int = 0
    gpu_seconds: float = 0.0  # share x seconds held on GPUs
    lost_seconds: float = 0.0  # share x seconds of work redone after kills

    key: tuple[float, int] = field(init=False)  # FIFO order: arrival, then trace order

    def __post_init__(self) -> None:
        self.key = (self.job.arrival, self.index)

    @property
    def gpus(self) -> float:
        return self.job.gpus


@dataclass(eq=False)
class SimNode:
    name: str
    itype: InstanceType
    market: Market
    zone: str | None
    hourly: float
    created_at: float
    state: NodeState = S.REQUESTED
    state_since: float = 0.0
    ready_at: float | None = None
    free: list[float] = field(default_factory=list)
    jobs: dict[str, SimJob] = field(default_factory=dict)
    drain_trigger: str | None = None
    replacement_requested: bool = False
    replaces: str | None = None  # what the executor keeps in the node's meta (Node fields)
    launched_for: str | None = None
    fallback_from_spot: bool = False
    pool: str | None = None  # "team/pool" where a strategy buys for several pools (a group)
    reason: str = ""
    epoch: int = 0  # bumps on every change that voids pending node events or cached views
    jobs_version: int = 0  # bumps when a job starts or leaves the node
    sample_t: list[float] = field(default_factory=list)  # util samples (time, %), oldest first
    sample_u: list[float] = field(default_factory=list)
    run_from: int = 0  # index of the first sample of the latest run of equal samples
    _allocated: tuple[int, float] = (-1, 0.0)  # (jobs_version, GPUs held): read every tick
    steady_util: tuple[int, float] = (-1, 0.0)  # (jobs_version, util %) without duty cycles
    has_room: bool = False  # in the cluster's index of READY nodes with room (Cluster._open)

    @property
    def gpus(self) -> int:
        return self.itype.gpus

    @property
    def allocated(self) -> float:
        if self._allocated[0] != self.jobs_version:
            self._allocated = (self.jobs_version, sum(self.gpus_of(j) for j in self.jobs.values()))
        return self._allocated[1]

    @staticmethod
    def gpus_of(job: SimJob) -> float:
        return sum(a for _, a in job.slots)

    def add_sample(self, t: float, util: float, keep: int = 512) -> None:
        if not self.sample_u or util != self.sample_u[-1]:
            self.run_from = len(self.sample_u)
        self.sample_t.append(t)
        self.sample_u.append(util)
        if len(self.sample_t) > 2 * keep:
            self.run_from = max(0, self.run_from - (len(self.sample_t) - keep))
            del self.sample_t[:-keep], self.sample_u[:-keep]

    def util_since(self, t: float) -> list[float]:
        """Util samples taken at or after ``t``."""
        return self.sample_u[bisect.bisect_left(self.sample_t, t):]


@dataclass
class Totals:
    cost_usd: float = 0.0
    gpu_seconds_paid: float = 0.0
    launches: int = 0
    failed_launches: int = 0
    terminations: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    # work redone, by kill cause
    lost_gpu_seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    moves_to_spot: int = 0  # fallback on-demand nodes drained for a READY spot replacement
    gpu_seconds_by_market: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))


class Cluster:
    """Nodes and jobs of one strategy's replay; strategies act through its methods."""

    def __init__(self, clock: Clock, checkpoint_interval: float):
        self.clock = clock
        self.checkpoint = checkpoint_interval
        self.nodes: dict[str, SimNode] = {}
        self.running: dict[str, SimJob] = {}
        self.done = 0
        self.totals = Totals()
        self._seq = 0
        self.version = 0  # bumps on any change of nodes, job placement or the queue
        self._capacity_grew = True
        self._by_shape: dict[float, list[SimJob]] = {}  # pending jobs per GPUs asked, oldest first
        self._arrived_shapes: set[float] = set()
        self._fleet_version = 0  # bumps when a node moves or a job starts or leaves one
        # Jobs that entered or left the queue since the follower (the engine's observer,
        # which keeps its own index of the queue) last read them; None: nobody follows.
        self.queue_moves: list[SimJob] | None = None
        self._room_cache: tuple[int, int, float] | None = None
        # READY nodes with room on some GPU (free >= EPS), oldest first ((created_at, name)):
        # the only nodes a job can go to. A large fleet is mostly full, so a scheduling
        # pass looks at these, not at every node; kept up to date as nodes move and jobs
        # start or leave (_index).
        self._open: list[SimNode] = []
        # Static on-prem nodes (hybrid burst): always READY, never billed, never in the
        # fleet a strategy manages; Slurm's weights put jobs on them first.
        self.static: list[SimNode] = []
        # Open bills of instances outside the fleet (a warm pool's, sim/warm.py): $ at now.
        self.stopped_bills: Callable[[float], float] | None = None

    # -- nodes ---------------------------------------------------------------------
    def new_node(self, itype: InstanceType, market: Market, zone: str | None, hourly: float,
                 now: float, pool: str | None = None) -> SimNode:
        self._seq += 1
        node = SimNode(name=f"n{self._seq:05d}", itype=itype, market=market, zone=zone,
                       hourly=hourly, created_at=now, state_since=now, free=[1.0] * itype.gpus,
                       pool=pool)
        self.nodes[node.name] = node
        self.totals.launches += 1
        self.move(node, S.PROVISIONING, now)
        return node

    def add_static(self, itype: InstanceType, count: int, now: float) -> None:
        for i in range(1, count + 1):
            self.static.append(SimNode(
                name=f"onprem{i:03d}", itype=itype, market=Market.ON_DEMAND, zone=None, hourly=0.0,
                created_at=now, state=S.READY, state_since=now, ready_at=now,
                free=[1.0] * itype.gpus))
        self._capacity_grew = True
        self._fleet_version += 1

    def move(self, node: SimNode, target: NodeState, now: float, reason: str = "") -> None:
        check_transition(node.name, node.state, target)
        node.state, node.state_since, node.epoch = target, now, node.epoch + 1
        self.version += 1
        self._fleet_version += 1
        self._index(node)
        if reason:
            node.reason = reason
        if target is S.READY:
            if node.ready_at is None:
                node.ready_at = now
            self._capacity_grew = True
        elif target is S.PROVISION_FAILED:
            self.totals.failed_launches += 1
        elif target is S.TERMINATED:
            self._close_bill(node, now)
            del self.nodes[node.name]

    def _close_bill(self, node: SimNode, now: float) -> None:
        if node.reason == "capacity-error":
            return  # a launch the cloud refused is never billed
        hours = (now - node.created_at) / 3600
        self.totals.cost_usd += node.hourly * hours
        self.totals.gpu_seconds_paid += node.gpus * (now - node.created_at)
        self.totals.gpu_seconds_by_market[node.market.value] += node.gpus * (now - node.created_at)
        self.totals.terminations += 1

    def open_bills(self, now: float) -> tuple[float, defaultdict[str, float]]:
        """($, GPU-seconds per market) of nodes still billed at ``now``."""
        usd, gpu_s = 0.0, defaultdict[str, float](float)
        for node in self.nodes.values():
            if node.state in SIM_BILLABLE and node.reason != "capacity-error":
                usd += node.hourly * (now - node.created_at) / 3600
                gpu_s[node.market.value] += node.gpus * (now - node.created_at)
        if self.stopped_bills is not None:
            usd += self.stopped_bills(now)
        return usd, gpu_s

    def drain(self, node: SimNode, now: float, trigger: str) -> None:
        self.move(node, S.DRAINING, now)
        node.drain_trigger = trigger
        if not node.jobs:
            self.move(node, S.DRAINED, now)

    def cancel_drain(self, node: SimNode, now: float) -> None:
        node.drain_trigger = None
        self.move(node, S.READY, now)

    def terminate(self, node: SimNode, now: float, cause: str) -> None:
        """Take a node out now, from any state; running jobs are killed and requeued."""
        self.kill_jobs(node, now, cause)
        path = {
            S.READY: [S.DRAINING, S.DRAINED, S.TERMINATING],
            S.DRAINING: [S.DRAINED, S.TERMINATING],
        }.get(node.state, [S.TERMINATING])
        if node.state in (S.TERMINATING, S.LOST):
            path = []
        for target in [*path, S.TERMINATED]:
            self.move(node, target, now)

    def serving(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.state is S.READY]

    def with_room(self) -> list[SimNode]:
        """READY nodes with room on some GPU, oldest first: the only nodes a job can start
        on (what a scheduling pass looks at)."""
        return list(self._open)

    def in_flight(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.state in IN_FLIGHT]

    # -- jobs ----------------------------------------------------------------------
    def arrive(self, job: SimJob, now: float) -> None:
        job.state, job.pending_since = "pending", now
        self._by_shape.setdefault(job.gpus, []).append(job)
        self._arrived_shapes.add(job.gpus)
        self.version += 1
        if self.queue_moves is not None:
            self.queue_moves.append(job)

    def start(self, job: SimJob, node: SimNode, slots: list[tuple[int, float]], now: float) -> None:
        for i, amount in slots:
            node.free[i] -= amount
        self.version += 1
        self._fleet_version += 1
        node.jobs_version += 1
        self._index(node)
        job.state, job.node, job.slots = "running", node, slots
        job.wait += now - job.pending_since
        job.run_start, job.run_id = now, job.run_id + 1
        if job.first_start is None:
            job.first_start = now
        if self.queue_moves is not None:
            self.queue_moves.append(job)
        node.jobs[job.job.id] = job
        self.running[job.job.id] = job
        run_id = job.run_id
        self.clock.at(now + job.remaining, Kind.FINISH, lambda t: self.finish(job, run_id, t))

    def _release(self, job: SimJob, now: float) -> SimNode:
        node = job.node
        if node is None:
            raise RuntimeError(f"job {job.job.id} is not running")
        for i, amount in job.slots:
            node.free[i] = min(1.0, node.free[i] + amount)
        job.gpu_seconds += job.gpus * (now - job.run_start)
        del node.jobs[job.job.id]
        del self.running[job.job.id]
        node.jobs_version += 1
        self._index(node)
        job.node, job.slots = None, []
        self._capacity_grew = True
        self.version += 1
        self._fleet_version += 1
        return node

    def finish(self, job: SimJob, run_id: int, now: float) -> None:
        if job.state != "running" or job.run_id != run_id:
            return  # the run this event belonged to was killed
        node = self._release(job, now)
        job.state, job.remaining = "done", 0.0
        self.done += 1
        if node.state is S.DRAINING and not node.jobs:
            self.move(node, S.DRAINED, now)

    def kill_jobs(self, node: SimNode, now: float, cause: str) -> None:
        """Requeue a node's jobs; they keep the work of their last checkpoint."""
        for job in list(node.jobs.values()):
            ran = now - job.run_start
            kept = math.floor(ran / self.checkpoint) * self.checkpoint if self.checkpoint > 0 else 0.0
            self._release(job, now)
            job.remaining -= kept
            job.lost_seconds += job.gpus * (ran - kept)
            self.totals.lost_gpu_seconds[cause] += job.gpus * (ran - kept)
            job.kills += 1
            self.totals.kills[cause] += 1
            job.state, job.pending_since = "pending", now
            bisect.insort(self._by_shape.setdefault(job.gpus, []), job, key=lambda j: j.key)
            if self.queue_moves is not None:
                self.queue_moves.append(job)

    # -- scheduling ----------------------------------------------------------------
    def schedule(self, now: float) -> None:
        """FIFO with first-fit backfill: every pending job that fits starts, oldest first.

        Shapes are tried oldest head first; a shape whose head does not fit is done for this
        pass. Without new capacity only the shapes of new arrivals can have a job that fits.
        """
        if self._capacity_grew:
            shapes, self._capacity_grew = list(self._by_shape), False
        else:
            shapes = [g for g in self._arrived_shapes if g in self._by_shape]
        self._arrived_shapes = set()
        if not shapes:
            return
        every = any(g < 2 * EPS for g in shapes)  # a job that could fit a node without room
        nodes = sorted(self.serving(), key=_created) if every else self._open
        whole, share = self._serving_room(nodes, every)
        heads = [(self._by_shape[g][0].key, g) for g in shapes]
        heapq.heapify(heads)
        started: dict[float, int] = {}
        while heads:
            _, g = heapq.heappop(heads)
            queue, n = self._by_shape[g], started.get(g, 0)
            job = queue[n]
            fits = (round(g) <= whole) if g >= 1 - EPS else (g <= share + EPS)
            found = None
            if fits:
                found = best_node(self.static, g) if self.static else None
                found = found or best_node(nodes, g)
            if found is None:
                continue  # no younger job of this shape fits either
            self.start(job, found[0], found[1], now)
            started[g] = n + 1
            whole, share = _room([*self.static, *nodes] if self.static else nodes)
            if n + 1 < len(queue):
                heapq.heappush(heads, (queue[n + 1].key, g))
        if started:
            for g, n in started.items():
                del self._by_shape[g][:n]
                if not self._by_shape[g]:
                    del self._by_shape[g]

    def _serving_room(self, nodes: list[SimNode], every: bool) -> tuple[int, float]:
        """The most free room on the serving ``nodes``, until the fleet changes (a
        backlog's arrivals mostly find the same full fleet)."""
        if every:
            return _room([*self.static, *nodes] if self.static else nodes)
        cached = self._room_cache
        if cached is None or cached[0] != self._fleet_version:
            cached = (self._fleet_version, *_room([*self.static, *nodes] if self.static else nodes))
            self._room_cache = cached
        return cached[1], cached[2]

    def _index(self, node: SimNode) -> None:
        """Keep ``node`` in the index of READY nodes with room (``_open``) or out of it."""
        room = node.state is S.READY and max(node.free, default=0.0) >= EPS
        if room is node.has_room:
            return
        node.has_room = room
        if room:
            bisect.insort(self._open, node, key=_created)
        else:
            i = bisect.bisect_left(self._open, _created(node), key=_created)
            del self._open[i]

    @property
    def pending(self) -> list[SimJob]:
        """Pending jobs, oldest first (a killed job keeps its place by age)."""
        return sorted((j for q in self._by_shape.values() for j in q), key=_age)

    def pending_shapes(self) -> list[tuple[float, int]]:
        """(GPUs asked, pending jobs asking that), largest first."""
        return sorted(((g, len(q)) for g, q in self._by_shape.items()), key=lambda s: -s[0])

    def pending_count(self) -> int:
        return sum(len(q) for q in self._by_shape.values())

    def pending_gpus(self) -> float:
        return sum(g * len(q) for g, q in self._by_shape.items())

    def running_gpus(self) -> float:
        return sum(j.gpus for j in self.running.values())


def _created(node: SimNode) -> tuple[float, str]:
    return node.created_at, node.name


def _age(job: SimJob) -> tuple[float, int]:
    return job.key


def _room(nodes: list[SimNode]) -> tuple[int, float]:
    """The most whole GPUs and the largest GPU share free on any one node."""
    return (max((whole_free(n.free) for n in nodes), default=0),
            max((max_share_free(n.free) for n in nodes), default=0.0))
