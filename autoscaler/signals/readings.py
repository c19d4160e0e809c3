"""What each source returns to the snapshot builder, and how demand finds its pool."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from autoscaler.catalog import Catalog, CatalogError
from autoscaler.model.snapshot import (
    ClusterQuota,
    OnPremNode,
    PendingJob,
    PoolOption,
    SchedulerNode,
    UnservedJob,
)
from autoscaler.policy.models import Pool, TeamPolicy, pool_key


@dataclass(frozen=True)
class SchedulerReading:
    """Slurm or Kubernetes view: node states and running jobs, pending demand per pool."""

    nodes: dict[str, SchedulerNode] = field(default_factory=dict)
    pending: dict[str, list[PendingJob]] = field(default_factory=dict)  # pool key -> jobs
    unattributed: list[PendingJob] = field(default_factory=list)  # no pool matches them
    unserved: list[UnservedJob] = field(default_factory=list)  # no pool's nodes could run them
    quotas: dict[str, ClusterQuota] = field(default_factory=dict)  # team -> cluster GPU limit
    on_prem: dict[str, list[OnPremNode]] = field(default_factory=dict)  # pool key -> in service
    error: str | None = None  # the whole source failed this tick
    source: str = ""  # "squeue --json", "squeue -o", "kubernetes api"


@dataclass(frozen=True)
class ClusterPool:
    key: str
    team: str
    pool: Pool
    gpu_models: frozenset[str]
    type_models: tuple[tuple[str, str], ...] = ()  # (instance type, GPU model), catalog's types
    group: str | None = None  # the team's placement group the pool is in


def pools_in_priority_order(policies: Mapping[str, TeamPolicy], catalog: Catalog,
                            kind: str) -> list[ClusterPool]:
    """Pools of ``cluster.kind == kind``: high priority first, then team name, file order."""
    out: list[ClusterPool] = []
    for policy in sorted(policies.values(), key=lambda p: (p.priority.rank, p.team)):
        for pool in policy.pools:
            if pool.cluster.kind != kind:
                continue
            types = []
            for name in pool.instance_types:
                try:
                    types.append((name, catalog.get(pool.cloud.value, name).gpu_model))
                except CatalogError:
                    continue  # the policy loader reports unknown types
            out.append(ClusterPool(pool_key(policy.team, pool.name), policy.team, pool,
                                   frozenset(m for _, m in types), tuple(types),
                                   policy.group_of(pool.name)))
    return out


def first_fitting(candidates: list[ClusterPool], gpu_model: str | None) -> ClusterPool | None:
    """The first pool whose GPU model fits the job; the first pool if none does (so the
    engine can report the job it cannot place), None if there are no candidates."""
    if not candidates:
        return None
    if gpu_model:
        for ref in candidates:
            if gpu_model in ref.gpu_models:
                return ref
    return candidates[0]


def group_options(home: ClusterPool, fitting: Iterable[tuple[ClusterPool, PoolOption]]
                  ) -> list[PoolOption]:
    """The pools of ``home``'s placement group among ``fitting`` (pools that can run the job,
    with its narrowing there), ``home`` first; empty when it is in no group or alone."""
    if home.group is None:
        return []
    out = [option for ref, option in fitting
           if ref.team == home.team and ref.group == home.group]
    out.sort(key=lambda o: o.pool != home.key)
    return out if len(out) > 1 else []


def key_by_name_prefix(keys: Iterable[str]) -> Callable[[str], str | None]:
    """``vision-v100-train-3`` -> ``vision/v100-train`` (longest matching prefix)."""
    prefixes = sorted(((key.replace("/", "-") + "-", key) for key in keys),
                      key=lambda item: -len(item[0]))

    def key_of(host: str) -> str | None:
        for prefix, key in prefixes:
            if host.startswith(prefix):
                return key
        return None

    return key_of
