"""Consolidation across the pools of a placement group (consolidate.py's ``elsewhere``).

A pool of a placement group consolidates like any pool first: a fragmented node whose jobs
fit on free GPUs of its own pool is drained. When they do not fit there, the group's other
pools are tried, before a cheaper instance type of its own pool, the way Karpenter's
consolidation prefers deleting a node to replacing it:

1. **Delete.** Every job fits, first-fit-decreasing, on free GPUs of serving nodes of the
   other pools that have the node's GPU model (room counted as consolidation counts it in a
   pool): the node drains. Its requeued jobs are listed under their pool again, and the
   placement step puts them on that room (capacity already there wins).
2. **Replace, make-before-break.** A node of the same market and GPU model in another pool
   holds all its jobs and costs less per hour than the node and than the cheapest
   replacement its own pool offers: it is launched there (trigger ``consolidate-move``,
   ``replaces`` the node). The node keeps serving until that replacement is READY, then
   drains (``finish``), as the return to spot moves a node across the group.

Which pools may take the work: the group's other pools of the same cluster kind (decide's
mates), not on a cloud the team forbids, with their scale-down data read (nothing moves on
absence of evidence), and, for a node of a ``pin_region`` pool, only those in its cloud and
region. Free room of a pool with pending demand is left to that demand. A replacement needs
room under the target's ``max_nodes`` and the team quota, and its spot offers keep the
target's zone spread.

Which pools may take each job: a running job may carry the pools of its group it may run in
(``RunningJob.pools``: signals read them from its node selectors and affinity, or its
partition and constraint, as for a pending job's options). Its jobs move only onto free GPUs
of their own lists' pools, and a replacement goes only to a pool in every job's list. The
list comes from a snapshot, which is untrusted (engine/pins.py, shared with the return to
spot): entries naming pools outside the node's team and group are ignored (a list of only
those pins the job to nothing: it stays). When
a pin alone refuses a move, the reason says which job may run where (the pool's own
cheaper type, if any, still replaces the node; otherwise a Hold says so).

Budgets: the drain is the old node's own pool's, on its budget (the pool shrinks, so its
floor counts too); a replacement still booting counts as a drain to come. Consolidation's
load check holds on both sides: the old pool without the node's load, and a pool that
takes its jobs on free room with that load added (an unknown load counts as a full node).
What one move fills this tick is no room for the next (``FreeRoom``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain

from autoscaler.engine import pins
from autoscaler.engine.binpack import EPS, Bin, LazyBins
from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Offer, Prices
from autoscaler.engine.scale_down.budget import Budget, drain_replaced
from autoscaler.engine.scale_down.consolidate import _free_bin, _hosts
from autoscaler.engine.scale_down.order import per_gpu
from autoscaler.engine.spread import ZoneSpread
from autoscaler.model.node import Node
from autoscaler.model.plan import Action, Drain, Hold, Launch
from autoscaler.model.snapshot import RunningJob, SchedulerNode
from autoscaler.policy.models import Market, pool_key

TRIGGER = "consolidate-move"
FULL_LOAD = 100.0  # GPU util % of a node whose load is unknown, where more load is the risk


@dataclass(slots=True)
class Mate:
    """Another pool of the group, as decide() has it this tick."""

    ctx: PoolContext
    budget: Budget  # what its own rules already take this tick
    room: int  # nodes it may still add under max_nodes
    wanted: bool  # its own pending jobs want its free GPUs this tick


@dataclass(slots=True)
class FreeRoom:
    """Free GPUs of group pools' serving nodes, shared by every pool's consolidation this
    tick: room one move fills is no room for the next."""

    prices: Prices
    bins: dict[str, Bin] = field(default_factory=dict)  # by node name, built when first read
    load: dict[str, float] = field(default_factory=dict)  # util % moved into a pool, by key
    received: set[str] = field(default_factory=set)  # nodes jobs were moved onto this tick

    def of(self, mate: Mate, model: str, moving: set[str]) -> Iterator[Bin]:
        ctx = mate.ctx
        sick = {n.name for n, _ in ctx.sick}
        for node in ctx.free:
            if node.name in mate.budget.taken or node.name in sick or node.name in moving:
                continue
            sched = ctx.observation(node).scheduler
            if sched is None or sched.cordoned or not sched.places_jobs:
                continue
            b = self.bin(node, self.prices.node_gpus(node), sched)
            if b.gpu_model == model and b.free:
                yield b

    def bin(self, node: Node, total: int, sched: SchedulerNode) -> Bin:
        b = self.bins.get(node.name)
        if b is None:
            b = self.bins[node.name] = _free_bin(node, total, sched.jobs, sched.gpus_allocated)
            b.gpu_model = self.prices.gpu_model(node)
        return b

    def take(self, filled: dict[str, Bin]) -> None:
        self.bins.update(filled)
        self.received.update(filled)


class Elsewhere:
    """consolidate.Elsewhere for one pool: its group's other pools this tick."""

    def __init__(self, ctx: PoolContext, mates: Iterable[Mate], prices: Prices, room: FreeRoom,
                 admit: Callable[[int, float], str | None]):
        self.ctx, self.prices, self.room, self.admit = ctx, prices, room, admit
        mates = list(mates)
        pool, forbidden = ctx.pool, set(ctx.policy.forbid_clouds)
        self.group = frozenset({ctx.key, *(m.ctx.key for m in mates)})  # what a pin may name
        self.pinned: dict[str, str] = {}  # node -> why a pin refused its move this tick
        self.mates = [m for m in mates if m.ctx.data_missing is None
                      and m.ctx.pool.cloud not in forbidden
                      and (not pool.pin_region
                           or (m.ctx.pool.cloud, m.ctx.pool.region) == (pool.cloud, pool.region))]
        # Replacements on their way or READY, in any pool of the group: their nodes leave.
        pools = [ctx, *(m.ctx for m in mates)]
        self._moving = {n.replaces for c in pools for n in chain(c.in_flight, c.serving)
                        if n.launched_for == TRIGGER and n.replaces}
        own = {n.name for n in ctx.serving}
        self.booting = sum(n.launched_for == TRIGGER and n.replaces in own
                           for c in pools for n in c.in_flight)

    def moving(self, node: Node) -> bool:
        return node.name in self._moving

    def received(self, node: Node) -> bool:
        return node.name in self.room.received

    def refused(self, node: Node) -> str | None:
        return self.pinned.get(node.name)

    def home(self, node: Node, total: int, sched: SchedulerNode) -> Bin:
        return self.room.bin(node, total, sched)

    def placed(self, jobs: list[RunningJob], homes: list[Bin]) -> None:
        filled = _place(jobs, homes)
        if filled is not None:
            self.room.take(filled)

    def drain(self, node: Node, jobs: list[RunningJob], budget: Budget, why: str,
              then: str) -> Action | None:
        takers = [m for m in self.mates if not m.wanted]
        if not takers or not self._may_leave(node, budget):
            return None
        model = self.prices.gpu_model(node)
        bins = LazyBins(chain.from_iterable(self.room.of(m, model, self._moving) for m in takers))
        allowed = pins.allowed(jobs, self.group)
        filled = _place(jobs, bins, allowed)
        if filled is None:
            unpinned = _place(jobs, bins) if any(a is not None for a in allowed) else None
            if unpinned is not None:
                pools = sorted({pool_key(b.node.team, b.node.pool) for b in unpinned.values() if b.node})
                self.pinned[node.name] = (
                    f"its jobs would fit on free GPUs of {', '.join(pools)} of its placement "
                    f"group, but the move is refused for a pin: {pins.said(jobs, allowed)}")
            return None
        load = _load(self.ctx, node, FULL_LOAD)
        by_key = {m.ctx.key: m for m in takers}
        into = sorted({pool_key(b.node.team, b.node.pool) for b in filled.values() if b.node})
        for key in into:
            c = by_key[key].ctx
            if len(c.serving) - len(by_key[key].budget.taken) < c.nodes_for(
                    c.util_sum + self.room.load.get(key, 0.0) + load):
                return None  # its utilization rule would launch for the load moved in
        free = sum(self.room.bins[name].whole_free() for name in filled)
        hosts = [self.room.bins[name] for name in filled]
        there = sum(per_gpu(self.prices, b.node) for b in hosts if b.node) / len(hosts)
        budget.shrink(node)
        self.room.take(filled)
        for key in into:
            self.room.load[key] = self.room.load.get(key, 0.0) + load
        work = sum(j.gpus for j in jobs)
        return Drain(pool=self.ctx.key, node=node.name, trigger="consolidate", reason=(
            f"{why}; its {len(jobs)} job(s), {work:g} GPUs of work, fit on free GPUs of "
            f"{', '.join(into)} of its placement group ({', '.join(sorted(filled))}: {free} "
            f"GPUs free); {self.ctx.key} {node.instance_type} {node.market.value} "
            f"${per_gpu(self.prices, node):.2f}/GPU-h -> {', '.join(into)} ${there:.2f}/GPU-h "
            f"(already paid for); {then}"))

    def replace(self, node: Node, jobs: list[RunningJob], here: Offer | None, budget: Budget,
                why: str, then: str) -> Action | None:
        ctx = self.ctx
        if node.fallback_from_spot and ctx.pool.capacity.return_to_spot is not None:
            return None  # the return to spot moves it, to spot (see consolidate._cheaper_home)
        if not self.mates or not self._may_leave(node, budget):
            return None
        allowed = pins.allowed(jobs, self.group)
        free = [m for m in self.mates if pins.admits(allowed, m.ctx.key)]
        found = self._cheapest(free, node, jobs, here)
        if found is None:
            barred = [m for m in self.mates if m not in free]
            if barred and (there := self._cheapest(barred, node, jobs, here)) is not None:
                self.pinned.setdefault(node.name, (
                    f"a cheaper node in {there[0].ctx.key} ({there[1].describe()}) would hold its "
                    f"jobs, but the move is refused for a pin: {pins.said(jobs, allowed)}"))
            return None
        mate, offer = found
        now_usd = self.prices.node_hourly(node)
        target = f"{mate.ctx.key} ({mate.ctx.pool.cloud.value} {mate.ctx.pool.region})"
        refused = self.admit(offer.gpus, offer.hourly_usd)
        if refused is not None:
            return Hold(pool=ctx.key, what="scale-down", reason=(
                f"{why}; {offer.describe()} in {target} would cost less, but the replacement "
                f"is refused by {refused}"))
        budget.shrink(node)
        pinned = self.pinned.get(node.name)
        own = f" (its own pool's cheapest: {here.describe()})" if here is not None else ""
        own += f"; {pinned}" if pinned else ""  # free GPUs there, but not of its pools
        return Launch(
            pool=mate.ctx.key, instance_type=offer.instance_type, market=offer.market,
            zone=offer.zone, count=1, gpus_per_node=offer.gpus, hourly_usd=offer.hourly_usd,
            trigger=TRIGGER, replaces=[node.name], reason=(
                f"{why}; its {len(jobs)} job(s), {sum(j.gpus for j in jobs):g} GPUs of work, fit "
                f"on no free GPUs of its placement group{' they may use' if pinned else ''}, but "
                f"on a cheaper node in {target}: "
                f"{ctx.key} {node.instance_type} {node.market.value} ${now_usd:.2f}/h "
                f"(${per_gpu(self.prices, node):.2f}/GPU-h) -> {mate.ctx.key} {offer.describe()}, "
                f"saves ${now_usd - offer.hourly_usd:.2f}/h{own}; launching it, {node.name} "
                f"drains once it is READY; {then}"))

    def _cheapest(self, mates: list[Mate], node: Node, jobs: list[RunningJob], here: Offer | None
                  ) -> tuple[Mate, Offer] | None:
        """The cheapest offer of one of ``mates`` (same market and GPU model) that holds all
        ``jobs`` and costs less per hour than ``node`` and than ``here``."""
        ceiling = min(self.prices.node_hourly(node), here.hourly_usd if here else math.inf) - 1e-9
        model = self.prices.gpu_model(node) or None
        best: tuple[tuple[float, int, str, str], Mate, Offer] | None = None
        for i, mate in enumerate(mates):
            if mate.room <= 0:
                continue
            c = mate.ctx
            offers, _ = self.prices.offers(c.pool, node.market, max(j.gpus for j in jobs), model)
            if node.market is Market.SPOT:
                offers, _ = ZoneSpread(c.pool, chain(c.serving, c.in_flight), c.interrupted).keep(offers)
            for o in offers:
                rank = (o.hourly_usd, i, o.instance_type, o.zone or "")
                if (o.hourly_usd < ceiling and (best is None or rank < best[0])
                        and _hosts(jobs, [Bin.empty(o.gpus, node=node)]) is not None):
                    best = (rank, mate, o)
        return None if best is None else (best[1], best[2])

    def _may_leave(self, node: Node, budget: Budget) -> bool:
        """The old pool's budget and floor allow one more node to leave (replacements still
        booting are drains to come), and without the node and its load the pool stays under
        its scale-up threshold (an unknown load stays in the pool)."""
        ctx = self.ctx
        if not budget.can_shrink(node) or budget.concurrent - self.booting <= 0:
            return False
        rest = max(0.0, ctx.util_sum - _load(ctx, node, 0.0))
        return len(ctx.serving) - len(budget.taken) - 1 >= ctx.nodes_for(rest)


def finish(ctx: PoolContext, budgets: dict[str, Budget], mates: Iterable[PoolContext]) -> list[Action]:
    """Drain each node of another pool of the group whose ``consolidate-move`` replacement
    serves here (READY), on the old node's own pool's budget."""
    arrived = [n for n in ctx.serving if n.launched_for == TRIGGER and n.replaces]
    if not arrived:
        return []
    out: list[Action] = []
    group = {n.name: (c, n) for c in mates for n in c.serving}
    for new in arrived:
        found = group.get(new.replaces or "")
        if found is None:
            continue
        home, old = found
        budget = budgets[home.key]
        if old.name in budget.taken:
            continue
        why = (f"{home.key}: {new.name} of {ctx.key} ({new.instance_type} {new.market.value} in "
               f"{new.zone or ctx.pool.region}) is READY in place of {old.name}, which "
               "consolidation moves there")
        out.append(drain_replaced(
            home, old, budget, why, "consolidate",
            f": its jobs get {home.pool.scale_down.checkpoint_signal} and restart on {new.name}"))
    return out


def _place(jobs: list[RunningJob], bins: Iterable[Bin],
           allowed: list[pins.Allowed] | None = None) -> dict[str, Bin] | None:
    """First-fit-decreasing of ``jobs`` over ``bins`` on copies: the filled copies by node
    name, or None if one job does not fit (the bins stay as they are). ``allowed``: per
    job, the pools whose bins it may take (None: any)."""
    copies: dict[str, Bin] = {}
    for i, job in enumerate(jobs):
        pools = allowed[i] if allowed is not None else None
        for b in bins:
            if b.node is None:
                continue
            if pools is not None and pool_key(b.node.team, b.node.pool) not in pools:
                continue
            mine = copies.get(b.node.name, b)
            if mine.fits(job.gpus):
                if mine is b:
                    mine = copies[b.node.name] = Bin(free=list(b.free), node=b.node,
                                                     gpu_model=b.gpu_model)
                mine.place(job.id, job.gpus)
                break
        else:
            return None
    return copies


def _load(ctx: PoolContext, node: Node, unknown: float) -> float:
    """The node's GPU util % (mean over the scale-up window), ``unknown`` without fresh metrics."""
    obs = ctx.observation(node)
    if obs.metrics is None or obs.metrics_missing or obs.metrics.util_mean is None:
        return unknown
    return obs.metrics.util_mean if obs.metrics.util_mean >= -EPS else unknown
