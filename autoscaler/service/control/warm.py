"""The warm-pool step of a tick: decide() sees the fleet without the warm pools, and the
plan it returns goes through engine/warm_plan.py before it is recorded.

A warm-pool node (``progress.warm``, not started) is never capacity: left in decide()'s
fleet, a node on its way to being stopped would count as a launch in flight and a stopped
one would look like a node that never joined. Only a warm node whose launch or bootstrap
failed stays in that fleet, so the engine terminates it like any failed node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from autoscaler.engine.pricing import Prices
from autoscaler.engine.settings import EngineSettings
from autoscaler.engine.warm_plan import WarmInputs, with_warm_pools
from autoscaler.model.lifecycle import ACTIVE, FAILED, IN_FLIGHT, WARM_POOL
from autoscaler.model.node import FleetView, Node
from autoscaler.model.plan import Plan
from autoscaler.model.snapshot import ForecastFloor
from autoscaler.policy.models import TeamPolicy

log = logging.getLogger(__name__)

# Pool key -> the pool's bootstrap hash now (actuators/bootstrap_hash.py), for the pools
# with a warm pool: a warm node warmed with another is stale.
WarmHashes = Callable[[Mapping[str, TeamPolicy]], dict[str, str]]


def split(fleet: FleetView) -> tuple[FleetView, list[Node]]:
    """decide()'s fleet, and the warm-pool nodes it must not see."""
    warm = [n for n in fleet.nodes if n.progress.in_warm_pool and n.state not in FAILED]
    if not warm:
        return fleet, []
    names = {n.name for n in warm}
    return FleetView(nodes=[n for n in fleet.nodes if n.name not in names],
                     history=fleet.history), warm


def apply(plan: Plan, policies: Mapping[str, TeamPolicy], fleet: FleetView, warm: list[Node],
          prices: Prices, forecasts: Mapping[str, ForecastFloor], hashes: WarmHashes | None,
          now: datetime, settings: EngineSettings | None = None,
          missing: Iterable[str] = ()) -> Plan:
    """``plan`` with the warm pools' starts, holds, retirements and refills. ``settings``
    and ``missing`` decide the warm nodes of pools no policy defines (removed_pools.py's
    rules); without them those nodes are kept."""
    if not warm and not any(p.warm_pool for t in policies.values() for p in t.pools):
        return plan
    images: dict[str, str] = {}
    if hashes is not None:
        try:
            images = hashes(policies)
        except Exception:  # refresh waits (warm_plan holds it); launches still start warm nodes
            log.exception("warm pools: the pools' bootstrap hashes were not computed")
    starting: dict[str, int] = {}
    running: dict[str, float] = {}
    for node in fleet.nodes:
        if node.state in ACTIVE:
            running[node.pool_key] = running.get(node.pool_key, 0.0) + prices.node_gpus(node)
        if node.progress.warm is not None and node.state in IN_FLIGHT:
            starting[node.pool_key] = starting.get(node.pool_key, 0) + 1
    inputs = WarmInputs(warm=[n for n in warm if n.state in IN_FLIGHT | WARM_POOL],
                        starting=starting, running_gpus=running, forecasts=forecasts,
                        images=images, settings=settings or EngineSettings(),
                        missing=frozenset(missing))
    return with_warm_pools(plan, policies, inputs, prices, now)
