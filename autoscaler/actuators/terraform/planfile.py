"""What a saved plan does to a pool's nodes, read from ``terraform show -json``."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from autoscaler.actuators.node_map import NodeSpec
from autoscaler.policy.models import Market

ChangeKind = Literal["create", "destroy", "replace", "update"]
# A node's instance, or (warm-pool nodes) its power state: aws_ec2_instance_state.power.
_NODE_ADDR = re.compile(r'^module\.pool\.[a-z_0-9]+\.(node|power)\["([^"]+)"\]$')


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeChange(_Model):
    node: str
    action: ChangeKind
    after: NodeSpec | None = Field(None, description="What the node becomes (not for destroy).")
    before: NodeSpec | None = Field(None, description="What it was (not for create).")

    def describe(self) -> str:
        if self.action == "create" and self.after:
            return self.after.describe()
        if self.action == "destroy" and self.before:
            return self.before.describe()
        if self.before and self.after:
            return f"{self.before.describe()} -> {self.after.describe()}"
        return ""


class ImageChoice(_Model):
    """Which image a baked pool's new nodes launch from (the root module's ``image`` output)."""

    id: str = Field(description="The image new nodes launch from.")
    hash: str = Field(description="The pool's bootstrap hash.")
    stale: bool = Field(description="No image has the hash: id is the base image.")
    when_stale: Literal["full", "hold"]

    def describe(self) -> str:
        if not self.stale:
            return f"baked image {self.id} (bootstrap hash {self.hash})"
        then = ("new nodes launch from the base image " + self.id + " with the full bootstrap"
                if self.when_stale == "full" else "no node is launched (when_stale: hold)")
        return f"stale: no image for bootstrap hash {self.hash}; {then}"


def without_unset_image(data: dict[str, Any]) -> dict[str, Any]:
    """A pool with ``bootstrap.image: base`` has no image choice: its records are written
    as they were before baked images existed."""
    if data.get("image") is None:
        data.pop("image", None)
    return data


class PoolPlan(_Model):
    """A saved ``terraform plan -out`` for one pool, with what is needed to apply it safely."""

    pool: str = Field(description="Pool key 'team/pool'.")
    shard: int = Field(0, ge=0, description="The pool's Terraform shard (shards.py).")
    cloud: str
    region: str
    plan_file: Path
    plan_sha256: str
    nodes: dict[str, NodeSpec] = Field(description="The node map the plan was made for.")
    changes: list[NodeChange] = Field(default_factory=list)
    state_serial: int | None = None
    state_lineage: str | None = None
    planned_at: datetime
    seconds: float = 0.0
    image: ImageChoice | None = Field(None, description="Baked pools: the image new nodes get.")

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset_image(handler(self))

    @property
    def label(self) -> str:
        return self.pool if self.shard == 0 else f"{self.pool}#{self.shard}"

    @property
    def has_changes(self) -> bool:
        return bool(self.changes)

    def count(self, action: ChangeKind) -> int:
        return sum(1 for c in self.changes if c.action == action)


def image_choice(shown: dict[str, Any], when_stale: Literal["full", "hold"]) -> ImageChoice | None:
    """The ``image`` output of a saved plan (``terraform show -json``), if it has one."""
    value = shown.get("planned_values", {}).get("outputs", {}).get("image", {}).get("value")
    if not isinstance(value, dict):
        return None
    return ImageChoice(id=value["id"], hash=value["hash"], stale=value["stale"],
                       when_stale=when_stale)


def node_changes(events: list[dict[str, Any]], nodes: dict[str, NodeSpec],
                 current: dict[str, NodeSpec]) -> list[NodeChange]:
    """Per-node changes from the ``planned_change`` events of ``terraform plan -json``.

    ``nodes`` is the planned map; ``current`` describes the nodes in the state (for what
    a destroyed or replaced node was). Reading the events instead of ``terraform show
    -json`` saves one provider start (~5 s) per plan.
    """
    changes: dict[str, NodeChange] = {}
    for event in events:
        if event.get("type") != "planned_change":
            continue
        change = event.get("change", {})
        match = _NODE_ADDR.match(change.get("resource", {}).get("addr", ""))
        kind = _KINDS.get(change.get("action", ""))
        if not match or kind is None:
            continue
        resource, name = match.groups()
        if resource == "power":
            # Starting or stopping the instance: an update of the node, unless its instance
            # itself is created or destroyed in the same plan (that change says more).
            if name not in changes and kind != "destroy":
                changes[name] = NodeChange(node=name, action="update", after=nodes.get(name),
                                           before=current.get(name))
            continue
        changes[name] = NodeChange(
            node=name, action=kind,
            after=None if kind == "destroy" else nodes.get(name),
            before=None if kind == "create" else current.get(name))
    return sorted(changes.values(), key=lambda c: (c.action, c.node))


_KINDS: dict[str, ChangeKind] = {
    "create": "create", "delete": "destroy", "replace": "replace", "update": "update",
}


def state_nodes(state: dict[str, Any]) -> dict[str, NodeSpec]:
    """Node specs of the instances in a pool's state (``terraform state pull``)."""
    out: dict[str, NodeSpec] = {}
    for res in state.get("resources", []):
        if res.get("module") != "module.pool" or res.get("mode") != "managed" \
                or res.get("name") != "node":
            continue
        for inst in res.get("instances", []):
            spec = _spec_from_attributes(inst.get("attributes") or {})
            if spec is not None and isinstance(inst.get("index_key"), str):
                out[inst["index_key"]] = spec
    return out


def _spec_from_attributes(values: dict[str, Any]) -> NodeSpec | None:
    if not values.get("instance_type"):
        return None
    spot = values.get("instance_lifecycle") == "spot" or values.get("spot_strategy") in (
        "SpotAsPriceGo", "SpotWithPriceLimit")
    zone = values.get("availability_zone") or values.get("zone_id") or ""
    return NodeSpec(instance_type=values["instance_type"],
                    market=Market.SPOT if spot else Market.ON_DEMAND, zone=zone)
