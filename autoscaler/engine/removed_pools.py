"""What ``decide()`` does with the nodes of pools no policy defines any more (its orphans):
holds them, or drains them within the removed-pool budgets. Pure, like the rest of the engine.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from itertools import groupby

from autoscaler.engine.scale_down.budget import share
from autoscaler.engine.settings import EngineSettings
from autoscaler.model.lifecycle import IN_FLIGHT, OUT_OF_SERVICE, NodeState
from autoscaler.model.node import Node
from autoscaler.model.plan import Action, Drain, Hold, Terminate
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import TeamPolicy


def actions(orphans: list[Node], policies: dict[str, TeamPolicy], snapshot: Snapshot,
            settings: EngineSettings) -> list[Action]:
    """Nodes of pools no policy defines: kept unless drain_removed_pools, and even then
    never on absence of evidence and never faster than the removed-pool budgets."""
    out: list[Action] = []
    frozen = _frozen(policies, snapshot)
    fleet_left = settings.removed_pool_drains_per_tick
    for key, group in groupby(orphans, key=lambda n: n.pool_key):
        nodes = list(group)
        if not settings.drain_removed_pools:
            out.append(Hold(
                pool=key, what="scale-down",
                reason=(f"{key}: no policy defines this pool any more; its {len(nodes)} node(s) "
                        "are kept until drain_removed_pools is enabled")))
            continue
        if frozen is not None:
            out.append(Hold(pool=key, what="scale-down", reason=(
                f"{key}: the pool's policy was removed, but its {len(nodes)} node(s) are "
                f"kept: {frozen}")))
            continue
        fleet_left -= _drain(key, nodes, fleet_left, settings, out)
    return out


def _frozen(policies: dict[str, TeamPolicy], snapshot: Snapshot) -> str | None:
    """Why no removed pool may lose a node this tick, or None."""
    return frozen(policies, snapshot.missing)


def frozen(policies: Mapping[str, TeamPolicy], missing: Collection[str]) -> str | None:
    """Why no removed pool may lose a node this tick (its READY nodes here, its warm nodes
    in warm_plan.py), or None."""
    if not policies:
        return ("no policy is loaded at all (an empty or unreadable policy directory is "
                "taken as a mistake, not as the removal of every team)")
    if missing:
        return f"signals are missing ({', '.join(sorted(missing))})"
    return None


def _drain(key: str, nodes: list[Node], fleet_left: int, settings: EngineSettings,
           out: list[Action]) -> int:
    """Drain/terminate within the pool's share and the fleet-wide count, into ``out``;
    returns the removals used."""
    why = f"{key}: the pool's policy was removed and drain_removed_pools is on"
    leaving = sum(n.state is NodeState.DRAINING for n in nodes)
    left = min(share(len(nodes), settings.removed_pool_drain_percent) - leaving, fleet_left)
    used, kept = 0, 0
    for node in nodes:
        removes = node.state is NodeState.READY or node.state in IN_FLIGHT
        if removes and used >= left:
            kept += 1
            continue
        if node.state is NodeState.READY:
            out.append(Drain(pool=key, node=node.name, trigger="pool-removed", reason=why))
        elif node.state in IN_FLIGHT or node.state in OUT_OF_SERVICE:
            out.append(Terminate(pool=key, node=node.name, reason=why))
        used += removes
    if kept:
        out.append(Hold(pool=key, what="scale-down", reason=(
            f"{key}: {kept} node(s) of the removed pool wait: at most "
            f"{settings.removed_pool_drain_percent}% of it drains at once "
            f"({leaving} draining) and {settings.removed_pool_drains_per_tick} "
            "removed-pool node(s) leave per tick fleet-wide")))
    return used
