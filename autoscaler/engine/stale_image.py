"""A baked pool with no image of its bootstrap hash launches nothing when its policy says
``bootstrap.when_stale: hold``.

=========================  =======================  =========================================
pool                       its snapshot image       its launches
=========================  =======================  =========================================
``bootstrap.image: base``  (none)                   as decided
baked                      None (not known)         as decided: the Terraform plan's own
                                                    postcondition still guards ``hold``
baked                      an image id              as decided, from that image
baked, ``when_stale: full``  stale (no image id)    as decided, from the base image with the
                                                    full bootstrap (the reason says so)
baked, ``when_stale: hold``  stale (no image id)    none: every Launch becomes one Hold
                                                    (scale-up) naming the hash and the bake
                                                    command; a Replace keeps its node (Hold,
                                                    scale-down), except an unhealthy one,
                                                    which drains without a replacement
=========================  =======================  =========================================

Removals, drains, un-drains and reports are unchanged: a stale image is no reason to keep or
remove capacity. :func:`held_for` is also what placement and the room of a pool ask, so
a placement group's jobs go to a pool that can launch and nothing is moved into a held pool.
"""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.model.plan import Action, Drain, Hold, Launch, Replace, target_of
from autoscaler.model.snapshot import PoolObservation
from autoscaler.policy.models import Pool

_SHOWN = 3  # held launches named in a reason; the rest are counted


def held_for(pool: Pool, obs: PoolObservation) -> str | None:
    """Why ``pool``'s launches are held (its image is stale and ``when_stale`` is hold), or
    None when it may launch."""
    image = obs.image
    if (pool.bootstrap.image != "baked" or pool.bootstrap.when_stale != "hold"
            or image is None or not image.stale):
        return None
    return f"stale image: no image has bootstrap hash {image.hash} and when_stale is hold"


def full_bootstrap(pool: Pool, obs: PoolObservation) -> str | None:
    """The note a stale ``when_stale: full`` pool's launch reasons carry, or None."""
    image = obs.image
    if (pool.bootstrap.image != "baked" or pool.bootstrap.when_stale != "full"
            or image is None or not image.stale):
        return None
    return (f"full bootstrap from the base image (stale image: no image has bootstrap hash "
            f"{image.hash})")


def hold_stale(actions: list[Action], pools: Mapping[str, tuple[Pool, PoolObservation]]) -> list[Action]:
    """``actions`` with the launches of every held pool (table above) turned into Holds, and
    the launch reasons of a stale ``full`` pool noting the full bootstrap."""
    held = {key: why for key, (pool, obs) in pools.items() if (why := held_for(pool, obs))}
    full = {key: note for key, (pool, obs) in pools.items() if (note := full_bootstrap(pool, obs))}
    if not held and not full:
        return actions
    out: list[Action] = []
    launches: dict[str, list[Launch]] = {}
    kept: dict[str, list[Replace]] = {}
    for action in actions:
        why = held.get(action.pool)
        if why is not None and isinstance(action, Launch):
            launches.setdefault(action.pool, []).append(action)
        elif why is not None and isinstance(action, Replace) and action.trigger == "unhealthy":
            out.append(Drain(pool=action.pool, node=action.node, trigger="unhealthy",
                             reason=f"{action.reason}; no replacement: {why}"))
        elif why is not None and isinstance(action, Replace):
            kept.setdefault(action.pool, []).append(action)
        elif action.pool in full and isinstance(action, Launch | Replace):
            out.append(action.model_copy(update={"reason": f"{action.reason}; {full[action.pool]}"}))
        else:
            out.append(action)
    for key, group in launches.items():
        count = sum(a.count for a in group)
        out.append(Hold(pool=key, what="scale-up", reason=(
            f"{key}: {held[key]}; {count} launch{'es' if count != 1 else ''} held until "
            f"`gpu-autoscaler image bake {key}` makes one ({_named(group)})")))
    for key, replaced in kept.items():
        out.append(Hold(pool=key, what="scale-down", reason=(
            f"{key}: {held[key]}; {len(replaced)} node(s) kept, not replaced, until "
            f"`gpu-autoscaler image bake {key}` makes one ({_named(replaced)})")))
    return out


def _named(actions: list[Launch] | list[Replace]) -> str:
    """What the held actions would have done, the first few with their reasons."""
    words = [f"{target_of(a)}: {a.reason}" for a in actions[:_SHOWN]]
    more = len(actions) - _SHOWN
    return "would have been: " + "; ".join(words) + (f"; and {more} more" if more > 0 else "")


__all__ = ["full_bootstrap", "held_for", "hold_stale"]
