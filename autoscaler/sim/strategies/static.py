"""Static fleet sized for the peak: what a team does when it does not autoscale.

Size: the peak concurrent GPU demand of the window (each job run from its arrival for its
trace run time, shares summed), divided by the GPUs of the pool's largest instance type,
rounded up; that type, so every job in the trace fits; no more than the pool's
``max_nodes`` and the team's GPU quota allow (as any fleet the team may run). Nodes lost
to spot interruptions or refused launches are replaced at the next tick (an auto-scaling
group with a fixed size).
"""

from __future__ import annotations

import math

from autoscaler.catalog import Catalog
from autoscaler.policy.models import Pool
from autoscaler.sim.cluster import SimNode
from autoscaler.sim.replay import Replay
from autoscaler.sim.strategies.base import Strategy
from autoscaler.sim.strategies.common import Buyer, Limits, active_nodes, mix_for, reap
from autoscaler.traces import Workload


def peak_demand(workload: Workload) -> float:
    """Most GPUs (shares summed) held at once if every job ran at its arrival."""
    edges = sorted([(j.arrival, j.gpus) for j in workload.jobs]
                   + [(j.arrival + j.duration, -j.gpus) for j in workload.jobs],
                   key=lambda e: (e[0], e[1]))  # ends before starts at the same second
    level = peak = 0.0
    for _, delta in edges:
        level += delta
        peak = max(peak, level)
    return peak


def largest_type(pool: Pool, catalog: Catalog) -> tuple[str, int]:
    types = [catalog.get(pool.cloud.value, name) for name in pool.instance_types]
    best = max(types, key=lambda t: (t.gpus, -(t.on_demand_usd or 0)))
    return best.name, best.gpus


class StaticFleet(Strategy):
    name = "static"
    description = "fixed fleet sized for the window's peak demand"
    interval = 60.0

    def __init__(self, type_name: str, count: int, wanted: int | None = None):
        self.type_name, self.count = type_name, count
        self.wanted = count if wanted is None else wanted  # the peak's size before the limits
        self.buyer = Buyer()

    @classmethod
    def for_workload(cls, workload: Workload, pool: Pool, catalog: Catalog,
                     quota_gpus: int | None = None) -> StaticFleet:
        name, gpus = largest_type(pool, catalog)
        wanted = max(1, math.ceil(peak_demand(workload) / gpus - 1e-9))
        allowed = Limits(max_nodes=pool.max_nodes, max_gpus=quota_gpus).room([], gpus)
        return cls(name, min(wanted, allowed), wanted)

    def capacity_error(self, replay: Replay, node: SimNode, now: float) -> None:
        self.buyer.refused(replay, node, now)

    def parameters(self) -> dict[str, object]:
        return {"instance_type": self.type_name, "nodes": self.count, "peak_needs_nodes": self.wanted}

    def begin(self, replay: Replay, now: float) -> None:
        self.tick(replay, now)

    def tick(self, replay: Replay, now: float) -> None:
        reap(replay, now)
        missing = self.count - len(active_nodes(replay))
        mix = mix_for(replay)
        for _ in range(max(0, missing)):
            if self.buyer.buy(replay, self.type_name, mix, now) is None:
                break
