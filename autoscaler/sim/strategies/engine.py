""""ours": the service's own ``decide()`` run every tick on the simulated cluster.

Nothing here re-implements a rule: the strategy observes (FleetView + Snapshot), calls
``autoscaler.engine.decide`` and applies the Plan through the executor's own interpreter
(``fleet.intents``). The pool history that cooldowns read comes from the same intents, so
it is the store's: which actions count as a scale-up or a scale-down is decided there.

A refused launch is what the service's signals report (a capacity error, held for the
pool's ``capacity_error_backoff``) and, where the service's launch backoff counts it
(``model/backoff.py``: a spot refusal only where the pool goes on-demand at once), the
backoff's held error too, counted with the same :class:`~autoscaler.model.backoff.Streak`
and reset when a node of the key becomes READY. ``escalate_refusals=False`` replays the
capacity error alone (the rule before issue 33 item 2).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta

from autoscaler.catalog import Catalog
from autoscaler.engine import decide
from autoscaler.engine.settings import EngineSettings
from autoscaler.engine.warm_pool import WARM_AHEAD
from autoscaler.fleet.intents import NewNode, Remove, StartDrain, StopDrain, interpret
from autoscaler.forecast.predictive import Forecaster
from autoscaler.model.backoff import Streak, first, refusal_escalates
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import FleetView, PoolHistory
from autoscaler.model.plan import Plan
from autoscaler.model.snapshot import CapacityError, ForecastFloor, Snapshot
from autoscaler.policy.models import Market, Pool, TeamPolicy
from autoscaler.sim.cluster import SimNode
from autoscaler.sim.observe import EPOCH, Observer, to_datetime
from autoscaler.sim.replay import Replay
from autoscaler.sim.strategies.base import Strategy
from autoscaler.sim.warm import WarmPoolSim

S = NodeState
_REFUSED = "InsufficientInstanceCapacity"  # one of model/backoff.SPOT_NO_STOCK
_CAUSE = f"provision failed: {_REFUSED}"  # service/control/backoff.cause_of of the refusal
_HELD = "launch-backoff"  # service/control/backoff.CODE
StreakKey = tuple[str, str, str | None, Market]  # pool name, type, zone, market


class EngineStrategy(Strategy):
    name = "ours"
    description = "gpu-autoscaler's decide() with the team policy"

    def __init__(self, policy: TeamPolicy, pool: Pool, catalog: Catalog, interval: float = 30.0,
                 settings: EngineSettings | None = None, wake_after: float | None = None,
                 forecaster: Forecaster | None = None, escalate_refusals: bool = True):
        self.policies = {policy.team: policy.model_copy(update={"pools": [pool]})}
        self.priority = policy.priority
        self.escalate_refusals = escalate_refusals
        self.streaks: dict[StreakKey, Streak] = {}  # refusals in a row the backoff counts
        self.pool, self.catalog, self.interval = pool, catalog, interval
        self.wake_after = wake_after
        self.settings = settings or EngineSettings()
        self.observer = Observer(policy.team, pool, pool.cloud.value, pool.region)
        self.history = PoolHistory()
        self.errors: list[CapacityError] = []
        self.actions: Counter[str] = Counter()
        self.decide_seconds = 0.0
        self.decisions = 0
        # CPU seconds of each part of a tick (time.process_time), for the benchmarks
        self.cpu: defaultdict[str, float] = defaultdict(float)
        # The pool's forecast: a floor in the Snapshot for "predictive"; for any strategy
        # with warm_pool.size forecast, what the warm target follows.
        self.forecaster = forecaster
        self.warm: WarmPoolSim | None = None

    def begin(self, replay: Replay, now: float) -> None:
        if self.pool.warm_pool is not None:
            self.warm = WarmPoolSim(self.pool, replay.cluster)

    def parameters(self) -> dict[str, object]:
        return {"tick_s": self.interval, "wake_after_s": self.wake_after,
                "policy": self.pool.model_dump(mode="json")}

    def observe(self, replay: Replay, now: float) -> tuple[FleetView, Snapshot]:
        nodes = list(replay.cluster.nodes.values())
        self.forget_errors(replay, now, error_window(self.pool))
        fleet = self.observer.fleet(nodes, self.history)
        return fleet, self.observer.snapshot(nodes, replay.cluster, self.errors, now,
                                             scores=replay.spot_scores([self.pool], now))

    def tick(self, replay: Replay, now: float) -> None:
        cpu = time.process_time()
        replay.sample_util(now)
        sampled = time.process_time()
        fleet, snapshot = self.observe(replay, now)
        observed = time.process_time()
        began = time.perf_counter()
        plan = decide(self.policies, fleet, snapshot, to_datetime(now), catalog=self.catalog,
                      settings=self.settings)
        self.decide_seconds += time.perf_counter() - began
        decided = time.process_time()
        self.decisions += 1
        if self.warm is not None:
            self.warm.plan(plan, now)
        self.apply(replay, plan, now)
        if self.warm is not None:
            self.warm.refill(replay, self.warm_forecast(now), now)
        self.cpu["sample"] += sampled - cpu
        self.cpu["observe"] += observed - sampled
        self.cpu["decide"] += decided - observed
        self.cpu["apply"] += time.process_time() - decided

    def forget_errors(self, replay: Replay, now: float, backoff: timedelta) -> None:
        """Drop the errors that hold nothing at ``now``, and the streaks (with their held
        errors) of keys where a node became READY since their last refusal."""
        at = to_datetime(now)
        if self.streaks:
            self._reset_streaks(replay)
        self.errors = [e for e in self.errors
                       if (at < e.until if e.until is not None else at - e.at < backoff)]

    def _reset_streaks(self, replay: Replay) -> None:
        last = {k: (s.last_at - EPOCH).total_seconds() for k, s in self.streaks.items()}
        for node in replay.cluster.nodes.values():
            if node.ready_at is None:
                continue
            key = (self.pool_of(node).name, node.itype.name, node.zone, node.market)
            refused = last.get(key)
            if refused is not None and node.ready_at > refused:
                del self.streaks[key], last[key]
                self._drop_held(self.pool_of(node), key)

    def capacity_error(self, replay: Replay, node: SimNode, now: float) -> None:
        # One error per (type, zone, market) and kind, the latest: what the engine checks is
        # whether one happened within the back-off, and a refused batch of 40 nodes is one event.
        pool = self.pool_of(node)
        at = to_datetime(now)
        where = (node.itype.name, node.zone, node.market)
        self.errors = [e for e in self.errors
                       if e.until is not None or (e.instance_type, e.zone, e.market) != where]
        self.errors.append(CapacityError.model_construct(
            cloud=pool.cloud.value, region=pool.region, instance_type=node.itype.name,
            zone=node.zone, market=node.market, code=_REFUSED, at=at, until=None,
            message="no spot capacity in the zone (spot trace)"))
        if (self.escalate_refusals and node.market is Market.SPOT
                and refusal_escalates(pool.capacity, self.priority)):
            self._count_refusal(pool, node, at)
        # The work is unserved again: with tick.wake_after, the service's waker decides it
        # sooner (Service.work_finished), rather than at the next tick.
        replay.demand(now)

    def _count_refusal(self, pool: Pool, node: SimNode, at: datetime) -> None:
        """The service's launch backoff of the refusal (service/control/backoff.py)."""
        key = (pool.name, node.itype.name, node.zone, node.market)
        seen = self.streaks.get(key)
        streak = self.streaks[key] = first(_CAUSE, at) if seen is None else seen.then(_CAUSE, at)
        self._drop_held(pool, key)
        self.errors.append(CapacityError.model_construct(
            cloud=pool.cloud.value, region=pool.region, instance_type=node.itype.name,
            zone=node.zone, market=node.market, code=_HELD, at=at, until=streak.next_try,
            message=f"{_CAUSE}, {streak.count} time(s) in a row; next try {streak.next_try:%H:%M:%S}"))

    def _drop_held(self, pool: Pool, key: StreakKey) -> None:
        """Forget the key's launch-backoff error (a new count replaces it, a READY ends it)."""
        self.errors = [e for e in self.errors if not (
            e.until is not None and e.region == pool.region
            and (e.instance_type, e.zone, e.market) == key[1:])]

    def pool_of(self, node: SimNode) -> Pool:
        """The pool a node was launched for (its region is where a refusal happened)."""
        return self.pool

    def apply(self, replay: Replay, plan: Plan, now: float) -> None:
        """The plan's intents (``fleet.intents``, as the executor reads them) on the
        simulated cluster; the cooldown history from the same intents."""
        nodes = replay.cluster.nodes
        for action in plan.actions:
            self.actions[action.kind] += 1
        up: set[str] = set()
        down: set[str] = set()
        for intent in interpret(plan, nodes):
            if isinstance(intent, NewNode):
                if self.warm is not None and self.warm.holds(intent.instance_type, intent.market):
                    continue
                new = self.launch(replay, intent, now)
                new.replaces, new.launched_for = intent.replaces, intent.trigger
                new.fallback_from_spot = intent.fallback_from_spot
                if intent.replaces:
                    _mark_replaced(nodes.get(intent.replaces))
                if intent.cooldown == "up":
                    up.add(intent.pool)
            elif isinstance(intent, StartDrain):
                node = nodes.get(intent.node)
                if node is not None and node.state is S.READY:
                    replay.drain(node, now, intent.trigger, self._kill_after(intent.trigger))
                    replay.cluster.totals.moves_to_spot += intent.trigger == "spot-returned"
                    if intent.cooldown == "down":
                        down.add(intent.pool)
            elif isinstance(intent, StopDrain):
                node = nodes.get(intent.node)
                if node is not None and node.state in (S.DRAINING, S.DRAINED):
                    replay.cancel_drain(node, now)
            elif isinstance(intent, Remove):
                node = nodes.get(intent.node)
                if node is not None:
                    replay.terminate(node, now, "engine-terminate")
        if up or down:
            self.scaled(up, down, now)

    def warm_forecast(self, now: float) -> ForecastFloor | None:
        """The pool's forecast over the warm pool's horizon (engine/warm_pool.py)."""
        if self.forecaster is None or self.forecaster.warm_quantile is None:
            return None
        return self.forecaster.warm(now, to_datetime(now), WARM_AHEAD.total_seconds())

    def launch(self, replay: Replay, intent: NewNode, now: float) -> SimNode:
        if self.warm is not None:
            started = self.warm.start(replay, intent.instance_type, intent.market, intent.zone, now)
            if started is not None:
                return started
        return replay.launch(intent.instance_type, intent.market, intent.zone, now)

    def scaled(self, up: set[str], down: set[str], now: float) -> None:
        """Pools (keys) that scaled up or down at ``now``: the cooldown history."""
        at = to_datetime(now)
        self.history = PoolHistory(
            last_scale_up_at=at if up else self.history.last_scale_up_at,
            last_scale_down_at=at if down else self.history.last_scale_down_at)

    def _kill_after(self, trigger: str) -> float:
        """Seconds from a drain to the kill of the jobs still running: as the executor,
        signal them after the policy's drain_wait and requeue them checkpoint_grace later."""
        sd = self.pool.scale_down
        return (sd.drain_wait(trigger) + sd.checkpoint_grace).total_seconds()


def _mark_replaced(node: SimNode | None) -> None:
    if node is not None and not node.replacement_requested:
        node.replacement_requested = True
        node.epoch += 1  # the cached Node view must show it


def error_window(pool: Pool) -> timedelta:
    """How long a capacity error counts for the pool: its back-off, or the window of
    capacity.spot_scarcity when that is longer (a refusal past the back-off holds no offer
    but is still evidence of an outage; the service keeps every error for two hours)."""
    scarce = pool.capacity.spot_scarcity
    return max(pool.capacity.capacity_error_backoff, scarce.within if scarce is not None else timedelta(0))
