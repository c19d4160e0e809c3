"""Per-pool facts computed once per tick and shared by every rule."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from operator import attrgetter

from autoscaler.engine import schedule
from autoscaler.engine.binpack import shapes_of
from autoscaler.engine.pricing import Prices
from autoscaler.model.lifecycle import FAILED, IN_FLIGHT, NodeState
from autoscaler.model.node import FleetView, Node, PoolHistory
from autoscaler.model.snapshot import (
    NodeObservation,
    PendingShape,
    PoolObservation,
    RunningJob,
    Snapshot,
)
from autoscaler.policy.models import Market, Pool, TeamPolicy, pool_key

# Slurm reasons Resources/Priority and Kubernetes' Unschedulable mean "more GPUs would
# let this run"; Dependency, QOS limits, held jobs and the like do not. PartitionConfig is
# how Slurm holds a job in a partition with fewer nodes than it asks for: one of dynamic
# nodes that has none yet says so until the first node registers.
DEMAND_REASONS = frozenset({"Resources", "Priority", "Unschedulable", "PartitionConfig"})
_EMPTY_OBS = NodeObservation()
_EMPTY_POOL = PoolObservation()
_NAME = attrgetter("name")
# The members _file compares every node with, bound once: reading an enum member through
# its class (NodeState.READY) costs about 0.1 us in CPython 3.11, several per node a tick.
_READY = NodeState.READY
_TERMINATED = NodeState.TERMINATED
_INTERRUPTED = NodeState.INTERRUPTED
_DRAINING = NodeState.DRAINING
_DRAINED = NodeState.DRAINED
_ON_DEMAND = Market.ON_DEMAND


# Slots: 500 pools a tick, and a __dict__ each is one more object for the GC to walk.
@dataclass(slots=True)
class PoolContext:
    policy: TeamPolicy
    pool: Pool
    key: str
    obs: PoolObservation
    history: PoolHistory
    serving: list[Node] = field(default_factory=list)
    in_flight: list[Node] = field(default_factory=list)
    draining: list[Node] = field(default_factory=list)
    drained: list[Node] = field(default_factory=list)
    interrupted: list[Node] = field(default_factory=list)
    failed: list[Node] = field(default_factory=list)
    other: list[Node] = field(default_factory=list)  # TERMINATING, LOST
    # Observations by node name: the snapshot's own dict, shared by every pool (rules only
    # look up nodes of their pool, and copying 10,000 entries per tick bought nothing).
    node_obs: dict[str, NodeObservation] = field(default_factory=dict)
    data_missing: str | None = None
    error: str | None = None  # a rule raised for this pool: nothing is decided for it
    floor: int = 0
    floor_why: str = ""
    # Sums and per-node findings, filled while filing the nodes (engine/survey.py):
    # rules read these instead of each walking thousands of nodes again. Findings are
    # nodes, not (node, detail) pairs: thousands of pairs a tick cost the GC more than
    # the rules that want a detail spend looking it up.
    billable_gpus: int = 0
    billable_usd: float = 0.0
    active_gpus: int = 0
    active_usd: float = 0.0
    active_on_demand: int = 0
    util_sum: float = 0.0
    util_count: int = 0
    idle: list[Node] = field(default_factory=list)
    idle_max: dict[str, float] = field(default_factory=dict)  # max util proving each idle
    sick: list[tuple[Node, str]] = field(default_factory=list)
    # The sick nodes found on absence-shaped evidence (the scheduler calls them unusable or
    # does not list them, fewer GPUs advertised, silent): how long each has looked broken.
    # Their replacement is held to the pool's scale-down budget, longest first (unhealthy.py).
    absent: dict[str, timedelta] = field(default_factory=dict)
    # Serving nodes without fresh GPU metrics because none came: (node, silent for at
    # least, how that is known); broken.review files them as sick if the fleet reports.
    silent: list[tuple[Node, timedelta, str]] = field(default_factory=list)
    silent_kept: str | None = None  # why silent nodes past their grace are not replaced
    broken_waiting: int = 0  # absent nodes the pool's draining budget keeps this tick
    reporting: int = 0  # serving nodes with fresh GPU metrics
    fallbacks: int = 0  # serving nodes on-demand because spot was refused (the return to spot's)
    long_jobs: list[tuple[Node, RunningJob]] = field(default_factory=list)
    expired: list[Node] = field(default_factory=list)  # serving, past max_node_age
    free: list[Node] = field(default_factory=list)  # serving, the scheduler has GPUs unallocated
    idle_load: float = 0.0  # util_sum's share from the nodes in ``idle``
    placed: list[str] = field(default_factory=list)  # why jobs of a placement group came here
    spot_scarce: str | None = None  # the evidence of a spot outage under way (engine/scarcity.py)

    @property
    def team(self) -> str:
        return self.policy.team

    @property
    def size(self) -> int:
        """How many nodes serve or will serve the pool (what min/max/floor count)."""
        return len(self.serving) + len(self.in_flight)

    @property
    def active(self) -> list[Node]:
        """Nodes that serve or will serve the pool: what min/max/floor count."""
        return self.serving + self.in_flight

    def billable(self) -> list[Node]:
        return (self.serving + self.in_flight + self.draining + self.drained + self.interrupted
                + self.failed + self.other)

    def observation(self, node: Node) -> NodeObservation:
        return self.node_obs.get(node.name, _EMPTY_OBS)

    def fresh(self, node: Node) -> bool:
        obs = self.observation(node)
        return obs.metrics is not None and obs.metrics_missing is None

    def demand_shapes(self) -> list[PendingShape]:
        """Pending demand by shape: the listed jobs counted, plus the shapes given counted."""
        if not self.pool.scale_up.pending_jobs or self.obs.scheduler_missing:
            return []
        listed = shapes_of(j for j in self.obs.pending if j.reason in DEMAND_REASONS)
        return listed + [s for s in self.obs.pending_shapes if s.reason in DEMAND_REASONS]

    def on_demand_count(self) -> int:
        return self.active_on_demand

    def nodes_for(self, load: float) -> int:
        """Serving nodes that carry ``load`` (summed GPU util %) without their mean crossing
        the scale-up threshold."""
        return math.ceil(load / self.pool.scale_up.gpu_utilization_above - 1e-9)

    def util_mean(self) -> float | None:
        """Mean GPU utilization of serving nodes with fresh metrics."""
        return self.util_sum / self.util_count if self.util_count else None


def rule_error(what: str, exc: Exception) -> str:
    """A rule's exception in one line, for the pool's Hold."""
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{what} raised {type(exc).__name__}" + (f": {text}" if text else "")


def build_contexts(
    policies: dict[str, TeamPolicy], fleet: FleetView, snapshot: Snapshot, now: datetime,
    prices: Prices, survey: Callable[[PoolContext], None] | None = None,
) -> tuple[list[PoolContext], list[Node]]:
    """Contexts in service order (priority, team, pool) and nodes of unknown pools.

    ``survey`` runs on each pool as soon as its nodes are filed: they are still in the
    CPU cache then, which a second walk over 10,000 nodes after filing all pools is not.
    """
    contexts: dict[str, PoolContext] = {}
    for policy in sorted(policies.values(), key=lambda p: (p.priority.rank, p.team)):
        for pool in policy.pools:
            key = pool_key(policy.team, pool.name)
            error = None
            try:
                lo, why = schedule.floor(pool, now)
            except Exception as exc:  # one pool's schedule must not stop every pool
                lo, why, error = pool.min_nodes, "", rule_error("its schedule", exc)
            contexts[key] = PoolContext(
                policy=policy, pool=pool, key=key,
                obs=snapshot.pools.get(key, _EMPTY_POOL),
                history=fleet.history.get(key, PoolHistory()),
                node_obs=snapshot.nodes, error=error,
                floor=min(lo, pool.max_nodes), floor_why=why,
            )
    # One dict lookup per node groups the fleet; each pool's few dozen nodes are then
    # sorted by name on their own, which files them in the same order as sorting the
    # whole fleet would (the sort is stable), for a fraction of the comparisons.
    groups: defaultdict[tuple[str, str], list[Node]] = defaultdict(list)
    for node in fleet.nodes:
        groups[node.team, node.pool].append(node)
    for ctx in contexts.values():
        nodes = groups.pop((ctx.team, ctx.pool.name), None)
        try:
            if nodes:
                nodes.sort(key=_NAME)
                _file(ctx, nodes, prices)
                if survey is not None:
                    survey(ctx)
            ctx.data_missing = _data_missing(ctx, snapshot)
        except Exception as exc:  # its nodes stay filed here: never orphans of a removed pool
            ctx.error = ctx.error or rule_error("surveying its nodes", exc)
    orphans = sorted((n for group in groups.values() for n in group
                      if n.state is not NodeState.TERMINATED), key=_NAME)
    return list(contexts.values()), orphans


def _file(ctx: PoolContext, nodes: list[Node], prices: Prices) -> None:
    """Sort one pool's nodes into its state lists and add up what they hold and cost."""
    cost = prices.node_cost
    billable_gpus = active_gpus = active_on_demand = 0
    billable_usd = active_usd = 0.0
    for node in nodes:
        state = node.state
        if state is _TERMINATED:
            continue
        gpus, usd = cost(node)
        billable_gpus += gpus
        billable_usd += usd
        if state is _INTERRUPTED:
            ctx.interrupted.append(node)
        elif state is _READY or state in IN_FLIGHT:
            (ctx.serving if state is _READY else ctx.in_flight).append(node)
            active_gpus += gpus
            active_usd += usd
            if node.market is _ON_DEMAND:
                active_on_demand += 1
        elif state is _DRAINING:
            ctx.draining.append(node)
        elif state is _DRAINED:
            ctx.drained.append(node)
        elif state in FAILED:
            ctx.failed.append(node)
        else:
            ctx.other.append(node)
    ctx.billable_gpus, ctx.billable_usd = billable_gpus, billable_usd
    ctx.active_gpus, ctx.active_usd, ctx.active_on_demand = active_gpus, active_usd, active_on_demand


def _data_missing(ctx: PoolContext, snapshot: Snapshot) -> str | None:
    """Why this pool's scale-down must freeze this tick, or None."""
    if "prometheus" in snapshot.missing:
        return "Prometheus could not be read"
    if ctx.obs.metrics_missing:
        return f"GPU metrics missing: {ctx.obs.metrics_missing}"
    if ctx.pool.cluster.kind != "none":
        if ctx.pool.cluster.kind in snapshot.missing:
            return f"{ctx.pool.cluster.kind} could not be read"
        if ctx.obs.scheduler_missing:
            return f"scheduler data missing: {ctx.obs.scheduler_missing}"
    return None
