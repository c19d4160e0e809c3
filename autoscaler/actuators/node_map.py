"""The Terraform node map of each pool, built from the fleet, and what an engine Plan
would make of it.

``nodes = { "<node-name>" = { instance_type, market, zone[, power] } }`` is the whole input
that changes between applies; a pool whose map equals its last applied map is not planned.
``power`` is set for warm-pool nodes only ("stopped" while the node is STOPPING or WARM,
"running" otherwise): the module gives those an ``aws_ec2_instance_state``, so every other
pool's map and plan stay what they were.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from autoscaler.catalog import Catalog, CatalogError
from autoscaler.fleet.intents import NewNode, Remove, Wake, interpret
from autoscaler.model.lifecycle import INSTANCE_STATES, WARM_POOL
from autoscaler.model.node import Node
from autoscaler.model.plan import Plan
from autoscaler.model.pool import PoolRef
from autoscaler.policy.models import Market, Pool


class NodeSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_type: str
    market: Market
    zone: str = ""  # "" = any zone of the region
    power: Literal["", "running", "stopped"] = ""  # "": not a warm-pool node

    def tf(self) -> dict[str, str]:
        out = {"instance_type": self.instance_type, "market": self.market.value,
               "zone": self.zone}
        if self.power:
            out["power"] = self.power
        return out

    def describe(self) -> str:
        return (f"{self.instance_type} {self.market.value}" + (f" {self.zone}" if self.zone else "")
                + (f" ({self.power})" if self.power else ""))


NodeMap = dict[str, NodeSpec]


@dataclass
class PoolMaps:
    """One pool's node map now (``before``) and after a plan (``after``)."""

    ref: PoolRef
    before: NodeMap = field(default_factory=dict)
    after: NodeMap = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)


def spec_of(node: Node) -> NodeSpec:
    power: Literal["", "running", "stopped"] = ""
    if node.progress.warm is not None:
        power = "stopped" if node.state in WARM_POOL else "running"
    return NodeSpec(instance_type=node.instance_type, market=node.market, zone=node.zone or "",
                    power=power)


def desired_maps(nodes: Iterable[Node]) -> dict[str, NodeMap]:
    """Pool key -> node map of every node whose instance should exist."""
    out: dict[str, NodeMap] = {}
    for node in nodes:
        if node.state in INSTANCE_STATES:
            out.setdefault(node.pool_key, {})[node.name] = spec_of(node)
    return out


def pool_refs(nodes: Iterable[Node], pools: Mapping[str, Pool] | None = None) -> dict[str, PoolRef]:
    """Pool key -> where the pool lives, from its policy or else from its nodes."""
    out: dict[str, PoolRef] = {}
    for node in nodes:
        out.setdefault(node.pool_key, PoolRef(node.team, node.pool, node.cloud, node.region))
    for key, pool in (pools or {}).items():
        team, name = key.split("/", 1)
        out[key] = PoolRef(team, name, pool.cloud.value, pool.region)
    return out


def changed_pools(desired: Mapping[str, NodeMap], applied: Mapping[str, NodeMap]) -> list[str]:
    """Pools whose map differs from the last applied one (absent = empty map)."""
    keys = set(desired) | set(applied)
    return sorted(k for k in keys if dict(desired.get(k, {})) != dict(applied.get(k, {})))


class PreviewError(ValueError):
    pass


def preview_maps(fleet_nodes: Iterable[Node], plan: Plan, catalog: Catalog,
                 pools: Mapping[str, Pool] | None = None) -> dict[str, PoolMaps]:
    """Apply ``plan`` hypothetically to the node maps, for ``gpu-autoscaler plan``.

    Launch adds placeholder nodes ``<team>-<pool>-new<k>``; Terminate removes the node;
    Replace adds one new node (the old one stays until it is drained); StartWarm powers a
    stopped node on. Drains change no map: a draining node keeps its instance. ``pools``
    (policy by pool key) locates pools that have no node yet.
    """
    nodes = list(fleet_nodes)
    refs = pool_refs(nodes, pools)
    current = desired_maps(nodes)
    maps = {k: PoolMaps(ref, dict(current.get(k, {})), dict(current.get(k, {})))
            for k, ref in refs.items()}
    counters: dict[str, int] = {}
    explained: set[str] = set()
    for intent in interpret(plan):  # the executor's reading of the plan (fleet/intents.py)
        if not isinstance(intent, NewNode | Remove | Wake):
            continue
        pm = _pool_maps(maps, intent.pool)
        if intent.key not in explained:
            explained.add(intent.key)
            pm.reasons.append(intent.reason)
        if isinstance(intent, Remove):
            pm.after.pop(intent.node, None)
        elif isinstance(intent, Wake):
            if intent.node in pm.after:
                pm.after[intent.node] = pm.after[intent.node].model_copy(update={"power": "running"})
        else:
            _check_type(catalog, pm.ref, intent.instance_type)
            pm.after[_new_name(pm, counters)] = NodeSpec(
                instance_type=intent.instance_type, market=intent.market, zone=intent.zone or "",
                power="running" if intent.trigger == "warm-pool" else "")
    return maps


def _pool_maps(maps: dict[str, PoolMaps], key: str) -> PoolMaps:
    if key not in maps:
        raise PreviewError(f"pool {key} is in the plan but neither in the fleet nor in the "
                           "policies: cannot tell its cloud and region")
    return maps[key]


def _check_type(catalog: Catalog, ref: PoolRef, instance_type: str) -> None:
    try:
        catalog.get(ref.cloud, instance_type)
    except CatalogError as exc:
        raise PreviewError(f"pool {ref.key}: {exc}") from exc


def _new_name(pm: PoolMaps, counters: dict[str, int]) -> str:
    key = pm.ref.key
    while True:
        counters[key] = counters.get(key, 0) + 1
        name = f"{pm.ref.team}-{pm.ref.pool}-new{counters[key]}"
        if name not in pm.after and name not in pm.before:
            return name
