"""Which pool of a placement group takes each pending job that several pools could run.

Signals list a job under the first pool its partition, labels or constraints match, with
the other pools of that pool's placement group that could run it (``PendingJob.options``).
Before any pool grows, each such job is moved to one pool:

1. a pool where it fits on capacity already there or on its way (free GPUs on serving
   nodes, in-flight nodes): that is paid for, and it keeps a job from buying twice while
   the node launched for it boots;
2. otherwise the pool whose next launch for it is cheapest per GPU-hour: the pool's next
   market (its mix), offers its refusals and stock leave, then on-demand where the pool
   falls back (a pool whose stale image holds its launches, engine/stale_image.py, has
   none). A spot offer in a (type, zone) with an interruption notice under way ranks
   after every other pool's offers: the zone is being reclaimed and its next launch is
   likely refused. Next after them, a spot offer in a zone the cloud scores as unlikely
   to be met (a low Spot placement score, engine/pricing.py). Ties keep the job where
   signals listed it.

So a spot refusal in one region moves the next launch to the next-best pool of the group
in the same decide, before on-demand in the first pool if that costs more. Jobs already
running never move here. The options come from a snapshot, which is untrusted: a pool
not of the job's team and group, or outside a ``pin_region`` pool's region, is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from autoscaler.engine.binpack import Bin, LazyBins, first_fit, part_wait
from autoscaler.engine.context import DEMAND_REASONS, PoolContext
from autoscaler.engine.pricing import Offer, Prices
from autoscaler.engine.scale_up import Picker, live_bins
from autoscaler.engine.stale_image import held_for
from autoscaler.model.plan import PlacementChoice
from autoscaler.model.snapshot import PendingJob, PoolOption
from autoscaler.policy.models import Market

Where = tuple[str, str, str, str | None]  # cloud, region, type, zone


@dataclass(slots=True)
class _Quote:
    ctx: PoolContext
    option: PoolOption
    offer: Offer | None
    why: str  # why there is no offer, or a note on the offer (fallback, notice)
    noticed: bool = False  # the offer's (type, zone) has an interruption notice under way

    def words(self) -> str:
        pool = self.ctx.pool
        where = f"{self.ctx.key} ({pool.cloud.value} {pool.region})"
        if self.offer is None:
            return f"{where}: {self.why}"
        o = self.offer
        zone = f" {o.zone}" if o.zone else ""
        text = f"{where} {o.instance_type} {o.market.value}{zone} ${o.per_gpu:.2f}/GPU-h"
        score = f"spot placement score {o.score}/10" if o.score is not None else ""
        notes = [n for n in (self.why, score) if n]
        return text + (f" ({'; '.join(notes)})" if notes else "")


class _Group:
    """The pools of one placement group: their quotes and what this tick took of them."""

    def __init__(self, ctxs: dict[str, PoolContext], prices: Prices, notices: dict[Where, datetime]):
        self.ctxs, self.prices, self.notices = ctxs, prices, notices
        self.taken: dict[str, int] = dict.fromkeys(ctxs, 0)  # nodes this routing expects to add
        self.bins: dict[str, LazyBins] = {}
        self.pickers: dict[str, Picker] = {}  # each pool's own growth rules: mix and fallback

    def picker(self, key: str) -> Picker:
        picker = self.pickers.get(key)
        if picker is None:
            picker = self.pickers[key] = Picker(self.ctxs[key], self.prices)
        return picker

    def free_fit(self, key: str, job: PendingJob, option: PoolOption) -> Bin | None:
        if job.nodes != 1:
            return None  # a multi-node job is placed part by part by its pool's growth
        bins = self.bins.get(key)
        if bins is None:
            bins = self.bins[key] = LazyBins(live_bins(self.ctxs[key], self.prices))
        return first_fit(bins, job.gpus, job.gpu_model, _set(option.zones), _set(option.instance_types))

    def quote(self, key: str, job: PendingJob, option: PoolOption) -> _Quote:
        ctx = self.ctxs[key]
        pool = ctx.pool
        held = held_for(pool, ctx.obs)
        if held is not None:
            return _Quote(ctx, option, None, f"launches held: {held}")
        # A pending job is demand evidence: only max_nodes holds it back, not max_step.
        if pool.max_nodes - ctx.size - self.taken[key] < job.nodes:
            return _Quote(ctx, option, None, f"no room (max_nodes {pool.max_nodes})")
        picker = self.picker(key)
        market = picker.mix.peek()
        zones, types = _set(option.zones), _set(option.instance_types)
        note = ""
        if market is Market.SPOT and picker.late(part_wait(job.submitted_at, self.prices.now)):
            # The pool's growth goes on-demand for this job: an outage is under way there
            # and the job waited its tier's max_wait.
            market, note = Market.ON_DEMAND, f"spot refused ({picker.refusals()[0]}), the job waited max_wait"
        offers, skipped = self.prices.offers(pool, market, job.gpus, job.gpu_model, zones, types)
        if market is Market.SPOT and offers:
            clean = [o for o in offers if self._notice(ctx, o) is None]
            if not clean:
                at = self._notice(ctx, offers[0])
                return _Quote(ctx, option, offers[0], f"interruption notice at {at:%H:%M:%S}", True)
            offers = clean
        if not offers and market is Market.SPOT and pool.capacity.spot_fallback == "on-demand":
            refused = "; ".join(skipped[:2]) or "no spot type fits"
            offers, od_skipped = self.prices.offers(pool, Market.ON_DEMAND, job.gpus, job.gpu_model,
                                                    zones, types)
            note = f"spot: {refused}"
            skipped += od_skipped
        if not offers:
            return _Quote(ctx, option, None, "; ".join(skipped[:2]) or "no instance type fits")
        return _Quote(ctx, option, offers[0], note)

    def _notice(self, ctx: PoolContext, offer: Offer) -> datetime | None:
        pool = ctx.pool
        return self.notices.get((pool.cloud.value, pool.region, offer.instance_type, offer.zone))


def groups_of(contexts: list[PoolContext]) -> dict[str, str | None]:
    """Each pool's placement group by pool key, read once per tick."""
    return {c.key: c.policy.group_of(c.pool.name) for c in contexts}


def route(contexts: list[PoolContext], prices: Prices,
          group_of: dict[str, str | None] | None = None) -> list[PlacementChoice]:
    """Move each pending job with options to its pool (see the module's docstring); returns
    the choices made between two or more pools, for the plan. ``group_of``: groups_of()."""
    group_of = group_of if group_of is not None else groups_of(contexts)
    by_key = {c.key: c for c in contexts}
    groups: dict[tuple[str, str], _Group] = {}
    notices = _notices(contexts)
    moves: dict[str, list[PendingJob]] = {}
    leaving: dict[str, set[str]] = {}
    choices: list[PlacementChoice] = []
    listed = [(ctx, job) for ctx in contexts if ctx.error is None and _routes(ctx)
              for job in ctx.obs.pending if len(job.options) > 1 and job.reason in DEMAND_REASONS]
    listed.sort(key=lambda cj: (-cj[1].priority, -cj[1].gpus * cj[1].nodes, cj[1].id))
    for home, job in listed:
        group_name = group_of[home.key]
        if group_name is None:
            continue
        options = _trusted(home, group_name, job, by_key, group_of)
        if len(options) < 2:
            continue
        group = groups.get((home.team, group_name))
        if group is None:
            group = groups[home.team, group_name] = _Group(
                {c.key: c for c in contexts if c.team == home.team
                 and group_of[c.key] == group_name}, prices, notices)
        chosen, compared, why = _choose(group, home, job, options)
        choices.append(PlacementChoice(job=job.id, pool=chosen.pool, listed_under=home.key,
                                       compared=compared, reason=why))
        if chosen.pool != home.key:
            leaving.setdefault(home.key, set()).add(job.id)
            moves.setdefault(chosen.pool, []).append(job.model_copy(update={
                "zones": chosen.zones, "instance_types": chosen.instance_types, "options": []}))
    for ctx in contexts:
        gone, came = leaving.get(ctx.key, set()), moves.get(ctx.key, [])
        if gone or came:
            ctx.obs = ctx.obs.model_copy(update={
                "pending": [j for j in ctx.obs.pending if j.id not in gone] + came})
    return choices


def _choose(group: _Group, home: PoolContext, job: PendingJob, options: list[PoolOption]
            ) -> tuple[PoolOption, list[str], str]:
    """The option the job goes to, the pools compared (in words) and the reason."""
    for option in options:  # cheapest first would need every quote: capacity there wins
        b = group.free_fit(option.pool, job, option)
        if b is not None:
            b.place(job.id, job.gpus)
            others = [o.pool for o in options if o is not option]
            return option, [option.pool, *others], (
                f"job {job.id}: {option.pool} chosen: it fits on capacity already there or on its "
                f"way (not compared on price with {', '.join(others)})")
    quotes = [group.quote(o.pool, job, o) for o in options]
    priced = [q for q in quotes if q.offer is not None]
    order = {o.pool: i for i, o in enumerate(options)}
    priced.sort(key=lambda q: (q.noticed, q.offer.unlikely if q.offer else False,
                               q.offer.per_gpu if q.offer else 0.0, order[q.option.pool]))
    compared = [q.words() for q in sorted(quotes, key=lambda q: order[q.option.pool])]
    if not priced:
        return options[0], compared, (f"job {job.id}: no pool of its placement group can launch "
                                      f"for it; it stays with {home.key}: " + "; ".join(compared))
    best = priced[0]
    group.taken[best.option.pool] += job.nodes
    rest = [q.words() for q in quotes if q is not best]
    return best.option, compared, f"job {job.id}: {best.words()} chosen over " + "; ".join(rest)


def _trusted(home: PoolContext, group_name: str, job: PendingJob,
             by_key: dict[str, PoolContext], group_of: dict[str, str | None]) -> list[PoolOption]:
    """The job's options that are pools of its team and group (the home pool first)."""
    out: list[PoolOption] = []
    seen: set[str] = set()
    for option in sorted(job.options, key=lambda o: o.pool != home.key):
        ctx = by_key.get(option.pool)
        if ctx is None or option.pool in seen or ctx.error is not None or not _routes(ctx):
            continue
        if ctx.team != home.team or group_of[ctx.key] != group_name:
            continue
        if ctx.pool.cluster.kind != home.pool.cluster.kind:
            continue
        if home.pool.pin_region and (ctx.pool.cloud, ctx.pool.region) != (home.pool.cloud, home.pool.region):
            continue
        seen.add(option.pool)
        out.append(option)
    if not out or out[0].pool != home.key:
        return []  # the job is not listed under a pool of its own options: keep it there
    return out


def _routes(ctx: PoolContext) -> bool:
    """Whether the pool takes pending jobs this tick (its scheduler was read)."""
    return ctx.pool.scale_up.pending_jobs and not ctx.obs.scheduler_missing


def _notices(contexts: list[PoolContext]) -> dict[Where, datetime]:
    """The newest interruption notice per (cloud, region, type, zone), fleet-wide: an
    outage hits every pool that launches there."""
    out: dict[Where, datetime] = {}
    for ctx in contexts:
        for node in ctx.interrupted:
            key = (node.cloud, node.region, node.instance_type, node.zone)
            if key not in out or node.state_since > out[key]:
                out[key] = node.state_since
    return out


def _set(values: list[str] | None) -> frozenset[str] | None:
    return frozenset(values) if values is not None else None
