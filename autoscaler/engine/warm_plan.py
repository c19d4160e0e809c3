"""A plan with the warm pools applied: what the service does after ``decide()``, with the
rules of engine/warm_pool.py (the simulator applies the same rules, sim/warm.py).

* Each launch of a pool with stopped warm nodes of its type and market becomes a
  :class:`StartWarm` per warm node it takes; the rest of it is launched cold, or held (a
  Hold with the reason) while warm nodes of the pool are starting: they are READY sooner
  than a cold node, and the next plans ask for what they did not cover.
* A warm node whose zone refused its type and market within the pool's
  ``capacity_error_backoff`` (a start refused, or any launch) is not started meanwhile.
* Launches that stand in for named nodes (interruption replacements, return to spot,
  consolidation moves) are left as they are: their slots are promised to those nodes.
* Every pool holding warm nodes gets its refresh: stale (the pool's bootstrap hash moved
  on), too old (``lifetime.max_node_age``) or surplus warm nodes are terminated, at most
  ``warm_pool.retire_limit`` a tick (the pool's max_draining_percent of them, at least 1),
  and the pool is refilled to its target with ``warm-pool`` launches. A pool whose
  ``warm_pool`` is gone has its warm nodes retired so. A pool whose policy is gone has its
  warm nodes decided as removed_pools.py decides its other nodes: kept unless
  ``drain_removed_pools``, kept on an empty policy set or missing signals, and otherwise
  terminated within the removed-pool share and count. While warm nodes of the pool are
  starting, its refresh waits: a start is one apply of the pool, and an instance created
  or destroyed in that apply would hold the start until it is done (Terraform applies a
  workspace's changes together; 20 s more per start on the sandbox).

Pure: the caller hands in the warm nodes (stopped or on their way), the pool's started
warm nodes not READY yet, the forecasts, the running GPUs and ``now``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from autoscaler.engine import removed_pools
from autoscaler.engine.pricing import Prices
from autoscaler.engine.scale_down.budget import share
from autoscaler.engine.settings import EngineSettings
from autoscaler.engine.warm_pool import (
    WarmNode,
    refresh,
    retire_limit,
    serve,
    target,
    warm_market,
)
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.plan import Action, Drain, Hold, Launch, Plan, StartWarm, Terminate
from autoscaler.model.snapshot import ForecastFloor
from autoscaler.policy.models import Market, Pool, TeamPolicy, pool_key


@dataclass(frozen=True)
class WarmInputs:
    """What the warm pools are decided from, besides the plan."""

    warm: Sequence[Node]  # nodes in their warm pool (progress.in_warm_pool), not gone
    starting: Mapping[str, int] = field(default_factory=dict)  # pool -> started, not READY
    running_gpus: Mapping[str, float] = field(default_factory=dict)  # pool -> GPUs on their way or serving
    forecasts: Mapping[str, ForecastFloor] = field(default_factory=dict)  # over WARM_AHEAD
    images: Mapping[str, str] = field(default_factory=dict)  # pool -> its bootstrap hash now
    # For the warm nodes of pools no policy defines (removed_pools.py's rules): the engine
    # settings (drain_removed_pools and its budgets) and the snapshot's missing sources.
    # The defaults keep such warm nodes (drain_removed_pools is off by default).
    settings: EngineSettings = field(default_factory=EngineSettings)
    missing: frozenset[str] = frozenset()


def warm_node(node: Node) -> WarmNode:
    warm = node.progress.warm
    return WarmNode(node.name, node.instance_type, node.market, node.created_at,
                    warm.image if warm is not None else "", ready=node.state is NodeState.WARM)


def with_warm_pools(plan: Plan, policies: Mapping[str, TeamPolicy], inputs: WarmInputs,
                    prices: Prices, now: datetime) -> Plan:
    pools = {pool_key(team, p.name): p for team, policy in policies.items() for p in policy.pools}
    warm_by_pool: dict[str, list[Node]] = {}
    for node in inputs.warm:
        warm_by_pool.setdefault(node.pool_key, []).append(node)
    actions: list[Action] = []
    for action in plan.actions:
        pool = pools.get(action.pool)
        if (not isinstance(action, Launch) or action.replaces or pool is None
                or pool.warm_pool is None or action.trigger == "warm-pool"):
            actions.append(action)
            continue
        # A warm node in a zone that refused its type lately stays stopped: a start there
        # would be refused again (the launch goes cold, elsewhere, by the engine's offers).
        usable = [n for n in warm_by_pool.get(action.pool, [])
                  if prices.capacity_error(pool, n.instance_type, n.zone, n.market) is None]
        actions += _served(action, usable, inputs.starting.get(action.pool, 0))
        taken = {a.node for a in actions if isinstance(a, StartWarm)}
        warm_by_pool[action.pool] = [n for n in warm_by_pool.get(action.pool, [])
                                     if n.name not in taken]
    starting = {a.pool for a in actions if isinstance(a, StartWarm)} | {
        k for k, n in inputs.starting.items() if n}
    # Removed-pool removals the plan makes already: warm ones share their fleet-wide count.
    removed_left = inputs.settings.removed_pool_drains_per_tick - sum(
        1 for a in plan.actions if a.pool not in pools and (
            isinstance(a, Terminate) or (isinstance(a, Drain) and a.trigger == "pool-removed")))
    frozen = removed_pools.frozen(policies, inputs.missing)
    for key in sorted(set(warm_by_pool) | {k for k, p in pools.items() if p.warm_pool}):
        if key not in pools:
            out, used = _orphaned(key, warm_by_pool.get(key, []), inputs.settings, frozen,
                                  removed_left)
            actions += out
            removed_left -= used
            continue
        if key in starting:
            actions.append(Hold(pool=key, what="scale-up", reason=(
                f"{key}: warm pool refreshed once its warm nodes starting are READY (a start "
                "waits for every instance created or destroyed in the same apply)")))
            continue
        actions += _refreshed(key, pools[key], warm_by_pool.get(key, []), inputs, prices, now)
    return plan.model_copy(update={"actions": actions})


def _served(launch: Launch, warm: list[Node], starting: int) -> list[Action]:
    [starts] = serve([launch], [warm_node(n) for n in warm], starting)
    by_name = {n.name: n for n in warm}
    out: list[Action] = [
        StartWarm(pool=launch.pool, node=name, instance_type=launch.instance_type,
                  market=launch.market, gpus_per_node=launch.gpus_per_node,
                  hourly_usd=launch.hourly_usd,
                  reason=f"{starts.reason} (for: {launch.reason}); {by_name[name].zone or 'its zone'}")
        for name in starts.start]
    if starts.cold:
        out.append(launch.model_copy(update={
            "count": starts.cold, "reason": f"{launch.reason}; {starts.reason}"}))
    if starts.held:
        out.append(Hold(pool=launch.pool, what="scale-up", reason=f"{launch.reason}; {starts.reason}"))
    return out


def _orphaned(key: str, warm: list[Node], settings: EngineSettings, frozen: str | None,
              fleet_left: int) -> tuple[list[Action], int]:
    """Warm nodes of a pool no policy defines, as removed_pools.py decides its other nodes:
    kept unless drain_removed_pools, never on an empty policy set or missing signals, and
    within the removed-pool share and fleet-wide count (oldest first). Returns the actions
    and the removals used."""
    if not warm:
        return [], 0
    if not settings.drain_removed_pools:
        return [Hold(pool=key, what="scale-down", reason=(
            f"{key}: no policy defines this pool any more; its {len(warm)} warm node(s) are "
            "kept until drain_removed_pools is enabled"))], 0
    if frozen is not None:
        return [Hold(pool=key, what="scale-down", reason=(
            f"{key}: the pool's policy was removed, but its {len(warm)} warm node(s) are "
            f"kept: {frozen}"))], 0
    left = max(0, min(share(len(warm), settings.removed_pool_drain_percent), fleet_left))
    oldest = sorted(warm, key=lambda n: (n.created_at, n.name))
    out: list[Action] = [Terminate(pool=key, node=n.name, reason=(
        f"{n.name}: warm node of {key}: the pool's policy was removed and "
        "drain_removed_pools is on")) for n in oldest[:left]]
    if len(warm) > left:
        out.append(Hold(pool=key, what="scale-down", reason=(
            f"{key}: {len(warm) - left} warm node(s) of the removed pool wait: at most "
            f"{settings.removed_pool_drain_percent}% of them ({len(warm)}) are terminated at "
            f"once and {settings.removed_pool_drains_per_tick} removed-pool node(s) leave per "
            "tick fleet-wide")))
    return out, left


def _refreshed(key: str, pool: Pool, warm: list[Node], inputs: WarmInputs,
               prices: Prices, now: datetime) -> list[Action]:
    image = inputs.images.get(key)
    if image is None and pool.warm_pool is not None:
        # Without the pool's hash, staleness cannot be told: keep what is there, add none.
        return [Hold(pool=key, what="scale-up", reason=f"{key}: warm pool not refreshed: the "
                     "pool's bootstrap hash is not known this tick")] if warm else []
    itype = _smallest(pool, prices)
    goal = target(pool, inputs.forecasts.get(key), inputs.running_gpus.get(key, 0.0),
                  itype[1] if itype else 1)
    decision = refresh(pool, [warm_node(n) for n in warm], goal, image or "", now)
    out: list[Action] = [Terminate(pool=key, node=name, reason=f"{name}: retired from the warm "
                                   f"pool: {why}") for name, why in decision.retire]
    if decision.deferred:
        out.append(Hold(pool=key, what="scale-down", reason=(
            f"{key}: {decision.deferred} warm node(s) wait for their retirement: at most "
            f"{retire_limit(pool, len(warm))} retired per tick (max_draining_percent "
            f"{pool.scale_down.max_draining_percent:g} of {len(warm)} warm node(s), at least 1)")))
    if decision.refill and itype is not None:
        market = warm_market(pool)
        hourly = _hourly(prices, pool, itype[0], market)
        out.append(Launch(pool=key, instance_type=itype[0], market=market,
                          count=decision.refill, gpus_per_node=itype[1], hourly_usd=hourly,
                          trigger="warm-pool", image=image, reason=decision.reason))
    return out


def _smallest(pool: Pool, prices: Prices) -> tuple[str, int] | None:
    """The pool's type with the fewest GPUs (what its floor launches): the warm nodes' type."""
    found = [(itype.gpus, i, name) for i, name in enumerate(pool.instance_types)
             if (itype := prices.itype(pool.cloud.value, name)) is not None]
    if not found:
        return None
    gpus, _, name = min(found)
    return name, gpus


def _hourly(prices: Prices, pool: Pool, type_name: str, market: Market) -> float:
    """What a warm node costs while it bootstraps (stopped, its volume: catalog/volumes.py)."""
    cloud, region = pool.cloud.value, pool.region
    od = prices.on_demand(cloud, region, type_name, None) or 0.0
    if market is Market.SPOT:
        return prices.spot(cloud, region, type_name, None) or od
    return od


__all__ = ["WarmInputs", "warm_node", "with_warm_pools"]
