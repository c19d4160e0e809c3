"""Which pools may serve a pending Slurm job: its partition, who submitted it, what it asks.

==========================  =======================================================
the job                     the pools that may serve it
==========================  =======================================================
partition P                 pools with ``cluster.partition: P`` (none: unattributed,
                            as before)
account, qos, user          of those, the pools whose ``cluster.accounts``, ``qos``
                            and ``users`` (each when set) all include the job's;
                            if none does, the open pools (no lists: they take what
                            no list claims); if there are none, unserved with each
                            pool's lists
``--constraint``            of those, the pools some node of which satisfies it
                            (none: unserved, with what each pool's nodes lack); the
                            job is told the instance types and zones that do
``--gres=gpu:<type>:N``     of those, the first whose GPU model fits (else the first)
``--gres=gpu:3g.40gb:N``,   of those, the first whose nodes offer the MIG profile or
``--gres=shard:N``          shards, at its share of a GPU (``slurm_gres.py``; none:
                            unserved, with what each pool offers)
==========================  =======================================================

A running job on a node of a placement-group pool is told the pools of that group the same
terms admit it to (``running_pools``): consolidation moves it only there.

A pool's nodes carry the Slurm features ``team-<team>``, ``pool-<pool>``,
``partition-<partition>``, the instance type, the market (``spot``, ``on-demand``), the zone
when the pool lists zones, and the GPU model in lower case (``t4``, ``a10g``). The engine has
no per-job market, so a market in a constraint narrows pools, not launches: a pool that
launches both markets serves a ``spot`` job and may buy it an on-demand node.

Accounts and QOS compare without case (sacctmgr stores them in lower case); users with it.
Every value squeue gives is checked against the policy's own patterns before it is compared
or written into a reason: squeue's text is the submitter's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.policy.syntax import SLURM_NAME, SLURM_USER
from autoscaler.schedulers.slurm.parse import (
    Constraint,
    ConstraintError,
    Gres,
    absent,
    gpu_model,
    parse_constraint,
)
from autoscaler.signals import slurm_gres
from autoscaler.signals.readings import ClusterPool

_NAME, _USER = re.compile(SLURM_NAME), re.compile(SLURM_USER)
NO_ZONES = "the pool lists no zones, so it cannot promise the zone of a new node"
SHOWN = 5  # names of a list a reason shows


@dataclass(frozen=True)
class Submission:
    """What a pending job was submitted with, checked; ``unreadable``: field -> why."""

    account: str | None = None
    qos: str | None = None
    user: str | None = None
    constraint: Constraint | None = None
    unreadable: tuple[tuple[str, str], ...] = ()

    @classmethod
    def read(cls, account: Any, qos: Any, user: Any, features: Any) -> Submission:
        bad: list[tuple[str, str]] = []
        names = [_checked(field, value, pattern, bad) for field, value, pattern in
                 (("account", account, _NAME), ("qos", qos, _NAME), ("user", user, _USER))]
        constraint = None
        if features is not None and not isinstance(features, str):
            bad.append(("constraint", f"not text ({type(features).__name__})"))
        else:
            try:
                constraint = parse_constraint(features)
            except ConstraintError as exc:
                bad.append(("constraint", str(exc)))
        return cls(names[0], names[1], names[2], constraint, tuple(bad))

    def said(self, field: str) -> str:
        value = {"account": self.account, "qos": self.qos, "user": self.user}[field]
        if field in dict(self.unreadable):
            return f"{field} (unreadable: {dict(self.unreadable)[field]})"
        return f"{field} {value}" if value is not None else f"{field} (none)"


def _checked(field: str, value: Any, pattern: re.Pattern[str],
             bad: list[tuple[str, str]]) -> str | None:
    if value is None or (isinstance(value, str) and absent(value)):
        return None
    if not isinstance(value, str):
        bad.append((field, f"not text ({type(value).__name__})"))
    elif not pattern.fullmatch(value):
        bad.append((field, f"not a Slurm name ({len(value)} characters)"))
    else:
        return value
    return None


@dataclass(frozen=True)
class Served:
    ref: ClusterPool
    instance_types: list[str] | None = None  # the constraint's types, None: any of the pool's
    zones: list[str] | None = None


@dataclass(frozen=True)
class Refused:
    team: str | None
    constraint: str  # "account physics", "constraint a100&spot": the first word is the kind
    reason: str


@dataclass(frozen=True)
class _Variant:
    itype: str
    zone: str | None
    features: frozenset[str]


@dataclass(frozen=True)
class PoolTerms:
    """One pool's lists (accounts and QOS in lower case) and its nodes' features: built
    once per read, not once per job."""

    ref: ClusterPool
    accounts: frozenset[str]
    qos: frozenset[str]
    users: frozenset[str]
    variants: tuple[_Variant, ...]  # one per (type, zone, market) the pool launches

    @classmethod
    def of(cls, ref: ClusterPool) -> PoolTerms:
        pool, c = ref.pool, ref.pool.cluster
        base = {f"team-{ref.team}", f"pool-{pool.name}", f"partition-{c.partition}"}
        variants = tuple(_Variant(name, zone, frozenset({*base, name, model.lower(), market.value}
                                                        | ({zone} if zone else set())))
                         for name, model in ref.type_models
                         for zone in list[str | None](pool.zones) or [None]
                         for market in pool.capacity.markets())
        return cls(ref, frozenset(a.lower() for a in c.accounts), frozenset(q.lower() for q in c.qos),
                   frozenset(c.users), variants)

    @property
    def claims(self) -> bool:
        return bool(self.accounts or self.qos or self.users)

    def takes(self, job: Submission) -> bool:
        return ((not self.accounts or (job.account or "").lower() in self.accounts)
                and (not self.qos or (job.qos or "").lower() in self.qos)
                and (not self.users or (job.user or "") in self.users))

    def lists(self) -> str:
        c = self.ref.pool.cluster
        shown = [f"{what} {_shown(names)}" for what, names in
                 (("accounts", c.accounts), ("qos", c.qos), ("users", c.users)) if names]
        return f"{self.ref.key}: {', '.join(shown)}"


def _shown(names: Sequence[str]) -> str:
    more = f" +{len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"[{', '.join(names[:SHOWN])}{more}]"


def claimants(job: Submission, candidates: list[PoolTerms],
              partitions: str) -> list[PoolTerms] | Refused:
    """The candidates whose lists take the job, else the open ones, else why none."""
    listed = [t for t in candidates if t.claims]
    taken = [t for t in listed if t.takes(job)]
    if taken:
        return taken
    open_pools = [t for t in candidates if not t.claims]
    if open_pools:
        return open_pools
    fields = [f for f, on in (("account", any(t.accounts for t in listed)),
                              ("qos", any(t.qos for t in listed)),
                              ("user", any(t.users for t in listed))) if on]
    who = ", ".join(job.said(f) for f in fields)
    plural = "s" if "," in partitions else ""
    return Refused(None, who, f"{who} matches no pool of partition{plural} {partitions} "
                              f"({'; '.join(t.lists() for t in listed)})")


def fit(constraint: Constraint, terms: PoolTerms) -> Served | str:
    """The pool with the types and zones its nodes satisfy ``constraint`` in, or why not.
    Served only when those are every fitting type in every fitting zone: the engine is
    told types and zones, not pairs of them."""
    ref, variants = terms.ref, terms.variants
    ok = [v for v in variants if constraint.admits(v.features)]
    if not ok:
        lacking = sorted(constraint.names() - {f for v in variants for f in v.features})
        if not lacking:
            return f"no node of it satisfies {constraint}"
        zone_like = any(n.startswith(ref.pool.region) for n in lacking)
        why = f"no node of it has {', '.join(lacking[:SHOWN])}"
        return f"{why}: {NO_ZONES}" if zone_like and not ref.pool.zones else why
    pairs = {(v.itype, v.zone) for v in ok}
    types, zones = {t for t, _ in pairs}, {z for _, z in pairs}
    if len(pairs) != len(types) * len(zones):
        return (f"only some of its (type, zone) pairs satisfy {constraint} and the pool may "
                "launch the others")
    all_types, all_zones = {v.itype for v in variants}, {v.zone for v in variants}
    return Served(ref, sorted(types) if types != all_types else None,
                  sorted(z for z in zones if z) if zones != all_zones else None)


def fitting(job: Submission, pools: list[PoolTerms]) -> list[Served] | Refused:
    """The pools some node of which can run the job (by its constraint), or why none."""
    teams = {t.ref.team for t in pools}
    team = next(iter(teams)) if len(teams) == 1 else None
    unreadable = dict(job.unreadable).get("constraint")
    if unreadable is not None:
        return Refused(team, f"constraint (unreadable: {unreadable})",
                       f"its constraint cannot be read ({unreadable}): no pool is known to fit it")
    if job.constraint is None:
        return [Served(t.ref) for t in pools]
    got = [(t, fit(job.constraint, t)) for t in pools]
    served = [s for _, s in got if isinstance(s, Served)]
    if served:
        return served
    return Refused(team, f"constraint {job.constraint}",
                   "no pool's nodes could run it: "
                   + "; ".join(f"{t.ref.key}: {why}" for t, why in got))


def admitted(job: Submission, partitions: str, by_partition: dict[str, list[PoolTerms]],
             rank: dict[str, int]) -> list[Served] | Refused:
    """The pools the job's partitions (comma-separated), account, qos, user and constraint
    admit, high priority (``rank``) first; none when its partitions are no pool's; or why
    none does."""
    candidates = [t for p in partitions.split(",") for t in by_partition.get(p, [])]
    if not candidates:
        return []
    candidates.sort(key=lambda t: rank[t.ref.key])
    claimed = claimants(job, candidates, partitions)
    return claimed if isinstance(claimed, Refused) else fitting(job, claimed)


def running_pools(job: Submission, partition: str, gpu_type: str | None, gres: Sequence[Gres],
                  home: ClusterPool, by_partition: dict[str, list[PoolTerms]],
                  rank: dict[str, int]) -> list[str] | None:
    """The pools of ``home``'s placement group a job running on a node of ``home`` could run
    in (``RunningJob.pools``), ``home`` first: those a pending job with its partition,
    account, qos, user, constraint and GPU type (or MIG/shard gres, at the same GPUs) could
    go to. None: ``home`` is in no group. A job those admit to no pool (its partition is no
    pool's, its constraint unreadable) stays where it runs: [home]."""
    if home.group is None:
        return None
    served = admitted(job, partition, by_partition, rank)
    if isinstance(served, Refused):
        return [home.key]
    model, share = gpu_model(gpu_type), slurm_gres.shared(gres)
    here = slurm_gres.gpus_on(home.pool, gres) if share else None
    others = [s.ref.key for s in served
              if s.ref.key != home.key and s.ref.team == home.team and s.ref.group == home.group
              and (not share or slurm_gres.gpus_on(s.ref.pool, gres) == here)
              and (share or not model or model in s.ref.gpu_models)]
    return [home.key, *others]
