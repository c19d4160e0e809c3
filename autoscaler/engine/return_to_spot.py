"""Return to spot: fallback on-demand nodes move back to spot when it is back, make-before-break.

A node launched on-demand because spot was refused (``Node.fallback_from_spot``) moves in
two ticks:

1. it is older than ``capacity.return_to_spot.after`` and spot is back for its instance
   type in one of the pool's zones: a spot ``Launch`` (trigger ``return-to-spot``) with
   ``replaces=[node]``; the on-demand node keeps serving meanwhile;
2. once that replacement is READY: ``Drain`` of the on-demand node (trigger
   ``spot-returned``: the checkpoint signal at once, then ``checkpoint_grace``, then its
   jobs are requeued and restart from their checkpoint, on the spot node). A replacement
   that failed leaves the old node as it was; it may move again later.

**Spot is back** for a (type, zone) when the snapshot says it is in stock, or when a spot
node of that type and zone (any pool) was granted (past PROVISIONING) within
``evidence_window``, and in both cases no spot capacity error and no interruption notice
for that (type, zone) came since, and none within the pool's ``capacity_error_backoff``.
Without such evidence the node stays where it is, unless the rule says ``probe``: then a
(type, zone) with no spot refusal and no interruption within the back-off gets the
replacement's launch as the probe. A refused probe is not billed, the on-demand node keeps
serving, and its capacity error backs that offering off, so each (type, zone) is probed at
most once per ``capacity_error_backoff``; only granted replacements count as moves.

**Worth it**: saving = on-demand $/h - spot $/h. The one-off cost is the work redone (per
job, its GPUs x the time since its last checkpoint, at most ``checkpoint_every``; unknown:
all of its run so far) plus the spot node billed while it boots and the jobs checkpoint
(``BOOT_ESTIMATE`` + ``checkpoint_grace``), all at the spot price. Spread over the node's
on-demand age so far (a node that has run that long is taken to run as long again), the
saving left must be at least ``min_saving`` $/h. A job the scheduler expects to end
before the move pays back (at least ``ENDS_SOON``) keeps the node where it is.

**Another pool of its placement group** (of a ``pin_region`` pool: only in its region):
when no move to spot in its own pool is found, the node may move to spot in the first other
pool of the group with room where spot is back, with the same GPUs, make-before-break as
above, if every running job on it may run in that pool (``RunningJob.pools``, untrusted
input read as engine/pins.py says; a job without a list may run in any). A move a pin alone
refused leaves the node on-demand, and a Hold says which job's pin refused which pool.

Guard rails: ``max_moves_per_hour`` per pool (replacements launched in the last hour), the
pool's disruption budget (``max_draining_percent``, with moves whose replacement is still
booting counted as drains to come), ``max_nodes`` and the team quota (the replacement runs
next to the old node for a while), held nodes and nodes the scheduler does not report.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import chain

from autoscaler.engine import pins
from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Offer, Prices, low_spot_score
from autoscaler.engine.scale_down.budget import Budget, drain_replaced
from autoscaler.engine.spread import ZoneSpread
from autoscaler.model.lifecycle import FAILED, GRANTED, NodeState
from autoscaler.model.node import Node
from autoscaler.model.plan import Action, Hold, Launch
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Market, ReturnToSpot

S = NodeState
TRIGGER = "return-to-spot"
BOOT_ESTIMATE = timedelta(minutes=10)  # request to READY, bootstrap included (sim: 4 min)
ENDS_SOON = timedelta(minutes=10)
Key = tuple[str, str, str, str | None]  # cloud, region, type, zone


class SpotEvidence:
    """Per tick: the newest granted spot launch and the newest refusal per (type, zone)."""

    def __init__(self, contexts: Iterable[PoolContext], snapshot: Snapshot):
        self.granted: dict[Key, datetime] = {}
        self.refused: dict[Key, datetime] = {}
        self.stock = {(o.cloud, o.region, o.instance_type, o.zone): o.in_stock
                      for o in snapshot.offerings if o.in_stock is not None}
        for ctx in contexts:
            for node in (*ctx.serving, *ctx.in_flight, *ctx.draining, *ctx.drained,
                         *ctx.interrupted, *ctx.failed):
                if node.market is not Market.SPOT:
                    continue
                key = (node.cloud, node.region, node.instance_type, node.zone)
                if node.state is S.INTERRUPTED:
                    _newest(self.refused, key, node.state_since)
                elif node.state in GRANTED:
                    _newest(self.granted, key, node.created_at)
        for err in snapshot.capacity_errors:
            if err.market is Market.SPOT:
                _newest(self.refused, (err.cloud, err.region, err.instance_type, err.zone), err.at)

    def back(self, ctx: PoolContext, rule: ReturnToSpot, prices: Prices, itype: str,
             zone: str | None, now: datetime) -> str | None:
        """Why spot is back for (itype, zone), or None."""
        pool = ctx.pool
        key = (pool.cloud.value, pool.region, itype, zone)
        refused = self.refused.get(key)
        if self.stock.get(key) is False or prices.capacity_error(pool, itype, zone, Market.SPOT):
            return None
        granted = self.granted.get(key)
        if granted is not None and now - granted <= rule.evidence_window and (
                refused is None or refused < granted):
            return f"a spot {itype} was granted in {zone or 'the region'} at {granted:%H:%M:%S}"
        quiet = refused is None or now - refused >= pool.capacity.capacity_error_backoff
        if self.stock.get(key) and quiet:
            return f"{itype} spot is in stock in {zone or 'the region'}"
        if low_spot_score(prices.spot_score(pool, zone)):
            return None  # no probe where the cloud scores a spot request as unlikely
        if rule.probe and quiet:
            backoff = format_duration(pool.capacity.capacity_error_backoff)
            return (f"no {itype} spot refusal or interruption in {zone or 'the region'} within "
                    f"{backoff} (probe: the replacement's launch; refused, it is not billed)")
        return None


def _newest(into: dict[Key, datetime], key: Key, at: datetime) -> None:
    if key not in into or at > into[key]:
        into[key] = at


@dataclass(frozen=True)
class Move:
    node: Node
    offer: Offer
    saving: float  # $/h
    one_off: float  # $ redone work + the replacement's boot
    net: float  # $/h after the one-off spread over the node's age
    evidence: str
    target: PoolContext | None = None  # another pool of the placement group (None: this one)


def finish(ctx: PoolContext, budgets: dict[str, Budget],
           mates: Iterable[PoolContext] = ()) -> list[Action]:
    """Phase 2: drain each on-demand node whose spot replacement is READY (also after the
    policy turned the rule off: paying for both would be the worst outcome). ``mates``: the
    other pools of ctx's placement group, whose serving nodes a replacement launched here
    may have come from; the drain is the old node's pool's, on its budget."""
    # Most pools have no replacement serving: then nothing is looked up at all.
    arrived = [n for n in ctx.serving if n.launched_for == TRIGGER]
    if not arrived:
        return []
    out: list[Action] = []
    serving = {n.name: (ctx, n) for n in ctx.serving}
    group = {n.name: (c, n) for c in mates for n in c.serving}
    for new in arrived:
        found = serving.get(new.replaces or "") or group.get(new.replaces or "")
        if found is None:
            continue
        home, old = found
        budget = budgets[home.key]
        if old.name in budget.taken:
            continue
        where = "" if home is ctx else f" of {ctx.key}"
        why = (f"{home.key}: {new.name}{where} ({new.instance_type} spot in {new.zone}) is READY "
               f"in place of fallback on-demand {old.name}")
        out.append(drain_replaced(home, old, budget, why, "spot-returned",
                                  " (checkpoint signal now, its jobs restart on spot)"))
    return out


def start(ctx: PoolContext, prices: Prices, evidence: SpotEvidence, now: datetime,
          budget: Budget, held: Iterable[str], room: int,
          elsewhere: dict[str, tuple[PoolContext, int]] | None = None,
          group: Collection[str] = ()) -> tuple[list[Move], list[Hold]]:
    """Phase 1: the moves to start this tick, best net saving first, within the guard rails
    (``room``: nodes the pool may still add under max_nodes). ``elsewhere``: the other pools
    of its placement group, each with its room: when spot is not back here, a node may move
    to spot there, with the same GPUs (a pool launches only what its policy lists), if every
    job's pin admits that pool (``group``: the group's pool keys a pin may name, see pins.py).
    Also a Hold for each node that stays because a pin alone refused such a move."""
    rule = ctx.pool.capacity.return_to_spot
    if rule is None or ctx.data_missing:
        return [], []
    # Replacements of this pool's nodes, here or in another pool of its group.
    own = {n.name for n in ctx.serving}
    live = [n for c in (ctx, *(m for m, _ in (elsewhere or {}).values()))
            for n in (*c.serving, *c.in_flight, *c.failed)
            if n.launched_for == TRIGGER and (c is ctx or n.replaces in own)]
    booting = {n.replaces for n in live if n.state not in FAILED and n.state is not S.READY}
    moving = {n.replaces for n in live if n.state not in FAILED}
    # A refused replacement disrupted nothing: only granted ones count as moves.
    started = sum(now - n.created_at < timedelta(hours=1) for n in live if n.state not in FAILED)
    left = min(rule.max_moves_per_hour - started, budget.concurrent - len(booting), room)
    if left <= 0:
        return [], []
    held = set(held)
    spread = ZoneSpread(ctx.pool, chain(ctx.serving, ctx.in_flight), ctx.interrupted)
    found, pinned = [], []
    for node in ctx.serving:
        if (node.fallback_from_spot and node.market is Market.ON_DEMAND and node.name not in moving
                and node.name not in held and node.name not in budget.taken
                and now - node.created_at >= rule.after):
            move = _move(ctx, prices, evidence, rule, node, now, spread)
            if move is None and elsewhere:
                move, refused = _across(ctx, prices, evidence, rule, node, now, elsewhere,
                                        frozenset({ctx.key, *group}))
                pinned += [refused] if refused is not None else []
            if move is not None:
                found.append(move)
    found.sort(key=lambda m: (-m.net, m.node.name))
    chosen: list[Move] = []
    spreads: dict[str, ZoneSpread] = {}
    rooms = {key: r for key, (_, r) in (elsewhere or {}).items()}
    for move in found:
        if len(chosen) >= left:
            break
        target = move.target
        there = spread if target is None else spreads.setdefault(target.key, _spread(target))
        if target is not None and rooms[target.key] <= 0:
            continue
        # its drain to come uses the budget now; moves chosen before may have filled the zone
        if budget.can_swap(move.node) and there.full(move.offer.zone) is None:
            budget.swap(move.node)
            there.add(move.offer)
            if target is not None:
                rooms[target.key] -= 1
            chosen.append(move)
    return chosen, pinned


def _spread(ctx: PoolContext) -> ZoneSpread:
    return ZoneSpread(ctx.pool, chain(ctx.serving, ctx.in_flight), ctx.interrupted)


def _across(ctx: PoolContext, prices: Prices, evidence: SpotEvidence, rule: ReturnToSpot,
            node: Node, now: datetime, elsewhere: dict[str, tuple[PoolContext, int]],
            group: frozenset[str]) -> tuple[Move | None, Hold | None]:
    """The first move of ``node`` to spot in another pool of its group (with room) that every
    job's pin admits; without one, a Hold if a pin alone refused such a move."""
    sched = ctx.observation(node).scheduler
    jobs = sched.jobs if sched is not None else []
    allowed = pins.allowed(jobs, group)
    barred: Move | None = None
    for mate, mate_room in elsewhere.values():
        admitted = pins.admits(allowed, mate.key)
        if mate_room <= 0 or (not admitted and barred is not None):
            continue
        move = _move(ctx, prices, evidence, rule, node, now, _spread(mate), mate)
        if move is not None and admitted:
            return move, None
        barred = barred or move
    if barred is None or barred.target is None:
        return None, None
    there = barred.target
    return None, Hold(pool=ctx.key, what="scale-down", reason=(
        f"{ctx.key}: fallback on-demand {node.name} stays on-demand: spot is not back for it "
        f"in {ctx.pool.region} but is in {there.key} ({there.pool.region}) of its placement "
        f"group ({barred.evidence}; {barred.offer.describe()} would save "
        f"${barred.saving:.2f}/h), but the move is refused for a pin: "
        f"{pins.said(jobs, allowed, refusing=there.key)}"))


def _move(ctx: PoolContext, prices: Prices, evidence: SpotEvidence, rule: ReturnToSpot,
          node: Node, now: datetime, spread: ZoneSpread, target: PoolContext | None = None
          ) -> Move | None:
    sched = ctx.observation(node).scheduler
    if sched is None:
        return None  # its jobs are unknown: the redo cost cannot be bounded
    there = target or ctx
    node_gpus, model = prices.node_gpus(node), prices.gpu_model(node)
    offers, _ = spread.keep(prices.offers(there.pool, Market.SPOT, node_gpus, model or None)[0])
    for offer in offers:
        if target is None and offer.instance_type != node.instance_type:
            continue
        if target is not None and offer.gpus != node_gpus:
            continue  # the same GPUs, so its jobs fit as they ran
        why = evidence.back(there, rule, prices, offer.instance_type, offer.zone, now)
        if why is None:
            continue
        saving = prices.node_hourly(node) - offer.hourly_usd
        lead = _boot(ctx) + ctx.pool.scale_down.checkpoint_grace  # launch to drain
        redo_gpu_h = 0.0
        for job in sched.jobs:
            gpus = job.gpus or offer.gpus / max(1, len(sched.jobs))
            started = job.started_at
            if started is None or started < node.created_at:  # unknown: the node's whole life
                started = node.created_at
            redo, to_next = _redo_at(started, now + lead, rule)
            if to_next is not None and to_next * saving < redo * gpus * offer.per_gpu:
                return None  # staying until its next checkpoint costs less than redoing
            redo_gpu_h += redo * gpus
        one_off = redo_gpu_h * offer.per_gpu + lead / timedelta(hours=1) * offer.hourly_usd
        age_h = (now - node.created_at) / timedelta(hours=1)
        net = saving - one_off / age_h
        if net < rule.min_saving or saving <= 0:
            return None
        payback = max(timedelta(hours=one_off / saving), ENDS_SOON)
        if any(j.ends_at is not None and j.ends_at - now < payback for j in sched.jobs):
            return None
        return Move(node, offer, saving, one_off, net, why, target)
    return None


def _boot(ctx: PoolContext) -> timedelta:
    """Request to READY as the pool's serving nodes took it (median), BOOT_ESTIMATE if none."""
    boots = sorted(n.ready_at - n.created_at for n in ctx.serving
                   if n.ready_at is not None and n.ready_at >= n.created_at)
    return boots[len(boots) // 2] if boots else BOOT_ESTIMATE


def _redo_at(since: datetime, drain: datetime, rule: ReturnToSpot) -> tuple[float, float | None]:
    """Hours of a job's work redone if it is drained at ``drain``, and hours from then to
    its next checkpoint (None: checkpoints unknown, all of the run is redone). Jobs
    checkpoint every ``checkpoint_every`` of their run, counted from its start."""
    ran = max(timedelta(0), drain - since)
    if rule.checkpoint_every is None:
        return ran / timedelta(hours=1), None
    redo = ran % rule.checkpoint_every
    return redo / timedelta(hours=1), (rule.checkpoint_every - redo) / timedelta(hours=1)


def launch_of(ctx: PoolContext, move: Move, now: datetime) -> Launch:
    node, offer = move.node, move.offer
    there = move.target or ctx
    into = "" if move.target is None else (
        f"spot is not back in {ctx.pool.region} but is in {there.key} ({there.pool.region}) "
        "of its placement group: ")
    return Launch(
        pool=there.key, instance_type=offer.instance_type, market=Market.SPOT, zone=offer.zone,
        count=1, gpus_per_node=offer.gpus, hourly_usd=offer.hourly_usd, trigger="return-to-spot",
        replaces=[node.name],
        reason=(f"{ctx.key}: fallback on-demand {node.name} ({node.instance_type}, on-demand for "
                f"{format_duration(now - node.created_at)}) back to spot: {into}{move.evidence}; saves "
                f"${move.saving:.2f}/h, one-off ${move.one_off:.2f} (redone work since the last "
                f"checkpoint and the replacement's boot), ${move.net:.2f}/h net; launching "
                f"{offer.describe()}, {node.name} drains once it is READY"))

