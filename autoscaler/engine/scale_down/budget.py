"""How many nodes may start leaving a pool this tick: plain data, built once."""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoscaler.engine.context import PoolContext


@dataclass
class Budget:
    concurrent: int  # more drains allowed by max_draining_percent
    above_floor: int  # nodes the pool can lose before min_nodes / the schedule floor

    @classmethod
    def for_pool(cls, ctx: PoolContext) -> Budget:
        size = len(ctx.active)
        pct = ctx.pool.scale_down.max_draining_percent
        limit = math.floor(size * pct / 100)
        if pct > 0:
            limit = max(1, limit)
        return cls(concurrent=limit - len(ctx.draining), above_floor=size - ctx.floor)

    def can_shrink(self) -> bool:
        return self.concurrent > 0 and self.above_floor > 0

    def shrink(self) -> None:
        self.concurrent -= 1
        self.above_floor -= 1

    def can_swap(self) -> bool:
        """Replace keeps the pool's size, so only the concurrency limit applies."""
        return self.concurrent > 0

    def swap(self) -> None:
        self.concurrent -= 1
