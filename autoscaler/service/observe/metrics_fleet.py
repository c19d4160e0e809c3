"""The metrics dashboards and alerts need beyond the tick's own: per node, per team, and the
durations of lifecycle steps, refreshed from the store at the end of every tick.

Durations are read from the store's transition table (rows newer than the last one seen),
not timed where the executor or the interruption intake act: those steps may run in
workers, on another instance after a failover, or be resumed after a crash, and the table
is the one place that sees them all, with the timestamps of the injected clock. A
follower keeps its gauges current but observes no durations (the leader does), so a sum
over instances counts each step once; a restart starts after the newest row, so history
is not observed twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from prometheus_client import Gauge

from autoscaler.engine.pricing import Prices
from autoscaler.fleet.queries import Transition, entries, last_transition_id, transitions_after
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import BILLABLE, NodeState, StateLimits, state_limit
from autoscaler.model.node import Node
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import Market, Pool, TeamPolicy, find_pool, pool_key
from autoscaler.service.observe.metrics import ServiceMetrics

S = NodeState
Labels = tuple[str, ...]


def markets_of(pool: Pool) -> list[Market]:
    """The markets the pool launches in (a spot error does not hold back an on-demand pool)."""
    return pool.capacity.markets()


class FleetObserver:
    def __init__(self, store: FleetStore):
        self.store = store
        self.last_id = last_transition_id(store)
        self._labels: dict[str, set[Labels]] = {}

    def refresh(self, metrics: ServiceMetrics, nodes: Iterable[Node],
                policies: Mapping[str, TeamPolicy], limits: StateLimits, prices: Prices,
                snapshot: Snapshot, now: datetime, leader: bool) -> None:
        self.gauges(metrics, nodes, policies, limits, prices, snapshot, now)
        self.durations(metrics, observe=leader)

    # -- gauges ---------------------------------------------------------------------------
    def _set(self, name: str, gauge: Gauge, values: Mapping[Labels, float]) -> None:
        """Set every label set of ``values``; remove the ones a previous tick set and this
        one did not (a node or team that is gone must not linger as a series)."""
        for gone in self._labels.get(name, set()) - set(values):
            gauge.remove(*gone)
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        self._labels[name] = set(values)

    def gauges(self, metrics: ServiceMetrics, nodes: Iterable[Node],
               policies: Mapping[str, TeamPolicy], limits: StateLimits, prices: Prices,
               snapshot: Snapshot, now: datetime) -> None:
        """``limits``: the service's settings the reconciler's state limits include, so the
        ratio of a node is 1 when the reconciler acts on it."""
        nodes = list(nodes)
        self._set("info", metrics.node_info, {
            (n.name, n.team, n.pool_key, n.instance_type, n.market.value): 1 for n in nodes})
        ratios: dict[Labels, float] = {}
        for n in nodes:
            limit = state_limit(n.state, find_pool(policies, n.team, n.pool), limits)
            if limit is not None:
                age = (now - n.state_since).total_seconds()
                ratios[(n.name, n.pool_key, n.state.value)] = round(age / limit.total_seconds(), 4)
        self._set("stuck", metrics.state_timeout_ratio, ratios)
        self._teams(metrics, nodes, policies, prices)
        self._pools(metrics, nodes, policies, prices, snapshot)

    def _teams(self, metrics: ServiceMetrics, nodes: list[Node],
               policies: Mapping[str, TeamPolicy], prices: Prices) -> None:
        gpus: dict[Labels, float] = {(t,): 0 for t in policies}
        usd: dict[Labels, float] = {(t,): 0.0 for t in policies}
        warm: dict[Labels, float] = {}
        for n in nodes:
            if n.state in BILLABLE:
                n_gpus, hourly = prices.node_cost(n)  # a stopped warm node: 0 GPUs, its volume
                gpus[(n.team,)] = gpus.get((n.team,), 0) + n_gpus
                usd[(n.team,)] = round(usd.get((n.team,), 0.0) + hourly, 4)
                if n.state is NodeState.WARM:
                    warm[(n.pool_key,)] = round(warm.get((n.pool_key,), 0.0) + hourly, 4)
        self._set("warm_usd", metrics.warm_hourly, warm)
        self._set("team_gpus", metrics.team_gpus, gpus)
        self._set("team_usd", metrics.team_hourly, usd)
        self._set("quota_gpus", metrics.team_quota_gpus, {
            (t,): p.quota.max_gpus for t, p in policies.items() if p.quota.max_gpus is not None})
        self._set("quota_usd", metrics.team_quota_hourly, {
            (t,): p.quota.max_hourly_usd for t, p in policies.items()
            if p.quota.max_hourly_usd is not None})

    def _pools(self, metrics: ServiceMetrics, nodes: list[Node],
               policies: Mapping[str, TeamPolicy], prices: Prices, snapshot: Snapshot) -> None:
        pending: dict[Labels, float] = {}
        backoff: dict[Labels, float] = {}
        for team, policy in policies.items():
            for pool in policy.pools:
                key = pool_key(team, pool.name)
                obs = snapshot.pools.get(key)
                jobs = obs.pending if obs is not None else []
                metrics.interruptions.labels(key)  # at 0 from the start: increase() sees the first
                pending[(team, key, policy.priority.value)] = sum(j.gpus * j.nodes for j in jobs)
                backoff[(key,)] = sum(1 for t in pool.instance_types for m in markets_of(pool)
                                      if prices.capacity_error(pool, t, None, m))
        self._set("pending", metrics.pending_gpus, pending)
        self._set("backoff", metrics.pool_backoff, backoff)
        metrics.forget_pools({pool_key(t, p.name) for t, policy in policies.items()
                              for p in policy.pools} | {n.pool_key for n in nodes})

    # -- durations ------------------------------------------------------------------------
    def durations(self, metrics: ServiceMetrics, observe: bool = True) -> None:
        """Observe the lifecycle steps that ended since the last call (each row once); a
        follower only moves past them (the leader observed them). Three queries whatever
        the number of steps: the new rows, their nodes, and the drain starts of the nodes
        that finished draining (a query per node and per drain grew with the fleet)."""
        steps = transitions_after(self.store, self.last_id)
        if observe and steps:
            found = {n.name: n for n in self.store.nodes(names={s.node for s in steps},
                                                          include_terminated=True)}
            drained = {s.node for s in steps if s.node in found and _drained(s)}
            starts = entries(self.store, drained, S.DRAINING, steps[-1].id) if drained else {}
            for step in steps:
                if (node := found.get(step.node)) is not None:
                    self._observe(metrics, step, node, starts.get(step.node, []))
        if steps:
            self.last_id = steps[-1].id

    def _observe(self, metrics: ServiceMetrics, step: Transition, node: Node,
                 drain_starts: list[tuple[int, datetime]]) -> None:
        """``drain_starts``: the node's moves into DRAINING (id, time), oldest first."""
        pool = node.pool_key
        if step.to_state is S.READY and step.from_state is S.BOOTSTRAPPING:
            seconds = (step.at - node.created_at).total_seconds()
            metrics.boot_to_ready.labels(node.instance_type).observe(max(0.0, seconds))
        elif _drained(step):
            began = max((at for row_id, at in drain_starts if row_id < step.id), default=None)
            if began is not None:
                metrics.drain_duration.labels(pool, node.drain_trigger or "").observe(
                    max(0.0, (step.at - began).total_seconds()))
        elif step.to_state is S.INTERRUPTED:
            metrics.interruptions.labels(pool).inc()
            notice = node.progress.interruption
            if notice is not None:
                metrics.notice_to_drain.labels(pool).observe(
                    max(0.0, (step.at - notice.at).total_seconds()))


def _drained(step: Transition) -> bool:
    return step.to_state is S.DRAINED and step.from_state is S.DRAINING
