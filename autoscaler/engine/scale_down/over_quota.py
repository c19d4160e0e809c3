"""A team above its GPU or $/h quota (the quota was lowered) sheds nodes until it fits."""

from __future__ import annotations

from datetime import datetime

from autoscaler.engine.context import PoolContext
from autoscaler.engine.pricing import Prices
from autoscaler.engine.quota import Allowance
from autoscaler.engine.scale_down.budget import Budget
from autoscaler.engine.scale_down.idle import idle_nodes
from autoscaler.engine.scale_down.order import per_gpu
from autoscaler.model.plan import Action, Drain


def candidates(
    team_ctxs: list[PoolContext], quota: Allowance, prices: Prices, now: datetime,
    budgets: dict[str, Budget],
) -> list[Action]:
    """Drains across the team's pools: idle first, then most expensive $/GPU-h."""
    # Nodes another method removes this tick already count as gone.
    gone = [n for c in team_ctxs for n in budgets[c.key].taken.values()]
    gpus = sum(c.active_gpus for c in team_ctxs) - sum(prices.node_gpus(n) for n in gone)
    usd = sum(c.active_usd for c in team_ctxs) - sum(prices.node_hourly(n) for n in gone)
    active = Allowance(quota.label, quota.max_gpus, quota.max_usd, gpus, usd)
    over_gpus, over_usd = active.over()
    if over_gpus <= 0 and over_usd <= 1e-9:
        return []
    ranked = []
    for ctx in team_ctxs:
        if ctx.data_missing:
            continue
        idle = {n.name for n in idle_nodes(ctx, now)}
        ranked += [(n.name not in idle, -per_gpu(prices, n), n.name, ctx, n) for n in ctx.serving
                   if n.name not in budgets[ctx.key].taken]
    ranked.sort(key=lambda r: r[:3])
    actions: list[Action] = []
    for _, _, _, ctx, node in ranked:
        if over_gpus <= 0 and over_usd <= 1e-9:
            break
        budget = budgets[ctx.key]
        if not budget.can_shrink(node):
            continue
        budget.shrink(node)
        over_gpus -= prices.node_gpus(node)
        over_usd -= prices.node_hourly(node)
        limit = (f"{quota.max_gpus} GPUs" if quota.max_gpus is not None else "") + (
            f" / ${quota.max_usd:g}/h" if quota.max_usd is not None else "")
        actions.append(Drain(
            pool=ctx.key, node=node.name, trigger="over-quota",
            reason=(f"{ctx.key}: {quota.label} holds {gpus} GPUs / ${usd:.2f}/h, above its quota "
                    f"{limit.strip(' /')}; removing {node.name}"),
        ))
    return actions
