"""How many nodes may start leaving a pool this tick: plain data, built once."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from autoscaler.engine.context import PoolContext
from autoscaler.model.node import Node
from autoscaler.model.plan import Action, Drain, Hold


def share(count: int, percent: float) -> int:
    """``percent`` of ``count``, rounded down, at least 1: a budget that slows a removal
    path without ever stopping it."""
    return max(1, math.floor(count * percent / 100))


def pool_nodes(ctx: PoolContext) -> int:
    """The nodes max_draining_percent is a share of: serving, on their way, draining and
    drained (the percentage is of the whole pool, nodes already leaving included)."""
    return ctx.size + len(ctx.draining) + len(ctx.drained)


def draining_limit(ctx: PoolContext) -> int:
    """Most of the pool's nodes leaving at once: max_draining_percent of them, at least 1
    while the percent is above 0."""
    pct = ctx.pool.scale_down.max_draining_percent
    return share(pool_nodes(ctx), pct) if pct > 0 else 0


def draining_said(ctx: PoolContext, budget: Budget | None = None) -> str:
    """The numbers behind max_draining_percent for a Hold: what it allows of how many, and
    what spends it (with ``budget``: what this tick's rules took already)."""
    limit = draining_limit(ctx)
    said = (f"max_draining_percent {ctx.pool.scale_down.max_draining_percent:g} of "
            f"{pool_nodes(ctx)} node(s) lets {limit} leave at once, {len(ctx.draining)} "
            "already draining")
    taken = limit - len(ctx.draining) - budget.concurrent if budget is not None else 0
    return said + (f", {taken} more this tick" if taken > 0 else "")


@dataclass(slots=True)
class Budget:
    concurrent: int  # more drains allowed by max_draining_percent
    above_floor: int  # nodes the pool can lose before min_nodes / the schedule floor
    taken: dict[str, Node] = field(default_factory=dict)  # nodes some method already removes

    @classmethod
    def for_pool(cls, ctx: PoolContext) -> Budget:
        return cls(concurrent=draining_limit(ctx) - len(ctx.draining),
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


def drain_replaced(home: PoolContext, old: Node, budget: Budget, why: str,
                   trigger: Literal["spot-returned", "consolidate"],
                   then: str) -> Action:
    """The drain of ``old`` once its make-before-break replacement is READY (return to
    spot, a consolidation move), on its own pool's budget; a Hold saying why it waits."""
    if home.data_missing:
        return Hold(pool=home.key, what="scale-down",
                    reason=f"{why}; its drain waits: {home.data_missing}")
    if not budget.can_swap(old):
        return Hold(pool=home.key, what="scale-down", reason=(
            f"{why}; its drain waits: {draining_said(home, budget)}"))
    budget.swap(old)
    return Drain(pool=home.key, node=old.name, trigger=trigger,
                 reason=f"{why}; draining {old.name}{then}")
