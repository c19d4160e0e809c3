"""Test set-up through the store's one write door (``FleetStore.apply``), in the shape tests
state it: a node of a pool, a move with the columns it writes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from autoscaler.fleet.store import FleetStore
from autoscaler.model.changes import Create, Move, NodeFields, Patch, ProgressChange
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import Cooldown, LaunchSpec, NodeProgress
from autoscaler.policy.models import Market


def create_node(store: FleetStore, *, team: str = "vision", pool: str = "gpu",
                cloud: str = "aws", region: str = "us-east-1", zone: str | None = None,
                instance_type: str = "p3.2xlarge", market: Market = Market.ON_DEMAND,
                now: datetime, reason: str = "test", cooldown: Cooldown = None,
                progress: NodeProgress | None = None, replaces: str | None = None,
                trigger: str | None = None, fallback_from_spot: bool = False) -> Node:
    launch = LaunchSpec(pool=f"{team}/{pool}", instance_type=instance_type, market=market,
                        zone=zone, reason=reason, cooldown=cooldown, trigger=trigger,
                        fallback_from_spot=fallback_from_spot)
    [node] = store.apply([Create(team, pool, cloud, region, launch, progress or NodeProgress(),
                                 replaces)], now)
    return node


def transition(store: FleetStore, name: str, to: NodeState, now: datetime, reason: str = "test",
               *, progress: ProgressChange | None = None, cooldown: Cooldown = None,
               **fields: Any) -> Node:
    [node] = store.apply([Move(name, to, reason, NodeFields(**fields), progress, cooldown)], now)
    return node


def patch(store: FleetStore, name: str, now: datetime, *, progress: ProgressChange | None = None,
          **fields: Any) -> Node:
    [node] = store.apply([Patch(name, NodeFields(**fields), progress)], now)
    return node


def walk(store: FleetStore, name: str, now: datetime, *states: NodeState) -> Node:
    """Move ``name`` through ``states`` in order."""
    node = store.get(name)
    for state in states:
        node = transition(store, name, state, now, f"test: to {state}")
    if node is None:
        raise LookupError(name)
    return node
