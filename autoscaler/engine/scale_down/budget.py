"""How many nodes may start leaving a pool this tick: plain data, built once."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autoscaler.engine.context import PoolContext
from autoscaler.model.node import Node


@dataclass(slots=True)
class Budget:
    concurrent: int  # more drains allowed by max_draining_percent
    above_floor: int  # nodes the pool can lose before min_nodes / the schedule floor
    taken: dict[str, Node] = field(default_factory=dict)  # nodes some method already removes

    @classmethod
    def for_pool(cls, ctx: PoolContext) -> Budget:
        leaving = len(ctx.draining) + len(ctx.drained)
        pct = ctx.pool.scale_down.max_draining_percent
        # The percentage is of the whole pool, nodes already draining included.
        limit = math.floor((ctx.size + leaving) * pct / 100)
        if pct > 0:
            limit = max(1, limit)
        return cls(concurrent=limit - len(ctx.draining),
                   above_floor=ctx.size - ctx.floor)

    def can_shrink(self, node: Node) -> bool:
        return self.concurrent > 0 and self.above_floor > 0 and node.name not in self.taken

    def shrink(self, node: Node) -> None:
        self.concurrent -= 1
        self.above_floor -= 1
        self.taken[node.name] = node

    def can_swap(self, node: Node) -> bool:
        """Replace keeps the pool's size, so only the concurrency limit applies."""
        return self.concurrent > 0 and node.name not in self.taken

    def swap(self, node: Node) -> None:
        self.concurrent -= 1
        self.taken[node.name] = node
