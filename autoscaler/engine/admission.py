"""Whether a capacity request can be met, where, and at what price: pure, no I/O, no clock.

A request is demand with a deadline: each node set is placed in one of the team's pools
(by instance type, or by GPU model and GPUs per node), and the whole request must fit the
same limits as any scale-up: the pool's max_nodes, the team's quota (policy or cluster,
whichever is smaller) and the global caps. A request beyond them is refused with the
numbers, never queued forever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from autoscaler.catalog import Catalog
from autoscaler.catalog.catalog import InstanceType
from autoscaler.engine.quota import Allowance, team_gpu_cap
from autoscaler.engine.settings import EngineSettings
from autoscaler.model.node import Node
from autoscaler.model.request_spec import Condition, NodeSet, RequestView
from autoscaler.model.snapshot import ClusterQuota
from autoscaler.policy.models import Pool, Priority, TeamPolicy, pool_key


@dataclass(frozen=True)
class Placement:
    pool: str  # team/pool
    instance_type: str
    nodes: int
    gpus_per_node: int
    usd_per_node: float  # on-demand list price: a request is not put on spot

    def describe(self) -> str:
        return f"{self.nodes} x {self.instance_type} in pool {self.pool}"


@dataclass(frozen=True)
class Admission:
    ok: bool
    reason: str
    placements: tuple[Placement, ...] = ()
    tier: Priority | None = None  # the request's, defaulting to its team's priority
    # Refused for what the request asks, whatever the fleet holds: the body is at fault
    # (HTTP 422), not a limit that may have room later.
    invalid: bool = False

    @property
    def usd_per_hour(self) -> float:
        return sum(p.nodes * p.usd_per_node for p in self.placements)

    def preview(self) -> dict[str, object]:
        """The cost preview GET and dry_run show before anything is bought."""
        return {"ok": self.ok, "reason": self.reason,
                "tier": self.tier.value if self.tier else None,
                "hourly_usd_delta": round(self.usd_per_hour, 4),
                "add": [{"pool": p.pool, "instance_type": p.instance_type, "nodes": p.nodes,
                         "usd_per_node": p.usd_per_node} for p in self.placements]}


def _fits(itype: InstanceType, want: NodeSet) -> bool:
    if want.instance_type is not None:
        return itype.name == want.instance_type
    return (itype.gpu_model.lower() == (want.gpu_model or "").lower()
            and itype.gpus == want.gpus)


def _fitting(want: NodeSet, team: str, pool: Pool, catalog: Catalog) -> Placement | None:
    for name in pool.instance_types:
        if (pool.cloud.value, name) not in catalog:
            continue
        itype = catalog.get(pool.cloud.value, name)
        usd = catalog.price(pool.cloud.value, pool.region, name).on_demand_usd
        if _fits(itype, want) and usd is not None:
            return Placement(pool_key(team, pool.name), name, want.nodes, itype.gpus, usd)
    return None


def _place(want: NodeSet, policy: TeamPolicy, pools: list[Pool], catalog: Catalog
           ) -> tuple[Placement | None, str]:
    """The first pool that fits; when it is in a placement group, the group's pool that fits
    at the lowest on-demand $/GPU-h (a tie keeps the first), and the comparison in words."""
    fits = [(pool, placed) for pool in pools
            if (placed := _fitting(want, policy.team, pool, catalog)) is not None]
    if not fits:
        return None, ""
    first, placed = fits[0]
    group = policy.group_of(first.name)
    if group is None:
        return placed, ""
    same = [(pool, p) for pool, p in fits if policy.group_of(pool.name) == group and (
        not first.pin_region or (pool.cloud, pool.region) == (first.cloud, first.region))]
    if len(same) < 2:
        return placed, ""
    best_pool, best = min(same, key=lambda pp: pp[1].usd_per_node / pp[1].gpus_per_node)
    others = "; ".join(f"{p.pool} ({pool.region}) ${p.usd_per_node / p.gpus_per_node:.2f}/GPU-h"
                       for pool, p in same if p is not best)
    return best, (f" (placement group {group}: {best.pool} ({best_pool.region}) "
                  f"${best.usd_per_node / best.gpus_per_node:.2f}/GPU-h chosen over {others})")


def _holds(nodes: Iterable[Node], catalog: Catalog) -> tuple[dict[str, int], int, float]:
    """Nodes per pool, and the GPUs and on-demand $/h of every billable node."""
    per_pool: dict[str, int] = {}
    gpus, usd = 0, 0.0
    for node in nodes:
        key = pool_key(node.team, node.pool)
        per_pool[key] = per_pool.get(key, 0) + 1
        if (node.cloud, node.instance_type) in catalog:
            gpus += catalog.get(node.cloud, node.instance_type).gpus
            usd += catalog.price(node.cloud, node.region, node.instance_type).on_demand_usd or 0.0
    return per_pool, gpus, usd


def _sum(placements: Iterable[Placement]) -> tuple[int, float]:
    gpus, usd = 0, 0.0
    for p in placements:
        gpus += p.nodes * p.gpus_per_node
        usd += p.nodes * p.usd_per_node
    return gpus, usd


def _add(a: tuple[int, float], b: tuple[int, float]) -> tuple[int, float]:
    return a[0] + b[0], a[1] + b[1]


def admit(request: RequestView, policy: TeamPolicy | None, catalog: Catalog,
          fleet: list[Node], settings: EngineSettings,
          cluster_quotas: Mapping[str, ClusterQuota] | None = None,
          booked: Iterable[Placement] = (), now: datetime | None = None) -> Admission:
    """Place every node set and check every limit; the reason names the request.

    ``booked``: placements of requests accepted but not provisioned yet (their nodes are
    not in ``fleet``): they count against the limits, or two requests could share a quota.
    ``now``: the moment of admission; None is the request's creation (it is admitted as it
    is made)."""
    label = request.label()
    now = request.created_at if now is None else now
    valid_until = request.spec.valid_until
    if valid_until is not None and valid_until <= now:
        # Accepted, its nodes would be bought and rolled back at the next tick.
        return Admission(False, f"{label} refused: valid_until {valid_until.isoformat()} is "
                                f"not after now ({now.isoformat()})", invalid=True)
    if policy is None:
        return Admission(False, f"{label} refused: team {request.team} has no policy")
    tier = request.spec.tier or policy.priority
    if tier.rank < policy.priority.rank:
        # A pipeline cannot buy itself a place ahead of its team under contention.
        return Admission(False, f"{label} refused: tier {tier.value} is above team "
                                f"{request.team}'s priority {policy.priority.value}", tier=tier)
    pools = [p for p in policy.pools if request.spec.pool in (None, p.name)]
    if not pools:
        return Admission(False, f"{label} refused: team {request.team} has no pool "
                                f"{request.spec.pool}")
    placements = []
    compared = ""
    for want in request.spec.node_sets:
        placed, why = _place(want, policy, pools, catalog)
        compared += why
        if placed is None:
            kind = want.instance_type or f"{want.gpu_model} with {want.gpus} GPUs per node"
            return Admission(False, f"{label} refused: no pool of team {request.team} offers "
                                    f"{kind} at a known price")
        placements.append(placed)
    refusal = _limits(request, policy, placements, fleet, catalog, settings, cluster_quotas,
                      list(booked))
    if refusal:
        return Admission(False, f"{label} refused: {refusal}", tuple(placements), tier)
    admission = Admission(True, "", tuple(placements))
    where = ", ".join(p.describe() for p in placements)
    return Admission(True, f"{label} accepted: {where}, +${admission.usd_per_hour:.2f}/h "
                           f"on-demand{compared}", tuple(placements), tier)


def _limits(request: RequestView, policy: TeamPolicy, placements: list[Placement],
            fleet: list[Node], catalog: Catalog, settings: EngineSettings,
            cluster_quotas: Mapping[str, ClusterQuota] | None,
            booked: list[Placement]) -> str | None:
    per_pool, _, _ = _holds(fleet, catalog)
    for placed in placements:
        pool = policy.pool(placed.pool.partition("/")[2])
        have = per_pool.get(placed.pool, 0) + sum(
            p.nodes for p in [*booked, *placements] if p.pool == placed.pool and p is not placed)
        if have + placed.nodes > pool.max_nodes:
            return (f"pool {placed.pool} max_nodes {pool.max_nodes} (holds {have}, "
                    f"+{placed.nodes} would exceed)")
    gpus, usd = _sum(placements)
    team = request.team + "/"
    _, team_gpus, team_usd = _holds((n for n in fleet if n.team == request.team), catalog)
    team_gpus, team_usd = _add((team_gpus, team_usd),
                               _sum([p for p in booked if p.pool.startswith(team)]))
    cap_label, cap = team_gpu_cap(request.team, policy, cluster_quotas or {})
    _, all_gpus, all_usd = _holds(fleet, catalog)
    all_gpus, all_usd = _add((all_gpus, all_usd), _sum(booked))
    for allowance in (
        Allowance(cap_label, cap, policy.quota.max_hourly_usd, team_gpus, team_usd),
        Allowance("global", settings.max_gpus, settings.max_hourly_usd, all_gpus, all_usd),
    ):
        if not allowance.fits(gpus, usd):
            return allowance.why_full(gpus, usd)
    return None


def booked(requests: Iterable[RequestView], policies: Mapping[str, TeamPolicy],
           catalog: Catalog, fleet: Iterable[Node] = ()) -> list[Placement]:
    """Where the Accepted requests will go, to count them against limits: what is not in
    ``fleet`` yet. An Accepted request stays Accepted until its nodes are READY, and its
    nodes are made one by one: the ones made are in the fleet and count there, so they are
    taken off its placements (counted twice, a second request that fits was refused)."""
    made: dict[tuple[str, str], int] = {}  # (request, pool) -> its live nodes
    for node in fleet:
        if node.progress.request is not None:
            key = (node.progress.request, pool_key(node.team, node.pool))
            made[key] = made.get(key, 0) + 1
    out: list[Placement] = []
    for r in requests:
        policy = policies.get(r.team)
        if r.condition is not Condition.ACCEPTED or policy is None:
            continue
        pools = [p for p in policy.pools if r.spec.pool in (None, p.name)]
        for s in r.spec.node_sets:
            placed = _place(s, policy, pools, catalog)[0]
            if placed is None:
                continue
            there = min(made.get((r.id, placed.pool), 0), placed.nodes)
            if there:
                made[(r.id, placed.pool)] -= there
                if there == placed.nodes:
                    continue
                placed = replace(placed, nodes=placed.nodes - there)
            out.append(placed)
    return out


__all__ = ["Admission", "Placement", "admit", "booked"]
