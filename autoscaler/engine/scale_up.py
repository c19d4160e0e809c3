"""Capacity to add to one pool: interruptions, pending jobs, utilization, floors.

Cheapest order of remedies: free GPUs on serving nodes and nodes already on their way,
then un-draining a node, and only then a new node.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import chain, islice, repeat

from autoscaler.engine.binpack import Bin, LazyBins, Part, first_fit, fits_part, part_groups, part_wait
from autoscaler.engine.context import PoolContext
from autoscaler.engine.mix import MarketMix
from autoscaler.engine.on_prem import OnPremFill
from autoscaler.engine.pricing import Offer, Prices
from autoscaler.engine.scale_down import unhealthy
from autoscaler.engine.spread import ZoneSpread
from autoscaler.model.node import Node
from autoscaler.model.plan import MOVES
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Market
from autoscaler.words import first_few

# Order in which new nodes keep their place when quotas cut the list short.
TRIGGER_ORDER = {"interruption": 0, "pending": 1, "floor": 2, "utilization": 3}


@dataclass(slots=True)
class NewNode:
    offer: Offer
    trigger: str
    why: str
    replaces: list[str] = field(default_factory=list)
    fallback_from_spot: bool = False


@dataclass(slots=True)
class Growth:
    new: list[NewNode] = field(default_factory=list)
    cancels: list[tuple[Node, str]] = field(default_factory=list)
    holds: list[str] = field(default_factory=list)
    pending_gpus: float = 0.0
    has_demand: bool = False


class Picker:
    """Chooses the offer for each new node, following the mix and its fallbacks."""

    def __init__(self, ctx: PoolContext, prices: Prices):
        self.ctx, self.prices = ctx, prices
        od = ctx.on_demand_count()
        self.mix = MarketMix(ctx.pool.capacity, od, ctx.size - od)
        self.max_wait = ctx.pool.capacity.wait_limit(ctx.policy.priority)
        self._refusals: list[str] | None = None
        self._spread: ZoneSpread | None = None

    @property
    def spread(self) -> ZoneSpread:
        """Counted on first use: most pools pick no offer in a tick (their nodes do not
        change before then)."""
        if self._spread is None:
            ctx = self.ctx
            self._spread = ZoneSpread(ctx.pool, chain(ctx.serving, ctx.in_flight), ctx.interrupted)
        return self._spread

    def refusals(self) -> list[str]:
        """Signs of a spot outage under way: recent refusals, and interruption notices (they
        come in bursts by type and zone, and the zone's next launch is likely refused)."""
        if self._refusals is None:
            notices = sorted(f"{t} spot in {z}: interruption notice under way"
                             for t, z in self.spread.reclaimed if z is not None)
            self._refusals = self.prices.spot_refusals(self.ctx.pool) + notices
        return self._refusals

    def late(self, waited: timedelta | None) -> bool:
        """A job that waited max_wait while spot is refused somewhere in the pool goes
        on-demand now: outages hit every zone at once often enough (the V100 trace: all
        four 13% of the time) that walking the zones one refusal at a time costs minutes."""
        return (waited is not None and waited >= self.max_wait
                and self.ctx.pool.capacity.spot_fallback == "on-demand" and bool(self.refusals()))

    def pick(self, gpus: float, model: str | None, market: Market | None = None,
             zones: frozenset[str] | None = None, waited: timedelta | None = None,
             types: frozenset[str] | None = None) -> tuple[Offer | None, str, bool]:
        """The offer, the note for the reason, and whether it is an on-demand fallback."""
        pool = self.ctx.pool
        market = market or self.mix.peek()
        if market is Market.SPOT and self.late(waited):
            od, od_skipped = self.prices.offers(pool, Market.ON_DEMAND, gpus, model, zones, types)
            if od:
                self.mix.take(Market.ON_DEMAND)
                refused = self.refusals()
                return od[0], (f"spot refused ({first_few(refused, 3, '; ')}) and the job waited "
                               f"{format_duration(waited or timedelta(0))} >= max_wait "
                               f"{format_duration(self.max_wait)}, falling back to on-demand"), True
        offers, skipped = self.prices.offers(pool, market, gpus, model, zones, types)
        offers, full = self.spread.keep(offers)
        skipped += full
        if offers:
            self.mix.take(market)
            self.spread.add(offers[0])
            return offers[0], "", False
        if market is Market.SPOT and pool.capacity.spot_fallback == "on-demand":
            od, od_skipped = self.prices.offers(pool, Market.ON_DEMAND, gpus, model, zones, types)
            if od:
                self.mix.take(Market.ON_DEMAND)
                why = "; ".join(skipped) or "no spot type fits"
                return od[0], f"no usable spot offer ({why}), falling back to on-demand", True
            skipped += od_skipped
        return None, "; ".join(skipped) or f"no instance type in the pool has {math.ceil(gpus)} GPUs", False


def live_bins(ctx: PoolContext, prices: Prices) -> Iterator[Bin]:
    """Free GPUs on serving nodes (as the scheduler reports them) and in-flight nodes."""
    for node in ctx.free:
        sched = ctx.observation(node).scheduler
        if sched is not None and sched.places_jobs:
            gpus, model = prices.node_type(node)
            yield Bin.observed(sched.gpus_total, sched.gpus_allocated, sched.gpus_free,
                               most=gpus, node=node, gpu_model=model)
    for node in ctx.in_flight:
        if node.launched_for not in MOVES:  # promised to the jobs it moves
            gpus, model = prices.node_type(node)
            yield Bin.empty(gpus, node=node, gpu_model=model)


def _cancellable_bins(ctx: PoolContext, prices: Prices) -> list[Bin]:
    """Nodes leaving because they were idle, which could serve again at once."""
    cancellable = []
    for node in ctx.draining + ctx.drained:
        if node.drain_trigger not in (None, "idle"):
            continue
        if unhealthy.problem(ctx, ctx.observation(node)) is not None:
            continue
        sched = ctx.observation(node).scheduler
        allocated = sched.gpus_allocated if sched else 0.0
        gpus = prices.node_gpus(node)
        cancellable.append(Bin.observed(gpus, allocated, sched.gpus_free if sched else None, most=gpus,
                                        node=node, gpu_model=prices.gpu_model(node)))
    return cancellable


@dataclass(slots=True)
class _Run:
    """The packer's state across parts: the current shape's search start and refusal, the
    first three reasons a part was not placed, the count of all, the picker's notes."""

    shape: tuple[float, str | None, frozenset[str] | None, frozenset[str] | None] | None = None
    start: tuple[int, int] = (0, 0)
    refused: str | None = None
    reasons: list[str] = field(default_factory=list)
    n_unplaced: int = 0
    notes: list[str] = field(default_factory=list)

    def unplaced(self, why: str) -> None:
        self.n_unplaced += 1
        if self.n_unplaced <= 3:
            self.reasons.append(why)


class _Grower:
    def __init__(self, ctx: PoolContext, prices: Prices):
        self.ctx, self.prices = ctx, prices
        self.out = Growth()
        self.added = 0  # nodes launched or un-drained this tick
        self.picker = Picker(ctx, prices)
        # Built only as far as jobs need placing: most pools have none.
        self.live = LazyBins(live_bins(ctx, prices))
        self._cancellable: list[Bin] | None = None
        self.new_bins: list[Bin] = []

    @property
    def cancellable(self) -> list[Bin]:
        """Built on first use: only pools that need capacity look at their draining nodes."""
        if self._cancellable is None:
            self._cancellable = _cancellable_bins(self.ctx, self.prices)
        return self._cancellable

    def room(self, evidence: bool) -> int:
        """Nodes the pool may still add this tick. ``max_step`` paces growth without demand
        evidence (utilization, floors); pending jobs and interrupted nodes' work are held back
        only by ``max_nodes``: a burst of 600 jobs launches for all of them in one tick."""
        left = self.ctx.pool.max_nodes - self.ctx.size - self.added
        return left if evidence else min(left, self.ctx.pool.scale_up.max_step - self.added)

    def room_why(self) -> str:
        pool = self.ctx.pool
        if self.have() >= pool.max_nodes:
            return f"pool is at max_nodes ({pool.max_nodes})"
        return f"max_step ({pool.scale_up.max_step}) nodes per tick reached"

    def have(self) -> int:
        return self.ctx.size + len(self.out.new) + len(self.out.cancels)

    def add(self, offer: Offer, trigger: str, why: str, replaces: list[str] | None = None,
            fallback: bool = False) -> Bin:
        self.added += 1
        self.out.new.append(NewNode(offer, trigger, why, list(replaces or []), fallback))
        itype = self.prices.itype(self.ctx.pool.cloud.value, offer.instance_type)
        b = Bin.empty(offer.gpus, offer=offer, gpu_model=itype.gpu_model if itype else "")
        self.new_bins.append(b)
        return b

    def cancel(self, b: Bin, why: str) -> None:
        if b.node is None:
            return
        self.added += 1
        self.cancellable.remove(b)
        self.live.append(b)
        self.out.cancels.append((b.node, why))

    def extend(self, trigger: str, count: int, why: str) -> None:
        """Add ``count`` nodes: un-drain first, then launch."""
        for _ in range(count):
            if self.room(evidence=False) <= 0:
                self.out.holds.append(f"{trigger}: {why}; {self.room_why()}")
                return
            if self.cancellable:
                self.cancel(self.cancellable[0], why)
                continue
            offer, note, fallback = self.picker.pick(1, None)
            if offer is None:
                self.out.holds.append(f"{trigger}: {why}; no offer: {note}")
                return
            self.add(offer, trigger, why + (f"; {note}" if note else ""), fallback=fallback)

    def interruptions(self) -> None:
        """Stand-ins for the work of interrupted spot nodes.

        Their running jobs are packed like pending jobs (free capacity first, then new
        nodes), so three interrupted half-empty nodes do not cost three new ones; a node
        that looks busy but whose jobs the scheduler does not list gets a like-for-like
        stand-in. Until the reclaim requeues them, the jobs of a node whose stand-in is on
        its way are packed again each tick, without launching: the room kept for them (the
        stand-in, free GPUs) is not free for pending jobs, which would otherwise wait for it
        and lose it to the requeued jobs, which are older.
        """
        ctx, pool, prices = self.ctx, self.ctx.pool, self.prices
        parts: list[tuple[str, float, str | None, Node]] = []
        whole: list[tuple[Node, str]] = []
        for node in ctx.interrupted:
            obs = ctx.observation(node)
            jobs = obs.scheduler.jobs if obs.scheduler else []
            util = obs.metrics.util_mean if obs.metrics else None
            model = prices.gpu_model(node) or None
            if jobs:
                share = prices.node_gpus(node) / len(jobs)
                parts += [(f"{node.name}:{j.id}", j.gpus if j.gpus > 0 else share, model, node)
                          for j in jobs]
            elif node.replacement_requested:
                continue
            elif util is not None and util >= pool.scale_down.gpu_utilization_below:
                whole.append((node, f"GPU util {util:.0f}%"))
            elif self.have() + len(whole) < ctx.floor:
                whole.append((node, "pool below its floor"))
        if not parts and not whole:
            return
        for job, gpus, model, node in sorted(parts, key=lambda p: (-p[1], p[0])):
            b = first_fit(self.live, gpus, model) or first_fit(self.new_bins, gpus, model)
            if b is None and not node.replacement_requested:
                b = self._stand_in(node, gpus, model, "its jobs")
            if b is None:
                continue
            b.place(job, gpus)
            # Capacity promised to these jobs must not be drained as idle this tick.
            self.out.has_demand = True
            if b.node is None:
                stand_in = self.out.new[self.new_bins.index(b)]
                if node.name not in stand_in.replaces:
                    stand_in.replaces.append(node.name)
        for node, what in whole:
            self._stand_in(node, prices.node_gpus(node), prices.gpu_model(node) or None, what)

    def _stand_in(self, node: Node, gpus: float, model: str | None, what: str) -> Bin | None:
        if self.room(evidence=True) <= 0:
            self.out.holds.append(f"no stand-in for interrupted {node.name}: {self.room_why()}")
            return None
        pool = self.ctx.pool
        market = node.market if pool.capacity.on_interruption == "same" else Market.ON_DEMAND
        offer, note, fallback = self.picker.pick(gpus, model, market)
        if offer is None:
            self.out.holds.append(f"no stand-in for interrupted {node.name}: {note}")
            return None
        return self.add(offer, "interruption",
                        f"spot interruption notice for {node.name} ({what})" + (f"; {note}" if note else ""),
                        replaces=[node.name], fallback=fallback)

    def pending(self) -> None:
        """Pending jobs, packed first-fit-decreasing, a (priority, GPUs) group at a time."""
        pool, prices, out = self.ctx.pool, self.prices, self.out
        groups = part_groups(self.ctx.demand_shapes())
        out.has_demand = out.has_demand or bool(groups)
        if not groups:
            return
        out.pending_gpus = sum(chain.from_iterable(repeat(g.gpus, g.count) for g in groups))
        models = {t.gpu_model for name in pool.instance_types
                  if (t := prices.itype(pool.cloud.value, name)) is not None}
        run = _Run()
        on_prem = OnPremFill.of(self.ctx, prices.now)
        for group in groups:
            parts = group.parts()
            for i, part in enumerate(parts):
                if on_prem is not None and on_prem.take(part):
                    continue
                why = self._place_part(part, models, run)
                if why is None:
                    continue
                run.unplaced(part[0] + why)
                if group.uniform:
                    # Nothing changed and the rest of the group has this part's shape, so
                    # each would fail the same way: count them, format only the first few.
                    rest = group.count - i - 1
                    for later in islice(parts, max(0, 3 - run.n_unplaced)):
                        run.unplaced(later[0] + why)
                        rest -= 1
                    run.n_unplaced += rest
                    break
        fresh = [n for n in out.new if n.trigger == "pending"]
        n_parts = sum(g.count for g in groups)
        if fresh:
            jobs_new = sum(len(b.jobs) for b in self.new_bins)
            where = "on free" if on_prem is None else "on-prem nor on free"
            why = (f"{n_parts} pending job part(s) ask for {out.pending_gpus:g} GPUs; "
                   f"{jobs_new} do not fit {where}, in-flight or draining capacity")
            if on_prem is not None:
                why = f"{on_prem.fit_words(n_parts)}; {why}"
            if run.notes:
                why += f"; {run.notes[0]}"
            if self.ctx.placed:
                more = len(self.ctx.placed) - 1
                why += f"; placement group: {self.ctx.placed[0]}" + (
                    f" (and {more} more job(s) placed here)" if more else "")
            for n in fresh:
                n.why = why
        if on_prem is not None:
            out.holds += on_prem.holds(n_parts, bool(fresh))
        if run.n_unplaced:
            out.holds.append(f"{run.n_unplaced} pending job(s) not placed: " + "; ".join(run.reasons))

    def _place_part(self, part: Part, models: set[str], run: _Run) -> str | None:
        """Place one part; None when placed, else why not (to follow the part's id)."""
        job, gpus, model, zones, types, submitted = part
        if model and model not in models:
            return f" needs {model}, not offered by this pool"
        if (gpus, model, zones, types) != run.shape:
            run.shape, run.start, run.refused = (gpus, model, zones, types), (0, 0), None
        b, run.start = self._first_fit_from(run.start, gpus, model, zones, types)
        if b is not None:
            b.place(job, gpus)
            return None
        room = self.room(evidence=True)
        if room > 0 and (b := first_fit(self.cancellable, gpus, model, zones, types)) is not None:
            self.cancel(b, f"pending job {job} needs {gpus:g} GPUs and fits on it")
            b.place(job, gpus)
            return None
        if room <= 0:
            return f" ({gpus:g} GPUs): {self.room_why()}"
        # A shape the picker refused stays refused: a refusal changes no state.
        offer, note, fallback = ((None, run.refused, False) if run.refused is not None
                                 else self.picker.pick(gpus, model, zones=zones,
                                                       waited=part_wait(submitted, self.prices.now),
                                                       types=types))
        if offer is None:
            run.refused = note
            return f" ({gpus:g} GPUs): {note}"
        if note:
            run.notes.append(note)
        self.add(offer, "pending", "", fallback=fallback).place(job, gpus)
        return None

    def _first_fit_from(self, start: tuple[int, int], gpus: float, model: str | None,
                        zones: frozenset[str] | None, types: frozenset[str] | None = None,
                        ) -> tuple[Bin | None, tuple[int, int]]:
        """``first_fit`` over live then new bins, skipping the (live, new) bins before
        ``start``: parts come largest first, and a bin that did not fit the previous part of
        the same shape has not gained room since (placing only takes room). Returns the bin
        and where the next part of this shape starts, so a backlog of one shape costs its
        parts plus the bins, not parts x bins (same bins chosen as a full scan)."""
        live_at, new_at = start
        if new_at == len(self.new_bins) and self.live.past_end(live_at):
            return None, start  # this shape already found no bin, and none was added since
        for i, b in self.live.from_index(live_at):
            if fits_part(b, gpus, model, zones, types):
                return b, (i, new_at)
            live_at = i + 1
        for j in range(new_at, len(self.new_bins)):
            b = self.new_bins[j]
            if fits_part(b, gpus, model, zones, types):
                return b, (live_at, j)
        return None, (live_at, len(self.new_bins))

    def utilization(self, now: datetime) -> None:
        ctx, pool = self.ctx, self.ctx.pool
        util = ctx.util_mean()
        threshold = pool.scale_up.gpu_utilization_above
        if util is None or util <= threshold or not ctx.serving:
            return
        last = ctx.history.last_scale_up_at
        if last is not None and now - last < pool.scale_up.cooldown:
            self.out.holds.append(
                f"mean GPU util {util:.0f}% > {threshold:g}% but the scale-up cooldown "
                f"({format_duration(pool.scale_up.cooldown)}) runs since {last:%H:%M:%S}")
            return
        desired = math.ceil(len(ctx.serving) * util / threshold)
        have = self.have()
        why = (f"mean GPU util {util:.0f}% > {threshold:g}% over "
               f"{format_duration(pool.scale_up.window)} on {len(ctx.serving)} node(s); "
               f"target {desired} node(s), have {have}")
        self.extend("utilization", desired - have, why)

    def floor(self) -> None:
        have = self.have()
        if have < self.ctx.floor:
            self.extend("floor", self.ctx.floor - have, f"{self.ctx.floor_why}; pool has {have}")


def grow(ctx: PoolContext, prices: Prices, now: datetime) -> Growth:
    grower = _Grower(ctx, prices)
    grower.interruptions()
    grower.pending()
    grower.utilization(now)
    grower.floor()
    return grower.out

