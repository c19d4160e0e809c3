"""Nodes a capacity request holds are not scaled down while it holds them.

The request's owner bought them for a job that may not have started yet (an idle node is
exactly what a CI job waits on), so the voluntary removals (idle, consolidation, above
max, over quota, preemption, age) become a Hold that names the request. A node with
positive evidence of a fault still drains, and a node whose pool was removed still
goes: neither waits for the request.
"""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.model.plan import Action, Drain, Hold, Replace

KEPT_FOR = frozenset({"idle", "consolidate", "over-max", "over-quota", "preempted", "expired",
                      "spot-returned"})


def keep_held(actions: list[Action], held: Mapping[str, str]) -> list[Action]:
    """``actions`` with every voluntary Drain/Replace of a held node turned into a Hold."""
    if not held:
        return actions
    out: list[Action] = []
    for action in actions:
        if (isinstance(action, Drain | Replace) and action.node in held
                and action.trigger in KEPT_FOR):
            out.append(Hold(pool=action.pool, what="scale-down", reason=(
                f"{action.node} kept: {held[action.node]} holds it "
                f"(would have been: {action.reason})")))
        else:
            out.append(action)
    return out


__all__ = ["KEPT_FOR", "keep_held"]
