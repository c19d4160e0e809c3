"""``decide()``: the whole engine's flow. Pure: no I/O, no clock, no randomness.

Rules run in the order of DESIGN.md "Decisions": stale data freezes scale-down, demand
first, capacity mix and fallback, quotas and priority, then scale-down, health and
lifetime. Every action carries a reason naming the numbers that triggered it. The nodes
of removed pools are decided in removed_pools.py; the Plan's records are made in
plan_parts.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from autoscaler.catalog import Catalog, default_catalog
from autoscaler.engine import (
    long_jobs,
    placement,
    plan_parts,
    preempt,
    removed_pools,
    return_to_spot,
    scarcity,
)
from autoscaler.engine.context import PoolContext, build_contexts, rule_error
from autoscaler.engine.forecast_floor import raise_floor, raise_headroom
from autoscaler.engine.held import keep_held
from autoscaler.engine.pricing import Prices
from autoscaler.engine.quota import Ledger
from autoscaler.engine.scale_down import (
    broken,
    consolidate,
    consolidate_group,
    expired,
    idle,
    over_max,
    over_quota,
    unhealthy,
)
from autoscaler.engine.scale_down.budget import Budget
from autoscaler.engine.scale_up import TRIGGER_ORDER, Growth, NewNode, grow
from autoscaler.engine.settings import EngineSettings
from autoscaler.engine.stale_image import held_for, hold_stale
from autoscaler.engine.survey import survey
from autoscaler.model.node import FleetView
from autoscaler.model.plan import (
    Action,
    CancelDrain,
    Drain,
    Hold,
    Launch,
    Plan,
    Replace,
    Terminate,
)
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import TeamPolicy

_DEFAULT_CATALOG = default_catalog()
T = TypeVar("T")


def decide(
    policies: dict[str, TeamPolicy],
    fleet: FleetView,
    snapshot: Snapshot,
    now: datetime,
    *,
    catalog: Catalog | None = None,
    settings: EngineSettings | None = None,
) -> Plan:
    return _Decision(policies, fleet, snapshot, now, catalog or _DEFAULT_CATALOG,
                     settings or EngineSettings()).run()


class _Decision:
    def __init__(self, policies: dict[str, TeamPolicy], fleet: FleetView, snapshot: Snapshot,
                 now: datetime, catalog: Catalog, settings: EngineSettings):
        self.now, self.settings, self.policies = now, settings, policies
        self.snapshot = snapshot
        self.prices = Prices(catalog, snapshot, now)
        self.contexts, self.orphans = build_contexts(
            policies, fleet, snapshot, now, self.prices,
            survey=partial(survey, now=now, gpus_of=self.prices.node_gpus))
        self._by_key = {c.key: c for c in self.contexts}
        self._groups = placement.groups_of(self.contexts)
        self._members: dict[tuple[str, str], list[PoolContext]] = {}
        for c in self.contexts:
            if (group := self._groups[c.key]) is not None:
                self._members.setdefault((c.team, group), []).append(c)
        try:  # the fleet-wide view: silent nodes, and whether broken ones may be replaced
            self.broken_held = broken.review(self.contexts, snapshot, settings, now)
        except Exception as exc:  # keep the nodes: replacing on a failed count is no safe side
            self.broken_held = rule_error("the broken-node review", exc)
        self.unserved = snapshot.unserved
        self.placement_error: str | None = None
        try:  # before any floor or growth: the pools of a group compare prices for their jobs
            self.placements = placement.route(self.contexts, self.prices, self._groups)
        except Exception as exc:  # nothing was moved: each job stays where signals listed it
            self.placements = []
            self.placement_error = rule_error("the placement groups' choice", exc)
        for choice in self.placements:
            if choice.pool in self._by_key:
                self._by_key[choice.pool].placed.append(choice.reason)
        for ctx in self.contexts:
            try:  # the highest of the schedule, forecast and headroom floors wins
                ctx.spot_scarce = scarcity.scarce(ctx, self.prices)
                raise_floor(ctx, snapshot.forecasts.get(ctx.key), self.prices)
                raise_headroom(ctx, self.prices)
            except Exception as exc:
                ctx.error = ctx.error or rule_error("its forecast or headroom floor", exc)
        self.ledger = Ledger(policies, settings, snapshot.cluster_quotas)
        self.ledger.count_existing(self.contexts)
        for node in self.orphans:
            self.ledger.count_orphans(self.prices.node_gpus(node), self.prices.node_hourly(node))
        self.budgets = {c.key: Budget.for_pool(c) for c in self.contexts}
        self.actions: list[Action] = []
        self.launched: dict[str, list[NewNode]] = {}
        self.blocked: dict[str, int] = {}
        self.evidence: return_to_spot.SpotEvidence | None = None  # built when a pool asks
        # Pools of a placement group whose consolidation waits for every pool's own
        # scale-down: the group's free room is known only then.
        self.consolidating: list[PoolContext] = []
        self.moved_in: dict[str, int] = {}  # consolidate-move launches into a pool this tick
        self.free_room: consolidate_group.FreeRoom | None = None  # built when a pool asks

    def run(self) -> Plan:
        growth = {c.key: self._isolated([c], "scale-up", self._scale_up, c) or Growth()
                  for c in self.contexts}
        for ctx in self.contexts:
            self._isolated([ctx], "scale-down", self._scale_down, ctx, growth[ctx.key])
        self._consolidate_groups(growth)
        by_team: dict[str, list[PoolContext]] = {}
        for ctx in self.contexts:
            by_team.setdefault(ctx.team, []).append(ctx)
        for team in sorted(self.policies):
            team_ctxs = by_team.get(team, [])
            self._isolated(team_ctxs, "the team quota", self._over_quota, team, team_ctxs)
        if self.blocked and self.settings.preempt_lower_priority:
            blocked = [c for c in self.contexts if c.key in self.blocked]
            self._isolated(blocked, "preemption", self._preempt)
        for ctx in self.contexts:
            self._isolated([ctx], "the return to spot", self._return_to_spot, ctx)
        for ctx in self.contexts:
            self._isolated([ctx], "clean-up", self._terminate, ctx, growth[ctx.key])
            self._isolated([ctx], "the job report", self._report_jobs, ctx)
        self.actions += removed_pools.actions(self.orphans, self.policies, self.snapshot, self.settings)
        if self.placement_error is not None:
            self.actions += [Hold(pool=c.key, what="scale-up", reason=(
                f"{c.key}: its pending jobs stay here, not compared with the rest of its "
                f"placement group: {self.placement_error}")) for c in self.contexts
                if any(len(j.options) > 1 for j in c.obs.pending)]
        actions = hold_stale(plan_parts.without_failed(self.actions, self.contexts),
                             {c.key: (c.pool, c.obs) for c in self.contexts})
        return Plan(decided_at=self.now,
                    actions=keep_held(actions, self.snapshot.held),
                    pools=plan_parts.summaries(self.contexts, self.launched, growth, self.broken_held),
                    unserved=self.unserved, placements=self.placements)

    # -- per-pool isolation --------------------------------------------------------
    def _isolated(self, ctxs: list[PoolContext], what: str, rule: Callable[..., T],
                  *args: Any) -> T | None:
        """Run one rule for ``ctxs``; if it raises, those pools get a Hold with the error
        and no action this tick, and every other pool is decided as usual."""
        live = [c for c in ctxs if c.error is None]
        if not live and ctxs:
            return None
        mark = len(self.actions)
        try:
            return rule(*args)
        except Exception as exc:
            # What the failing rule added is not trusted. What it took from the quota
            # ledger stays taken: the others are decided as if it had launched (safe side).
            del self.actions[mark:]
            for ctx in live:
                ctx.error = rule_error(what, exc)
            return None

    def _over_quota(self, team: str, team_ctxs: list[PoolContext]) -> None:
        ok = [c for c in team_ctxs if c.error is None]
        self.actions += over_quota.candidates(ok, self.ledger.teams[team], self.prices,
                                              self.now, self.budgets)

    def _preempt(self) -> None:
        ok = [c for c in self.contexts if c.error is None]
        blocked = {k: v for k, v in self.blocked.items() if k in {c.key for c in ok}}
        self.actions += preempt.reclaim(blocked, ok, self.prices, self.now, self.budgets)

    def _return_to_spot(self, ctx: PoolContext) -> None:
        budget = self.budgets[ctx.key]
        mates = self._group_mates(ctx)
        self.actions += return_to_spot.finish(ctx, self.budgets, mates)
        # start() moves only serving fallback nodes: a pool without one has nothing to move.
        if ctx.pool.capacity.return_to_spot is None or not ctx.fallbacks:
            return
        if self.evidence is None:
            self.evidence = return_to_spot.SpotEvidence(self.contexts, self.snapshot)
        elsewhere = {c.key: (c, self._room(c)) for c in mates if not ctx.pool.pin_region
                     or (c.pool.cloud, c.pool.region) == (ctx.pool.cloud, ctx.pool.region)}
        moves, pinned = return_to_spot.start(ctx, self.prices, self.evidence, self.now, budget,
                                             self.snapshot.held, self._room(ctx), elsewhere,
                                             group=[c.key for c in mates])
        self.actions += pinned
        for move in moves:
            refused = self.ledger.admit(ctx.team, move.offer.gpus, move.offer.hourly_usd)
            if refused is None:
                self.actions.append(return_to_spot.launch_of(ctx, move, self.now))
            else:
                self.actions.append(Hold(pool=ctx.key, what="scale-down", reason=(
                    f"{ctx.key}: {move.node.name} stays on-demand although spot is back "
                    f"({move.evidence}): its replacement is refused by {refused}")))

    def _room(self, ctx: PoolContext) -> int:
        """Nodes ``ctx`` may still add this tick (none while its stale image holds launches)."""
        if held_for(ctx.pool, ctx.obs) is not None:
            return 0
        return (ctx.pool.max_nodes - ctx.size - len(self.launched.get(ctx.key, []))
                - self.moved_in.get(ctx.key, 0))

    def _group_mates(self, ctx: PoolContext) -> list[PoolContext]:
        """The other pools of ctx's placement group that are decided this tick."""
        group = self._groups[ctx.key]
        if group is None:
            return []
        return [c for c in self._members[ctx.team, group] if c is not ctx
                and c.error is None and c.pool.cluster.kind == ctx.pool.cluster.kind]

    # -- scale-up ---------------------------------------------------------------
    def _scale_up(self, ctx: PoolContext) -> Growth:
        g = grow(ctx, self.prices, self.now)
        refusals: list[str] = []
        for node, why in list(g.cancels):
            refused = self._reserved_for_higher_tier(ctx) or self.ledger.admit_undrain(
                ctx.team, self.prices.node_gpus(node), self.prices.node_hourly(node))
            if refused is not None:
                g.cancels.remove((node, why))
                refusals.append(f"{node.name} stays draining: {refused}")
                continue
            self.actions.append(CancelDrain(
                pool=ctx.key, node=node.name,
                reason=f"{ctx.key}: un-draining {node.name} before launching anything: {why}"))
        # Launches stale_image.py will hold take no quota from the others and add no node.
        held = held_for(ctx.pool, ctx.obs) is not None
        admitted: list[NewNode] = []
        for new in sorted(g.new, key=lambda n: TRIGGER_ORDER[n.trigger]):
            gpus, usd = new.offer.gpus, new.offer.hourly_usd
            if held:
                admitted.append(new)
                continue
            refused = self.ledger.admit(ctx.team, gpus, usd)
            if refused is None:
                admitted.append(new)
                continue
            refusals.append(f"{new.trigger} node refused by {refused}")
            if new.trigger == "pending" and self.ledger.fleet_blocks(ctx.team, gpus, usd):
                self.blocked[ctx.key] = self.blocked.get(ctx.key, 0) + gpus
        self.launched[ctx.key] = [] if held else admitted
        self.actions += plan_parts.launches(ctx.key, admitted)
        for why in g.holds + sorted(set(refusals)):
            self.actions.append(Hold(pool=ctx.key, what="scale-up", reason=f"{ctx.key}: {why}"))
        return g

    def _reserved_for_higher_tier(self, ctx: PoolContext) -> str | None:
        """Draining capacity is what blocked higher tiers wait for: keep it leaving."""
        rank = ctx.policy.priority.rank
        for key in self.blocked:
            other = self._by_key[key]
            if other.policy.priority.rank < rank:
                return (f"{key} ({other.policy.priority.value} priority) waits for capacity "
                        "under the global cap")
        return None

    # -- scale-down -------------------------------------------------------------
    def _scale_down(self, ctx: PoolContext, g: Growth) -> None:
        budget = self.budgets[ctx.key]
        if not ctx.data_missing:
            self.actions += over_max.candidates(ctx, self.prices, self.now, budget)
        # Positive evidence of a fault is acted on even when other data is missing.
        if self.broken_held is not None and ctx.sick:
            names = ", ".join(n.name for n, _ in ctx.sick[:5]) + (" ..." if len(ctx.sick) > 5 else "")
            self.actions.append(Hold(pool=ctx.key, what="scale-down", reason=(
                f"{ctx.key}: {len(ctx.sick)} broken node(s) kept ({names}): {self.broken_held}")))
        else:
            for found in unhealthy.candidates(ctx, self.prices, self.now, budget):
                if isinstance(found, Hold):
                    self.actions.append(found)
                else:
                    self._replace(ctx, found, budget)
        if ctx.silent_kept is not None:
            self.actions.append(Hold(pool=ctx.key, what="scale-down",
                                     reason=f"{ctx.key}: {ctx.silent_kept}"))
        if ctx.data_missing:
            self.actions.append(Hold(pool=ctx.key, what="scale-down",
                                     reason=f"{ctx.key}: scale-down frozen: {ctx.data_missing}"))
            return
        for action in expired.candidates(ctx, self.prices, self.now, budget):
            self._replace(ctx, action, budget)
        if _wants(g):
            return  # capacity is wanted here; idle nodes will take the pending jobs
        last = max((t for t in (ctx.history.last_scale_up_at, ctx.history.last_scale_down_at)
                    if t is not None), default=None)
        cooldown = ctx.pool.scale_down.cooldown
        if last is not None and self.now - last < cooldown:
            if idle.idle_nodes(ctx, self.now):
                self.actions.append(Hold(
                    pool=ctx.key, what="scale-down",
                    reason=(f"{ctx.key}: idle nodes kept: scale-down cooldown "
                            f"{format_duration(cooldown)} since the last scaling at {last:%H:%M:%S}")))
            return
        self._scarcity_hold(ctx)
        self.actions += idle.candidates(ctx, self.prices, self.now, budget)
        if ctx.pool.scale_down.consolidate_below is not None and self._group_mates(ctx):
            self.consolidating.append(ctx)  # after every pool's own scale-down
            return
        self._consolidate(ctx, budget, None)

    def _scarcity_hold(self, ctx: PoolContext) -> None:
        """Say which spot nodes capacity.spot_scarcity keeps (idle.candidates and
        consolidate.candidates skip them; on-demand nodes go on as usual)."""
        if ctx.spot_scarce is None:
            return  # most pools: no per-node work
        idle_n = sum(1 for n in idle.idle_nodes(ctx, self.now) if scarcity.keeps(ctx, n))
        held = [f"{idle_n} idle spot node(s) kept"] if idle_n else []
        if ctx.pool.scale_down.consolidate_below is not None and any(
                scarcity.keeps(ctx, n) for n in ctx.serving):
            held.append("spot nodes are not consolidated")
        if held:
            self.actions.append(Hold(pool=ctx.key, what="scale-down", reason=(
                f"{ctx.key}: {' and '.join(held)}: {ctx.spot_scarce}: a spot node removed now "
                "may not come back before the outage ends")))

    def _consolidate(self, ctx: PoolContext, budget: Budget,
                     elsewhere: consolidate_group.Elsewhere | None) -> None:
        for move in consolidate.candidates(ctx, self.prices, self.now, budget, elsewhere):
            if isinstance(move, Replace):
                self._replace(ctx, move, budget)
            else:
                self.actions.append(move)
                if isinstance(move, Launch):
                    self.moved_in[move.pool] = self.moved_in.get(move.pool, 0) + 1

    def _consolidate_groups(self, growth: dict[str, Growth]) -> None:
        """Placement-group pools: drains of nodes whose replacement in another pool of the
        group is READY, then consolidation that may use the group's other pools."""
        grouped = [c for c in self.contexts if self._groups[c.key] is not None]
        for ctx in grouped:
            self._isolated([ctx], "consolidation", self._finish_moves, ctx)
        for ctx in self.consolidating:
            self._isolated([ctx], "consolidation", self._consolidate_across, ctx, growth)

    def _finish_moves(self, ctx: PoolContext) -> None:
        self.actions += consolidate_group.finish(ctx, self.budgets, self._group_mates(ctx))

    def _consolidate_across(self, ctx: PoolContext, growth: dict[str, Growth]) -> None:
        if self.free_room is None:
            self.free_room = consolidate_group.FreeRoom(self.prices)
        mates = [consolidate_group.Mate(c, self.budgets[c.key], self._room(c), _wants(growth[c.key]))
                 for c in self._group_mates(ctx)]
        elsewhere = consolidate_group.Elsewhere(ctx, mates, self.prices, self.free_room,
                                                partial(self.ledger.admit, ctx.team))
        self._consolidate(ctx, self.budgets[ctx.key], elsewhere)

    def _replace(self, ctx: PoolContext, action: Replace, budget: Budget) -> None:
        node = budget.taken[action.node]
        if ctx.size > ctx.pool.max_nodes:
            if action.trigger == "unhealthy":
                self.actions.append(Drain(
                    pool=ctx.key, node=node.name, trigger="unhealthy",
                    reason=f"{action.reason}; no replacement: the pool is above max_nodes"))
            return
        refused = self.ledger.admit(ctx.team, self.prices.node_gpus(node), self.prices.node_hourly(node))
        if refused is None:
            self.actions.append(action)
        elif action.trigger == "unhealthy":
            self.actions.append(Drain(pool=ctx.key, node=node.name, trigger="unhealthy",
                                      reason=f"{action.reason}; no replacement: {refused}"))
        else:
            self.actions.append(Hold(pool=ctx.key, what="scale-down",
                                     reason=f"{action.reason}; deferred: {refused}"))

    # -- clean-up and reports ---------------------------------------------------
    def _terminate(self, ctx: PoolContext, g: Growth) -> None:
        kept = {n.name for n, _ in g.cancels}
        unconfirmed = self._scheduler_missing(ctx) if ctx.drained else None
        if unconfirmed is not None:
            held = [n.name for n in ctx.drained if n.name not in kept]
            if held:
                names = ", ".join(held[:5]) + (" ..." if len(held) > 5 else "")
                self.actions.append(Hold(pool=ctx.key, what="scale-down", reason=(
                    f"{ctx.key}: {len(held)} drained node(s) kept ({names}): {unconfirmed}, "
                    "so that no job is left on them cannot be confirmed; terminated once the "
                    "scheduler is read again")))
        for node in ctx.drained:
            if node.name not in kept and unconfirmed is None:
                self.actions.append(Terminate(
                    pool=ctx.key, node=node.name,
                    reason=f"{ctx.key}: {node.name} is drained ({node.drain_trigger or 'no jobs left'}); "
                           "terminating it"))
        for node in ctx.failed:
            self.actions.append(Terminate(
                pool=ctx.key, node=node.name,
                reason=f"{ctx.key}: cleaning up {node.name} after {node.state.value}: {node.reason}"))

    def _scheduler_missing(self, ctx: PoolContext) -> str | None:
        """Why the pool's scheduler was not read this tick (a drained node's drain is then
        unconfirmed: it may have been forced DRAINED by a timeout), or None."""
        kind = ctx.pool.cluster.kind
        if kind == "none":
            return None
        if kind in self.snapshot.missing:
            return f"{kind} could not be read"
        if ctx.obs.scheduler_missing:
            return f"scheduler data missing: {ctx.obs.scheduler_missing}"
        return None

    def _report_jobs(self, ctx: PoolContext) -> None:
        self.actions += long_jobs.reports(ctx, self.now, self.settings.long_job_release_exempt)


def _wants(g: Growth) -> bool:
    """Whether the pool's pending jobs or floors want capacity this tick."""
    return bool(g.new or g.cancels or g.has_demand)

