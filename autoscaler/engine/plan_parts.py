"""The Plan's records made from what ``decide()`` chose: Launches grouped from the admitted
new nodes, a Hold in place of the actions of a pool whose rule failed, and each pool's
summary. Pure, like the rest of the engine.
"""

from __future__ import annotations

from itertools import groupby

from autoscaler.engine.context import PoolContext
from autoscaler.engine.scale_up import Growth, NewNode
from autoscaler.model.plan import Action, Hold, Launch, PoolSummary


def launches(key: str, new: list[NewNode]) -> list[Launch]:
    out = []
    for (offer, trigger, why, fallback), group in groupby(
            new, key=lambda n: (n.offer, n.trigger, n.why, n.fallback_from_spot)):
        items = list(group)
        out.append(Launch(
            pool=key, instance_type=offer.instance_type, market=offer.market, zone=offer.zone,
            count=len(items), gpus_per_node=offer.gpus, hourly_usd=offer.hourly_usd, trigger=trigger,
            replaces=sorted({r for n in items for r in n.replaces}), fallback_from_spot=fallback,
            reason=f"{key}: {why}; launching {len(items)} x {offer.describe()}",
        ))
    return out


def without_failed(actions: list[Action], contexts: list[PoolContext]) -> list[Action]:
    failed = {c.key: c.error for c in contexts if c.error is not None}
    out = [a for a in actions if a.pool not in failed]
    out += [Hold(pool=key, what="all", reason=f"{key}: nothing decided for this pool this "
                 f"tick (its nodes are kept as they are): {error}")
            for key, error in failed.items()]
    return out


def summaries(contexts: list[PoolContext], launched: dict[str, list[NewNode]],
              growth: dict[str, Growth], broken_held: str | None) -> dict[str, PoolSummary]:
    out = {}
    for ctx in contexts:
        new = launched.get(ctx.key, [])
        out[ctx.key] = PoolSummary(
            nodes=ctx.size + len(new),
            gpus=ctx.active_gpus + sum(n.offer.gpus for n in new),
            hourly_usd=round(ctx.billable_usd + sum(n.offer.hourly_usd for n in new), 4),
            floor=ctx.floor,
            util_mean=ctx.util_mean(),
            pending_gpus=growth[ctx.key].pending_gpus,
            data_missing=ctx.data_missing,
            error=ctx.error,
            broken_held=len(ctx.sick) if broken_held is not None else 0,
            broken_waiting=ctx.broken_waiting,
        )
    return out
