"""Which pool each pending GPU pod is demand for, and which pods no pool can serve."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from autoscaler.catalog import Catalog
from autoscaler.model.snapshot import PendingJob, PoolOption, UnservedJob
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.schedulers.kubernetes.objects import (
    ZONE,
    Obj,
    PodNeeds,
    pod_gpu_requests,
    pod_needs,
    pvc_names,
    unschedulable,
)
from autoscaler.signals.kube_fit import POOL_LABEL, TEAM_LABEL, Fit, PoolShape, fit
from autoscaler.signals.readings import ClusterPool, group_options


@dataclass(frozen=True)
class Spread:
    """A hard topology spread over zones: ``maxSkew`` among pods matching ``match``."""

    max_skew: int
    match: dict[str, str]


@dataclass(frozen=True)
class PodRecord:
    key: str
    name: str
    namespace: str
    node: str | None
    pending: bool  # Pending and judged Unschedulable by the scheduler
    gpus: dict[str, float]
    labels: dict[str, str] = field(default_factory=dict)
    created_at: datetime | None = None
    started_at: datetime | None = None
    ends_at: datetime | None = None  # startTime + activeDeadlineSeconds, if it has one
    priority: int = 0
    needs: PodNeeds | None = None  # None: the spec of a running pod could not be read
    pvcs: tuple[str, ...] = ()
    spreads: tuple[Spread, ...] = ()


def _time(value: Any) -> datetime | None:
    """An API time; one without a zone is UTC, as the API server always means."""
    try:
        at = datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
    return at.replace(tzinfo=UTC) if at is not None and at.tzinfo is None else at


def _deadline(spec: Obj, status: Obj) -> datetime | None:
    """When the kubelet kills the pod (``activeDeadlineSeconds`` after it started); None
    past year 9999 (any positive int64 is legal: 10**12 s is 31,000 years, no deadline)."""
    started, seconds = _time(status.get("startTime")), spec.get("activeDeadlineSeconds")
    if started is None or not isinstance(seconds, int) or isinstance(seconds, bool) or seconds <= 0:
        return None
    try:
        return started + timedelta(seconds=seconds)
    except OverflowError:
        return None


def pod_record(obj: Obj) -> PodRecord | None:
    """The cache entry of a pod, None for pods without GPU requests."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    gpus = pod_gpu_requests(spec)
    if not gpus or not meta.get("name") or not meta.get("namespace"):
        return None
    pending = unschedulable(obj)
    needs: PodNeeds | None
    if pending:
        needs, pvcs = pod_needs(spec, gpus, None), tuple(pvc_names(spec))
    else:
        needs, pvcs = _placement(spec, gpus)
    spreads = tuple(Spread(int(c.get("maxSkew") or 1), dict((c.get("labelSelector") or {})
                                                            .get("matchLabels") or {}))
                    for c in spec.get("topologySpreadConstraints") or []
                    if c.get("topologyKey") == ZONE and c.get("whenUnsatisfiable") == "DoNotSchedule")
    return PodRecord(
        key=f"{meta['namespace']}/{meta['name']}", name=meta["name"], namespace=meta["namespace"],
        node=spec.get("nodeName") or None, pending=pending, gpus=gpus,
        labels=dict(meta.get("labels") or {}), created_at=_time(meta.get("creationTimestamp")),
        started_at=_time(status.get("startTime")), ends_at=_deadline(spec, status),
        priority=int(spec.get("priority") or 0),
        needs=needs, pvcs=pvcs, spreads=spreads if pending else ())


def _placement(spec: Obj, gpus: dict[str, float]) -> tuple[PodNeeds | None, tuple[str, ...]]:
    """A running pod's needs and volume claims, where its pools are read from: an odd spec
    leaves them unknown (the pod stays where it runs) rather than its GPUs and its node."""
    try:
        return pod_needs(spec, gpus, None), tuple(pvc_names(spec))
    except (AttributeError, TypeError, ValueError, KeyError):
        return None, ()


class Demand:
    """Collects pending pods of one tick: per pool, unattributed, unserved."""

    def __init__(self, cfg: KubernetesConfig, catalog: Catalog, refs: list[ClusterPool],
                 pvcs: dict[str, str | None], pvs: dict[str, frozenset[str] | None]):
        self.config = cfg
        self.refs = refs
        self.shapes = {ref.key: PoolShape.of(ref, catalog) for ref in refs}
        self._pvcs, self._pvs = pvcs, pvs
        self._pending: dict[str, list[PendingJob]] = {ref.key: [] for ref in refs}
        self.unattributed: list[PendingJob] = []
        self.unserved: list[UnservedJob] = []

    def shape_of_node(self, labels: dict[str, str]) -> PoolShape | None:
        team, pool = labels.get(TEAM_LABEL), labels.get(POOL_LABEL)
        return self.shapes.get(f"{team}/{pool}") if team and pool else None

    def team_of(self, namespace: str, labels: dict[str, str]) -> tuple[str, str | None]:
        team, pool = labels.get(TEAM_LABEL), labels.get(POOL_LABEL)
        if team is not None:
            return team, pool
        for rule in self.config.namespace_teams:
            if rule.matches(namespace):
                return rule.team, pool or rule.pool
        return namespace, pool

    def add(self, pod: PodRecord, spread_zones: frozenset[str] | None = None) -> None:
        needs = pod.needs
        if needs is None:
            return
        team, pool = self.team_of(pod.namespace, needs.labels)
        bad = sorted(name for name, amount in pod.gpus.items() if not math.isfinite(amount))
        if bad:  # "nan", "inf", "1e999": never a PendingJob, whose GPUs must be a number
            what = ", ".join(f"{name}={pod.gpus[name]:g}" for name in bad)
            self.unserved.append(UnservedJob(
                id=pod.key, team=team, constraint=f"GPU request {what}: not a number of GPUs",
                reason=f"its GPU request {what} is not a number of GPUs"))
            return
        candidates = [r for r in self.refs if r.team == team and (pool is None or r.pool.name == pool)]
        if not candidates:
            self.unattributed.append(PendingJob(
                id=pod.key, gpus=sum(pod.gpus.values()), reason="Unschedulable",
                submitted_at=pod.created_at, priority=pod.priority))
            return
        zones = self.volume_zones(pod)
        if spread_zones is not None:
            zones = spread_zones if zones is None else zones & spread_zones
        if zones is not None:
            needs = replace(needs, zones=zones)
        failures: list[tuple[ClusterPool, Fit]] = []
        for i, ref in enumerate(candidates):
            got = fit(needs, self.shapes[ref.key])
            if got.failed is None:
                options = group_options(ref, self._options(needs, ref, got, candidates[i + 1:]))
                self._pending[ref.key].append(PendingJob(
                    id=pod.key, gpus=got.gpus, reason="Unschedulable", submitted_at=pod.created_at,
                    gpu_model=got.gpu_model, priority=pod.priority,
                    zones=sorted(got.zones) if got.zones is not None else None,
                    instance_types=sorted(got.instance_types) if got.instance_types else None,
                    options=options))
                return
            failures.append((ref, got))
        self.unserved.append(UnservedJob(
            id=pod.key, team=team, constraint=str(failures[0][1].failed),
            reason="no pool's nodes could run it: "
                   + "; ".join(f"{ref.key}: {f.failed}" for ref, f in failures)))

    def _options(self, needs: PodNeeds, home: ClusterPool, got: Fit, later: list[ClusterPool]
                 ) -> Iterator[tuple[ClusterPool, PoolOption]]:
        """The pod's fit on ``home`` and on each later pool of its placement group."""
        if home.group is None:
            return
        yield home, _option(home, got)
        for ref, there in self._fitting(needs, [r for r in later if r.group == home.group], got.gpus):
            yield ref, _option(ref, there)

    def _fitting(self, needs: PodNeeds, refs: list[ClusterPool], gpus: float
                 ) -> Iterator[tuple[ClusterPool, Fit]]:
        """The pools of ``refs`` whose nodes could run the pod, as ``gpus`` GPUs there too."""
        for ref in refs:
            there = fit(needs, self.shapes[ref.key])
            if there.failed is None and math.isclose(there.gpus, gpus, rel_tol=1e-9, abs_tol=1e-9):
                yield ref, there

    def group_of(self, home: ClusterPool) -> list[ClusterPool]:
        """The pools of ``home``'s team and placement group, ``home`` among them (none: [])."""
        if home.group is None:
            return []
        return [r for r in self.refs if r.team == home.team and r.group == home.group]

    def running_pools(self, pod: PodRecord, home: ClusterPool, gpus: float) -> list[str] | None:
        """The pools of ``home``'s placement group a pod running on a node of ``home`` could
        run in (``RunningJob.pools``), by the fit a pending pod's options get: its
        nodeSelector, required node affinity, tolerations and bound volumes' zones against
        each pool's nodes, at the same GPUs. None: ``home`` is in no group. Topology spread
        is left out: where the pod may go again depends on where its peers run then. A spec
        that was not read keeps it where it runs."""
        group = self.group_of(home)
        if not group:
            return None
        if pod.needs is None:
            return [home.key]
        needs = pod.needs
        zones = self.volume_zones(pod)
        if zones is not None:
            needs = replace(needs, zones=zones)
        return [ref.key for ref, _ in self._fitting(needs, group, gpus)]

    def volume_zones(self, pod: PodRecord) -> frozenset[str] | None:
        """Zones every bound volume of the pod allows (None: unconstrained)."""
        zones: frozenset[str] | None = None
        for claim in pod.pvcs:
            volume = self._pvcs.get(f"{pod.namespace}/{claim}")
            allowed = self._pvs.get(f"/{volume}") if volume else None
            if allowed is not None:
                zones = allowed if zones is None else zones & allowed
        return zones

    def pending_by_pool(self) -> dict[str, list[PendingJob]]:
        """Higher PriorityClass first, then oldest first, within each pool."""
        far = datetime.max.replace(tzinfo=None)
        return {key: sorted(jobs, key=lambda j: (-j.priority, (j.submitted_at or far).replace(
            tzinfo=None), j.id)) for key, jobs in self._pending.items()}


def spread_zones(pod: PodRecord, running: list[PodRecord], node_zone: dict[str, str],
                 pool_zones: set[str]) -> frozenset[str] | None:
    """Zones where one more matching pod keeps every hard zone spread within maxSkew."""
    if not pod.spreads:
        return None
    zones = set(node_zone.values()) | pool_zones
    allowed = set(zones)
    for spread in pod.spreads:
        counts = dict.fromkeys(zones, 0)
        for other in running:
            zone = node_zone.get(other.node or "")
            if zone and other.namespace == pod.namespace and all(
                    other.labels.get(k) == v for k, v in spread.match.items()):
                counts[zone] = counts.get(zone, 0) + 1
        low = min(counts.values(), default=0)
        allowed &= {z for z, n in counts.items() if n + 1 - low <= spread.max_skew}
    return frozenset(allowed)


def _option(ref: ClusterPool, got: Fit) -> PoolOption:
    return PoolOption(pool=ref.key, zones=sorted(got.zones) if got.zones is not None else None,
                      instance_types=sorted(got.instance_types) if got.instance_types else None)
