"""Per-pool facts computed once per tick and shared by every rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from autoscaler.engine import schedule
from autoscaler.engine.pricing import Prices
from autoscaler.engine.snapshot import NodeObservation, PendingJob, PoolObservation, Snapshot
from autoscaler.fleet.lifecycle import FAILED, IN_FLIGHT, NodeState
from autoscaler.fleet.node import FleetView, Node, PoolHistory
from autoscaler.policy.models import Market, Pool, TeamPolicy, pool_key

# Slurm reasons Resources/Priority and Kubernetes' Unschedulable mean "more GPUs would
# let this run"; Dependency, QOS limits, held jobs and the like do not.
DEMAND_REASONS = frozenset({"Resources", "Priority", "Unschedulable"})
_EMPTY_OBS = NodeObservation()
_EMPTY_POOL = PoolObservation()


@dataclass
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
    node_obs: dict[str, NodeObservation] = field(default_factory=dict)
    data_missing: str | None = None
    floor: int = 0
    floor_why: str = ""

    @property
    def team(self) -> str:
        return self.policy.team

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

    def demand_jobs(self) -> list[PendingJob]:
        if not self.pool.scale_up.pending_jobs or self.obs.scheduler_missing:
            return []
        return [j for j in self.obs.pending if j.reason in DEMAND_REASONS]

    def on_demand_count(self) -> int:
        return sum(1 for n in self.active if n.market is Market.ON_DEMAND)

    def util_mean(self) -> float | None:
        vals = [
            m.util_mean
            for n in self.serving
            if (m := self.observation(n).metrics) is not None
            and m.util_mean is not None
            and self.fresh(n)
        ]
        return sum(vals) / len(vals) if vals else None


def build_contexts(
    policies: dict[str, TeamPolicy], fleet: FleetView, snapshot: Snapshot, now: datetime,
    prices: Prices,
) -> tuple[list[PoolContext], list[Node]]:
    """Contexts in service order (priority, team, pool) and nodes of unknown pools."""
    contexts: dict[str, PoolContext] = {}
    for policy in sorted(policies.values(), key=lambda p: (p.priority.rank, p.team)):
        for pool in policy.pools:
            key = pool_key(policy.team, pool.name)
            lo, why = schedule.floor(pool, now)
            contexts[key] = PoolContext(
                policy=policy, pool=pool, key=key,
                obs=snapshot.pools.get(key, _EMPTY_POOL),
                history=fleet.history.get(key, PoolHistory()),
                floor=min(lo, pool.max_nodes), floor_why=why,
            )
    orphans: list[Node] = []
    interrupted = set(snapshot.interrupted)
    for node in sorted(fleet.nodes, key=lambda n: n.name):
        ctx = contexts.get(node.pool_key)
        if ctx is None:
            if node.state is not NodeState.TERMINATED:
                orphans.append(node)
            continue
        obs = snapshot.nodes.get(node.name)
        if obs is not None:
            ctx.node_obs[node.name] = obs
        _file(ctx, node, node.name in interrupted)
    for ctx in contexts.values():
        ctx.data_missing = _data_missing(ctx, snapshot)
    return list(contexts.values()), orphans


def _file(ctx: PoolContext, node: Node, noticed: bool) -> None:
    state = node.state
    if state is NodeState.INTERRUPTED or (noticed and state in (NodeState.READY, NodeState.DRAINING)):
        ctx.interrupted.append(node)
    elif state is NodeState.READY:
        ctx.serving.append(node)
    elif state in IN_FLIGHT:
        ctx.in_flight.append(node)
    elif state is NodeState.DRAINING:
        ctx.draining.append(node)
    elif state is NodeState.DRAINED:
        ctx.drained.append(node)
    elif state in FAILED:
        ctx.failed.append(node)
    elif state is not NodeState.TERMINATED:
        ctx.other.append(node)


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
