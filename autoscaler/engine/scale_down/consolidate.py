"""Consolidation (opt-in ``scale_down.consolidate_below``): empty a fragmented node on purpose.

Jobs end at different times, so a fleet of long jobs drifts into many nodes each holding
one or two GPUs' worth of work; none ever becomes idle. Like the Cluster Autoscaler's
under-utilized scale-down and Karpenter's consolidation, a node whose allocated share of
GPUs is below the threshold is drained when every job on it fits on the free GPUs of the
pool's other serving nodes. When they fit nowhere else but on a cheaper instance type of
the pool, the node is replaced by that one instead (Karpenter's replace consolidation). The
drain signals the jobs at once and requeues them after ``checkpoint_grace``, so they lose
only what they had not checkpointed.

Guards: the node and every job on it have been there for ``idle_for`` (fresh placements
are left to settle); one node per pool per tick (a restart is never a surprise to many
jobs at once); the same floor, budget and cooldown as idle scale-down. Free room is
counted conservatively from what the scheduler lists: a job share may sit on its own GPU,
so only GPUs no job can be on count as free.

A pool of a placement group also looks at the group's other pools (``elsewhere``, see
consolidate_group.py): after its own free GPUs and before a cheaper type of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from autoscaler.engine.binpack import EPS, Bin, LazyBins
from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Offer, Prices
from autoscaler.engine.scale_down.budget import Budget
from autoscaler.engine.scale_down.order import per_gpu, removal_order
from autoscaler.engine.scarcity import keeps
from autoscaler.model.bounds import SKEW
from autoscaler.model.node import Node
from autoscaler.model.plan import Action, Drain, Hold, Replace
from autoscaler.model.snapshot import RunningJob, SchedulerNode
from autoscaler.policy.duration import format_duration


class Elsewhere(Protocol):
    """The other pools of a placement group, as consolidation may use them."""

    def moving(self, node: Node) -> bool:
        """Whether a replacement of ``node`` in another pool is on its way or READY."""
        ...

    def received(self, node: Node) -> bool:
        """Whether jobs were moved onto ``node`` this tick (it is no candidate then)."""
        ...

    def refused(self, node: Node) -> str | None:
        """Why a move of ``node``'s jobs to another pool was refused for a job's pin."""
        ...

    def home(self, node: Node, total: int, sched: SchedulerNode) -> Bin:
        """The node's free room, shared by the pools of the group this tick."""
        ...

    def placed(self, jobs: list[RunningJob], homes: list[Bin]) -> None:
        """``jobs`` move onto ``homes`` of the pool itself: their room is taken."""
        ...

    def drain(self, node: Node, jobs: list[RunningJob], budget: Budget, why: str,
              then: str) -> Action | None:
        """The node's drain if its jobs fit on free GPUs of the other pools."""
        ...

    def replace(self, node: Node, jobs: list[RunningJob], here: Offer | None, budget: Budget,
                why: str, then: str) -> Action | None:
        """A cheaper node for its jobs in another pool (cheaper than ``here`` too)."""
        ...


def _free_bin(node: Node, total: int, jobs: list[RunningJob], allocated: float) -> Bin:
    if not all(0 <= g < math.inf for g in (allocated, *(j.gpus for j in jobs))):
        return Bin(free=[], node=node)  # what is in use is unknown: no room to move jobs to
    taken = max(sum(math.ceil(j.gpus - EPS) for j in jobs), math.ceil(allocated - EPS))
    return Bin(free=[1.0] * max(0, total - taken), node=node)


def candidates(ctx: PoolContext, prices: Prices, now: datetime, budget: Budget,
               elsewhere: Elsewhere | None = None) -> list[Action]:
    sd = ctx.pool.scale_down
    below = sd.consolidate_below
    if below is None:
        return []
    settled = now - sd.idle_for
    fragmented: dict[Node, tuple[int, float, list[RunningJob]]] = {}  # GPUs, % allocated, jobs
    homes: list[tuple[Node, int, SchedulerNode]] = []
    # Nodes leaving this tick or due for replacement are no home for moved jobs.
    leaving = set(budget.taken) | {n.name for n, _ in ctx.sick}
    observed, gpus_of = ctx.node_obs, prices.node_gpus  # bound once: read for every serving node
    for node in ctx.serving:
        obs = observed.get(node.name)
        sched = obs.scheduler if obs is not None else None
        if sched is None or sched.cordoned or not sched.places_jobs or node.name in leaving:
            continue
        if elsewhere is not None and elsewhere.moving(node):
            continue  # it leaves once its replacement in another pool is READY
        total = gpus_of(node)
        share = 100 * sched.gpus_allocated / total if total else 100.0
        if (sched.jobs and share < below
                and node.ready_at is not None and node.ready_at <= settled
                and all(j.gpus > 0 and j.started_at is not None
                        # A start before the node is unknown; SKEW: the scheduler's clock
                        # and whole seconds (engine/survey.py).
                        and node.created_at - SKEW <= j.started_at <= settled
                        for j in sched.jobs)
                and (elsewhere is None or not elsewhere.received(node))
                and not keeps(ctx, node)):
            fragmented[node] = (total, share, sorted(sched.jobs, key=lambda j: (-j.gpus, j.id)))
        homes.append((node, total, sched))
    if not fragmented:
        return []
    # The free room of each home, in the serving order, built only as far as the jobs'
    # first-fit searches reach: a few jobs usually fit on the first few of thousands.
    room = LazyBins(_free_bin(node, total, sched.jobs, sched.gpus_allocated) if elsewhere is None
                    else elsewhere.home(node, total, sched) for node, total, sched in homes)
    can_drain = _load_fits_without_one(ctx, budget)
    held: list[Action] = []  # nodes a job's pin kept from moving to another pool
    for node in removal_order(ctx, prices, fragmented):
        if not budget.can_swap(node):
            return held
        total, share, jobs = fragmented[node]
        why = (f"{ctx.key}: consolidating {node.name}: {share * total / 100:g} of {total} GPUs "
               f"allocated ({share:.0f}% < {below:g}%), no job started there for "
               f"{format_duration(sd.idle_for)}")
        then = (f"jobs get {sd.checkpoint_signal} and are requeued after "
                f"{format_duration(sd.checkpoint_grace)}")
        hosts = _hosts(jobs, room, without=node)
        if hosts is not None and can_drain and budget.can_shrink(node):
            budget.shrink(node)
            if elsewhere is not None:
                elsewhere.placed(jobs, [b for b in room if b.node is not node])
            return [*held, Drain(
                pool=ctx.key, node=node.name, trigger="consolidate",
                reason=(f"{why}; its {len(jobs)} job(s) fit on free GPUs of {', '.join(hosts)}; "
                        f"{node.instance_type} {node.market.value} at "
                        f"${per_gpu(prices, node):.3f}/GPU-h; {then}"),
            )]
        if elsewhere is not None and (moved := elsewhere.drain(node, jobs, budget, why, then)) is not None:
            return [*held, moved]
        smaller = _cheaper_home(ctx, prices, node, jobs)
        if (elsewhere is not None
                and (moved := elsewhere.replace(node, jobs, smaller, budget, why, then)) is not None):
            return [*held, moved]
        pinned = elsewhere.refused(node) if elsewhere is not None else None
        if smaller is not None:
            budget.swap(node)
            not_moved = f"; not moved to another pool of its group: {pinned}" if pinned else ""
            return [*held, Replace(
                pool=ctx.key, node=node.name, instance_type=smaller.instance_type,
                market=smaller.market, zone=smaller.zone, trigger="consolidate",
                reason=(f"{why}; its {len(jobs)} job(s) fit on one {smaller.describe()} instead of "
                        f"{node.instance_type} at ${prices.node_hourly(node):.2f}/h{not_moved}; {then}"),
            )]
        if pinned:
            held.append(Hold(pool=ctx.key, what="scale-down", reason=f"{why}; {pinned}"))
    return held


def _cheaper_home(ctx: PoolContext, prices: Prices, node: Node, jobs: list[RunningJob]) -> Offer | None:
    """The cheapest offer (same market, same GPU model) that holds all ``jobs`` and costs
    less per hour than ``node``: Karpenter's replace consolidation. None for a fallback
    on-demand node the return to spot may move: its on-demand replacement would not be
    marked as a fallback and would stay on-demand for good (the move saves more)."""
    if node.fallback_from_spot and ctx.pool.capacity.return_to_spot is not None:
        return None
    offers, _ = prices.offers(ctx.pool, node.market, max(j.gpus for j in jobs),
                              prices.gpu_model(node) or None)
    now_usd = prices.node_hourly(node)
    fitting = [o for o in offers if o.hourly_usd < now_usd - 1e-9
               and _hosts(jobs, [Bin.empty(o.gpus, node=node)]) is not None]
    return min(fitting, key=lambda o: (o.hourly_usd, o.instance_type, o.zone or ""), default=None)


def _hosts(jobs: list[RunningJob], others: Iterable[Bin], without: Node | None = None) -> list[str] | None:
    """The nodes that would take ``jobs`` (first-fit-decreasing over ``others``, skipping
    ``without``'s bin), or None if one does not fit. ``others`` stay as they are: a bin is
    copied when the first job lands on it, so a trial costs the bins it reaches, not a copy
    of every bin of the pool."""
    copies: dict[int, Bin] = {}  # by id() of the original bin, which ``others`` keeps alive
    hosts: set[str] = set()
    for job in jobs:
        for b in others:
            if without is not None and b.node is without:
                continue
            mine = copies.get(id(b))
            if (mine or b).fits(job.gpus):
                if mine is None:
                    mine = copies[id(b)] = Bin(free=list(b.free), node=b.node)
                break
        else:
            return None
        if mine.node is None:
            return None
        mine.place(job.id, job.gpus)
        hosts.add(mine.node.name)
    return sorted(hosts)


def _load_fits_without_one(ctx: PoolContext, budget: Budget) -> bool:
    """The utilization rule must not relaunch what consolidation removes: the pool's load,
    spread over one node fewer (and fewer than any already leaving this tick), has to stay
    under the scale-up threshold."""
    return len(ctx.serving) - len(budget.taken) - 1 >= ctx.nodes_for(ctx.util_sum)
