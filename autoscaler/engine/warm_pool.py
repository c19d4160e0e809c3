"""Warm pools (policy ``warm_pool``): stopped, bootstrapped instances a launch starts before
it launches cold ones, as EC2 Auto Scaling warm pools keep them (stopped state: only the
volume is billed). Three decisions, each with its numbers in the reason:

* :func:`target`: how many warm nodes the pool keeps: ``size`` N, or with ``size:
  forecast`` the pool's forecast peak over the next ``WARM_AHEAD`` (the predictive floor's
  model at ``warm_pool.quantile``) minus the GPUs running or on their way, in nodes of the
  pool's smallest type; in [0, max].
* :func:`serve`: of a plan's launches, which start warm nodes (same type and market,
  youngest first: a started node serves longest before max_node_age) and how many are
  launched cold: none while warm nodes of the pool are starting (issue 37: the warm nodes
  rejoin, pass the health check and are READY, and only then is a cold launch made for
  what is left; the next plans see them and ask for what they did not cover).
* :func:`refresh`: which warm nodes are retired (stale image, past max_node_age, above max),
  at most :func:`retire_limit` per tick, and how many are launched to refill the pool to
  its target.

A warm node is never capacity: it is not in the fleet the engine sizes, takes no jobs, and
counts only once started (then it is an ordinary node on its way to READY). Pure: the
caller hands in the warm nodes, the forecast, the running GPUs and ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from autoscaler.engine.scale_down.budget import share
from autoscaler.model.plan import Launch
from autoscaler.model.snapshot import ForecastFloor
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Market, Pool, percentile

# How far ahead the warm target looks. The floor (predictive: scale) already holds the
# forecast for the next lead (one boot); at the same quantile over the same window, a warm
# target would be the floor again and keep no node. A warm node takes a cold boot to get
# warm, and the forecaster re-forecasts every hour: the warm pool stands ready for the
# peaks of the hour ahead that the floor does not hold yet, at its own, higher quantile.
WARM_AHEAD = timedelta(hours=1)


def forecast_quantile(pool: Pool) -> float | None:
    """The quantile a ``size: forecast`` warm pool needs forecast; None: it needs none."""
    warm = pool.warm_pool
    return warm.quantile if warm is not None and warm.size == "forecast" else None


@dataclass(frozen=True)
class WarmNode:
    """A stopped (or still bootstrapping, ``ready`` False) instance of the warm pool."""

    name: str
    instance_type: str
    market: Market
    launched_at: datetime  # its age, as max_node_age reads it, counts from here
    image: str  # what it was bootstrapped from (the pool's bootstrap hash or base image)
    ready: bool = True  # bootstrapped and stopped; False: still bootstrapping


def warm_market(pool: Pool) -> Market:
    """The market of the pool's warm nodes: on-demand when the pool launches on-demand at
    all (EC2 stops a spot instance only as a persistent request; warm pools of EC2 Auto
    Scaling take on-demand only), else spot (the simulator models spot-only warm pools;
    the service refuses them, service/config/warm_pools.py)."""
    markets = pool.capacity.markets()
    return Market.ON_DEMAND if Market.ON_DEMAND in markets else markets[0]


@dataclass(frozen=True)
class Target:
    nodes: int
    reason: str


@dataclass(frozen=True)
class Starts:
    """One launch of a plan: the warm nodes it starts and the nodes it launches cold."""

    start: tuple[str, ...]
    cold: int
    held: int  # cold launches not made: warm nodes of the pool are starting
    reason: str


@dataclass(frozen=True)
class Refresh:
    retire: tuple[tuple[str, str], ...]  # (warm node, why)
    refill: int
    reason: str
    deferred: int = 0  # retirements beyond this tick's retire_limit: next ticks'


def retire_limit(pool: Pool, warm: int) -> int:
    """Warm nodes the pool may retire per tick: its max_draining_percent of them, at least 1
    (a warm node is no capacity, but no removal path goes without a budget)."""
    return share(warm, pool.scale_down.max_draining_percent)


def target(pool: Pool, forecast: ForecastFloor | None, running_gpus: float,
           gpus_per_node: int) -> Target:
    """The pool's warm target; 0 without a warm pool. ``forecast``: the pool's forecast
    over the next ``WARM_AHEAD``."""
    warm = pool.warm_pool
    if warm is None:
        return Target(0, "no warm pool")
    if isinstance(warm.size, int):
        nodes = min(warm.size, warm.max)
        return Target(nodes, f"warm target {nodes} (warm_pool.size), max {warm.max}")
    if forecast is None:
        return Target(0, f"warm target 0: no forecast for the pool yet (size: forecast), "
                      f"max {warm.max}")
    per_node = max(gpus_per_node, 1)
    missing = forecast.gpus - running_gpus
    wanted = max(0, math.ceil(missing / per_node - 1e-9))
    nodes = min(wanted, warm.max)
    why = (f"warm target {nodes} = forecast {percentile(warm.quantile)} {forecast.gpus:g} GPUs - "
           f"{running_gpus:g} running")
    if per_node > 1:
        why += f", in {per_node}-GPU nodes"
    why += f", max {warm.max}"
    if wanted > warm.max:
        why += f" (capped from {wanted})"
    return Target(nodes, why)


def serve(launches: Sequence[Launch], warm: Sequence[WarmNode], starting: int = 0) -> list[Starts]:
    """Each launch's warm starts, in the plan's order: a warm node serves one launch only.
    ``starting``: warm nodes of the pool started earlier and not READY yet."""
    free = sorted((w for w in warm if w.ready), key=lambda w: (w.launched_at, w.name), reverse=True)
    out = []
    for launch in launches:
        fits = [w for w in free if (w.instance_type, w.market) == (launch.instance_type, launch.market)]
        chosen = fits[:launch.count]
        taken = {w.name for w in chosen}
        free = [w for w in free if w.name not in taken]
        starting += len(chosen)
        rest = launch.count - len(chosen)
        held = rest if starting else 0
        what = f"{launch.count} x {launch.instance_type} {launch.market.value}"
        if chosen:
            why = (f"{len(chosen)} of {launch.count} launch(es) of {what} start warm nodes "
                   f"({', '.join(w.name for w in chosen)})")
        else:
            why = f"{what}: no warm {launch.instance_type} {launch.market.value} node stopped"
        if held:
            why += f"; {held} cold held until the {starting} warm node(s) starting are READY"
        else:
            why += f"; {rest} cold"
        out.append(Starts(tuple(w.name for w in chosen), rest - held, held, why))
    return out


def refresh(pool: Pool, warm: Sequence[WarmNode], goal: Target, image: str,
            now: datetime) -> Refresh:
    """Warm nodes retired and the refill. A node above the target but within max is kept:
    stopped it costs its volume only, while bootstrapping it again costs its boot time at
    the instance's full price (the forecast target moves every tick)."""
    most = pool.warm_pool.max if pool.warm_pool is not None else 0
    age_limit = pool.lifetime.max_node_age
    retire: list[tuple[str, str]] = []
    kept: list[WarmNode] = []
    for node in sorted(warm, key=lambda w: (w.launched_at, w.name)):
        age = now - node.launched_at
        if node.image != image:
            retire.append((node.name, f"stale image {node.image} (the pool's is now {image})"))
        elif age_limit is not None and age >= age_limit:
            retire.append((node.name, f"age {format_duration(age)} past lifetime.max_node_age "
                           f"{format_duration(age_limit)}"))
        else:
            kept.append(node)
    surplus = max(0, len(kept) - most)
    for node in kept[:surplus]:  # oldest first
        retire.append((node.name, f"above warm_pool.max {most}"))
    kept = kept[surplus:]
    # Stale and old ones (oldest first), then surplus, within the per-tick limit; those
    # that wait are still there, so the refill counts them (no more than max at once).
    limit = retire_limit(pool, len(warm))
    deferred = max(0, len(retire) - limit)
    retire = retire[:limit]
    refill = max(0, goal.nodes - len(kept) - deferred)
    why = (f"{goal.reason}; {len(kept)} warm node(s) kept "
           f"({sum(not w.ready for w in kept)} bootstrapping), {len(retire)} retired, "
           f"{refill} launched to refill")
    if deferred:
        why += (f"; {deferred} more to retire wait: at most {limit} retired per tick "
                f"(max_draining_percent {pool.scale_down.max_draining_percent:g} of "
                f"{len(warm)} warm node(s), at least 1)")
    return Refresh(tuple(retire), refill, why, deferred)
