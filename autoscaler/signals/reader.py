"""``SignalReader``: Prometheus + Slurm + Kubernetes -> one ``Observed`` per tick, the part
of the Snapshot they give (model/snapshot_parts.py; prices, offerings and capacity errors
are ``signals/prices.py``'s part).

Each source fails on its own: a failure puts its name in ``Snapshot.missing`` and a
reason in every affected pool (``metrics_missing`` / ``scheduler_missing``), so the engine
freezes scale-down there and nowhere else.

Node names: fleet nodes are observed with their own pool's windows. Hosts that are not
in the fleet (e.g. ``gpu-autoscaler signals`` without a store) are attributed to a pool
when their name starts with ``<team>-<pool>-`` (the longest such prefix), else only their
scheduler state is reported.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from autoscaler.catalog import Catalog
from autoscaler.model.bounds import NodeBounds, Times, checked, split_pending
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.snapshot import (
    ClusterQuota,
    NodeObservation,
    OnPremNode,
    PendingJob,
    PoolObservation,
    SchedulerNode,
    UnservedJob,
)
from autoscaler.model.snapshot_parts import Observed
from autoscaler.policy.models import Pool, TeamPolicy, pool_key
from autoscaler.signals.config import SignalsConfig
from autoscaler.signals.kubernetes import KubernetesReader
from autoscaler.signals.prometheus import MetricsReading, PrometheusReader
from autoscaler.signals.readings import (
    ClusterPool,
    SchedulerReading,
    key_by_name_prefix,
    pools_in_priority_order,
)
from autoscaler.signals.slurm import SlurmReader

log = logging.getLogger(__name__)


class MetricsSource(Protocol):
    def read(self, node_pools: Mapping[str, Pool], pools: Iterable[Pool], now: datetime,
             pool_of: Callable[[str], Pool | None] | None = None) -> MetricsReading: ...

    def close(self) -> None: ...


class SchedulerSource(Protocol):
    def read(self, refs: list[ClusterPool]) -> SchedulerReading: ...
SCHEDULERS = ("slurm", "kubernetes")


@dataclass(frozen=True)
class SignalsResult:
    observed: Observed
    unattributed: dict[str, list[PendingJob]] = field(default_factory=dict)  # kind -> jobs
    sources: dict[str, str] = field(default_factory=dict)  # source -> "ok ..." or why not
    prometheus_queries: int = 0


@dataclass
class _Scheduled:
    nodes: dict[str, SchedulerNode] = field(default_factory=dict)
    unattributed: dict[str, list[PendingJob]] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)
    sources: dict[str, str] = field(default_factory=dict)
    unserved: list[UnservedJob] = field(default_factory=list)
    quotas: dict[str, ClusterQuota] = field(default_factory=dict)
    pending: dict[str, list[PendingJob]] = field(default_factory=dict)  # pool -> jobs
    pool_missing: dict[str, str] = field(default_factory=dict)  # pool -> why not read
    on_prem: dict[str, list[OnPremNode]] = field(default_factory=dict)  # pool -> in service


class SignalReader:
    """Reads every configured source; readers can be injected (tests use fakes)."""

    def __init__(self, config: SignalsConfig, catalog: Catalog, *,
                 prometheus: MetricsSource | None = None, slurm: SchedulerSource | None = None,
                 kubernetes: SchedulerSource | None = None):
        self.config = config
        self.catalog = catalog
        self.prometheus: MetricsSource | None = prometheus or (
            PrometheusReader(config.prometheus) if config.prometheus else None)
        self.slurm: SchedulerSource = slurm or SlurmReader(config.slurm)
        self.kubernetes: SchedulerSource | None = kubernetes or (
            KubernetesReader(config.kubernetes) if config.kubernetes else None)
        self._refused: dict[str, str] = {}  # node -> why its data was not believed (logged)
        self._absent_since: dict[str, datetime] = {}  # READY node -> first tick found unlisted
        # Times.since_seen / pending_seen of the last tick (a time not believed, first seen)
        self._since_seen: dict[str, datetime] = {}
        self._pending_seen: dict[str, datetime] = {}
        self._pending_refused = 0  # logged when it changes

    def close(self) -> None:
        if self.prometheus is not None:
            self.prometheus.close()
        if isinstance(self.kubernetes, KubernetesReader):
            self.kubernetes.close()  # its watch threads

    def read(self, policies: Mapping[str, TeamPolicy], fleet_nodes: Sequence[Node],
             now: datetime) -> Observed:
        return self.read_all(policies, fleet_nodes, now).observed

    def read_all(self, policies: Mapping[str, TeamPolicy], fleet_nodes: Sequence[Node],
                 now: datetime) -> SignalsResult:
        pools = {pool_key(p.team, pool.name): pool for p in policies.values() for pool in p.pools}
        teams = {pool_key(p.team, pool.name): p.team for p in policies.values() for pool in p.pools}
        missing: set[str] = set()
        sources: dict[str, str] = {}
        fleet_by_name = {n.name: n for n in fleet_nodes if n.state is not NodeState.TERMINATED}
        node_pools = {name: pools[n.pool_key] for name, n in fleet_by_name.items()
                      if n.pool_key in pools}
        metrics = self._metrics(node_pools, pools, now)
        if metrics.error is not None:
            missing.add("prometheus")
        sources["prometheus"] = metrics.error or f"ok: {len(metrics.nodes)} nodes"
        scheduled = self._schedulers(policies)
        times = Times(now, self._since_seen, self._pending_seen)
        pool_obs = {}
        for key, pool in pools.items():
            wanted, refused = split_pending(
                [times.pending(job) for job in scheduled.pending.get(key, [])], pool)
            scheduled.unserved += [UnservedJob(id=job.id, team=teams[key], constraint=why,
                                               reason=f"{key}: {why}") for job, why in refused]
            pool_obs[key] = PoolObservation(pending=wanted, metrics_missing=metrics.error,
                                            scheduler_missing=scheduled.pool_missing.get(key),
                                            on_prem=scheduled.on_prem.get(key))
        missing.update(scheduled.missing)
        sources.update(scheduled.sources)
        sched_nodes = self._with_absent(scheduled, fleet_by_name, pools, now)
        # Only `gpu-autoscaler signals` reads them (a count), but no time handed on is unbelievable.
        unattributed = {kind: [times.pending(job) for job in jobs]
                        for kind, jobs in scheduled.unattributed.items()}
        if metrics.error is not None:
            node_missing = metrics.error
            metrics_nodes = {n: NodeObservation(metrics_missing=metrics.error) for n in node_pools}
        else:
            node_missing = "not in the fleet and its name matches no <team>-<pool>- prefix"
            metrics_nodes = metrics.nodes
        merged = _with_health_checks(_merge_nodes(metrics_nodes, sched_nodes, node_missing),
                                     fleet_by_name)
        nodes = self._believable(merged, NodeBounds(self.catalog, fleet_by_name, pools,
                                                    key_by_name_prefix(pools)), times)
        self._remember(times)
        observed = Observed(taken_at=now, nodes=nodes, pools=pool_obs, missing=sorted(missing),
                            unserved=scheduled.unserved, cluster_quotas=scheduled.quotas)
        return SignalsResult(observed, unattributed, sources, metrics.queries)

    def _with_absent(self, scheduled: _Scheduled, fleet: Mapping[str, Node],
                     pools: Mapping[str, Pool], now: datetime) -> dict[str, SchedulerNode]:
        """The schedulers' nodes, plus each READY fleet node its scheduler answered without
        (deleted from Kubernetes, forgotten by slurmctld): unusable since the first tick that
        found it missing. That time lives in this reader: a restart counts the grace again,
        later, never sooner."""
        out = dict(scheduled.nodes)
        absent: dict[str, datetime] = {}
        for name, node in fleet.items():
            pool = pools.get(node.pool_key)
            if node.state is not NodeState.READY or pool is None or name in out \
                    or pool.cluster.kind not in SCHEDULERS or node.pool_key in scheduled.pool_missing:
                continue
            absent[name] = since = self._absent_since.get(name, now)
            out[name] = SchedulerNode(state="unknown", ready=False, gpus_total=0, gpus_allocated=0,
                                      unusable=f"{pool.cluster.kind} does not list it",
                                      unusable_since=since)
        if absent.keys() - self._absent_since.keys():
            log.warning("READY nodes their scheduler does not list: %s",
                        ", ".join(sorted(absent.keys() - self._absent_since.keys())))
        self._absent_since = absent
        return out

    def _remember(self, times: Times) -> None:
        self._since_seen, self._pending_seen = times.since_seen, times.pending_seen
        if times.pending_refused and times.pending_refused != self._pending_refused:
            log.warning("%d pending job(s) without a believable submit time (none given, or "
                        "outside %s .. %s): each waits counted from the tick first seen pending",
                        times.pending_refused, times.earliest.isoformat(), times.latest.isoformat())
        self._pending_refused = times.pending_refused

    def _believable(self, nodes: dict[str, NodeObservation], bounds: NodeBounds,
                    times: Times) -> dict[str, NodeObservation]:
        """Each node's observation with what its type makes impossible replaced by the
        reason, and its scheduler's times made plausible (``bounds.py``); each new reason
        logged once, not once per tick."""
        refused: dict[str, str] = {}
        for name, obs in nodes.items():
            sched = obs.scheduler
            timed: tuple[str, ...] = ()
            if sched is not None:
                plausible, timed = times.scheduler(name, sched)
                if plausible is not sched:
                    obs = nodes[name] = dataclasses.replace(obs, scheduler=plausible)
            kept, why = checked(obs, bounds.of(name))
            if timed:
                why = [*why, "times not believed: " + ", ".join(timed)]
            if why:
                nodes[name] = kept
                refused[name] = "; ".join(why)
                if self._refused.get(name) != refused[name]:
                    log.warning("%s: data not believed: %s", name, refused[name])
        self._refused = refused
        return nodes

    def _schedulers(self, policies: Mapping[str, TeamPolicy]) -> _Scheduled:
        """Reads each scheduler some pool uses."""
        out = _Scheduled()
        for kind in SCHEDULERS:
            refs = pools_in_priority_order(policies, self.catalog, kind)
            if not refs:
                continue
            reading = self._scheduler(kind, refs)
            if reading.error is not None:
                out.missing.add(kind)
                out.sources[kind] = reading.error
                out.pool_missing.update({ref.key: reading.error for ref in refs})
                continue
            out.pending.update({ref.key: reading.pending.get(ref.key, []) for ref in refs})
            for name, sn in reading.nodes.items():
                out.nodes.setdefault(name, sn)
            out.unattributed[kind] = reading.unattributed
            out.unserved += reading.unserved
            out.quotas.update(reading.quotas)
            out.on_prem.update(reading.on_prem)
            out.sources[kind] = f"ok: {len(reading.nodes)} nodes via {reading.source}"
        return out

    def _metrics(self, node_pools: dict[str, Pool], pools: dict[str, Pool],
                 now: datetime) -> MetricsReading:
        if self.prometheus is None:
            return MetricsReading({}, error="prometheus is not configured (signals.prometheus)")
        try:
            return self.prometheus.read(node_pools, pools.values(), now,
                                        pool_of=by_name_prefix(pools))
        except Exception as exc:  # one source's bug must not blind the others
            log.exception("prometheus reader failed")
            return MetricsReading({}, error=f"prometheus reader failed: {type(exc).__name__}")

    def _scheduler(self, kind: str, refs: list[ClusterPool]) -> SchedulerReading:
        if kind not in self.config.scheduler:
            return SchedulerReading(error=f"{kind} is not configured (signals.scheduler)")
        try:
            if kind == "slurm":
                return self.slurm.read(refs)
            if self.kubernetes is None:
                return SchedulerReading(error="kubernetes is not configured (signals.kubernetes)")
            return self.kubernetes.read(refs)
        except Exception as exc:  # one source's bug must not blind the others
            log.exception("%s reader failed", kind)
            return SchedulerReading(error=f"{kind} reader failed: {type(exc).__name__}")


def by_name_prefix(pools: Mapping[str, Pool]) -> Callable[[str], Pool | None]:
    key_of = key_by_name_prefix(pools)

    def pool_of(host: str) -> Pool | None:
        key = key_of(host)
        return None if key is None else pools[key]

    return pool_of


def _with_health_checks(nodes: dict[str, NodeObservation],
                        fleet: Mapping[str, Node]) -> dict[str, NodeObservation]:
    """A READY node's failed periodic health check (the executor's, in its progress) as its
    ``health_check_failed``: positive evidence, acted on even when its metrics are missing."""
    for name, node in fleet.items():
        failed = node.progress.health.failed
        if failed and node.state is NodeState.READY:
            seen = nodes.get(name)
            nodes[name] = (dataclasses.replace(seen, health_check_failed=failed) if seen is not None
                           else NodeObservation(metrics_missing="no GPU metrics were read for it",
                                                health_check_failed=failed))
    return dict(sorted(nodes.items()))


def _merge_nodes(metrics: dict[str, NodeObservation], sched: dict[str, SchedulerNode],
                 missing: str) -> dict[str, NodeObservation]:
    """One observation per node: what Prometheus said of it (``missing`` when it said
    nothing) with what its scheduler said."""
    out = dict(metrics)
    for name, sn in sched.items():
        seen = out.get(name)
        if seen is None:
            out[name] = NodeObservation(metrics_missing=missing, scheduler=sn)
        else:
            out[name] = NodeObservation(metrics=seen.metrics, metrics_missing=seen.metrics_missing,
                                        metrics_silent=seen.metrics_silent,
                                        health_check_failed=seen.health_check_failed, scheduler=sn)
    return dict(sorted(out.items()))
