"""Under the global cap, a higher tier's pending jobs reclaim lower-tier capacity.

Low-priority spot capacity goes first, then low on-demand, then medium; idle nodes before
busy ones. Capacity already leaving anywhere counts as on its way back, so the same
shortage never preempts twice.
"""

from __future__ import annotations

from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices
from autoscaler.engine.scale_down.budget import Budget
from autoscaler.engine.scale_down.idle import idle_nodes
from autoscaler.model.plan import Action, Drain
from autoscaler.policy.models import Market


def reclaim(
    blocked: dict[str, int], contexts: list[PoolContext], prices: Prices, now: datetime,
    budgets: dict[str, Budget],
) -> list[Action]:
    """``blocked`` maps pool key -> GPUs its pending jobs could not get under the cap."""
    actions: list[Action] = []
    by_key = {c.key: c for c in contexts}
    for key, want in blocked.items():
        asker = by_key[key]
        rank = asker.policy.priority.rank
        lower = [c for c in contexts if c.policy.priority.rank > rank and not c.data_missing]
        # Anything leaving, in any tier, frees room under the cap for this pool soon.
        coming = sum(prices.node_gpus(n) for c in contexts
                     for n in c.draining + c.drained + c.interrupted + c.failed + c.other)
        coming += sum(prices.node_gpus(n) for c in contexts for n in budgets[c.key].taken.values())
        want -= coming
        victims = []
        for ctx in lower:
            if _grew_within_cooldown(ctx, now):
                continue  # reclaiming what it was just given would undo the last tick
            idle = {n.name for n in idle_nodes(ctx, now)}
            victims += [
                (-ctx.policy.priority.rank, n.market is not Market.SPOT, n.name not in idle,
                 n.name, ctx, n)
                for n in ctx.serving
            ]
        victims.sort(key=lambda v: v[:4])
        for *_, ctx, node in victims:
            if want <= 0:
                break
            budget = budgets[ctx.key]
            if not budget.can_shrink(node):
                continue
            budget.shrink(node)
            want -= prices.node_gpus(node)
            actions.append(Drain(
                pool=ctx.key, node=node.name, trigger="preempted",
                reason=(f"{ctx.key}: {node.name} ({ctx.policy.priority.value} priority, "
                        f"{node.market.value}) is reclaimed for {key} "
                        f"({asker.policy.priority.value} priority), whose pending jobs are "
                        f"blocked by the global cap"),
            ))
    return actions


def _grew_within_cooldown(ctx: PoolContext, now: datetime) -> bool:
    last = ctx.history.last_scale_up_at
    return last is not None and now - last < ctx.pool.scale_down.cooldown
