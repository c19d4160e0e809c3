"""Plan previews: which pools change, the Terraform plan of each, and the $/h delta.

Only pools whose node map differs from their last applied map are planned, and of those
only the shards (shards.py) whose part of the map differs; the others cost no Terraform
run at all. Pools in a cloud region without Terraform inputs in the settings are shown
from the engine's side only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from autoscaler.actuators.node_map import NodeMap, PoolMaps
from autoscaler.actuators.terraform import shards
from autoscaler.actuators.terraform.errors import TerraformError
from autoscaler.actuators.terraform.planfile import (
    NodeChange,
    PoolPlan,
    without_unset_image,
)
from autoscaler.actuators.terraform.rootmodule import BakedImage
from autoscaler.actuators.terraform.settings import TerraformSettings
from autoscaler.actuators.terraform.workspace import PoolWorkspace
from autoscaler.catalog.volumes import stopped_hourly_usd
from autoscaler.model.pool import PoolRef
from autoscaler.model.prices import PriceBook
from autoscaler.policy.models import Market

Status = Literal["planned", "unchanged", "not-configured", "error"]


class PoolPreview(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    pool: str
    cloud: str
    region: str
    status: Status
    hourly_before: float = Field(description="$/h of the nodes whose instances exist now.")
    hourly_after: float = Field(description="$/h once the plan is applied.")
    unpriced: list[str] = Field(default_factory=list, description="Nodes without a price.")
    changes: list[NodeChange] = Field(default_factory=list)
    plan_files: list[str] = Field(default_factory=list,
                                  description="One saved plan per shard that changes.")
    error: str | None = None
    reasons: list[str] = Field(default_factory=list)
    image: str | None = Field(None, description="Baked pools: the image new nodes launch "
                              "from (id and bootstrap hash), or that it is stale.")

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset_image(handler(self))

    @property
    def delta(self) -> float:
        return self.hourly_after - self.hourly_before


class Workspace(Protocol):
    """What a preview needs of a pool workspace (PoolWorkspace, or a fake in tests)."""

    def applied_nodes(self) -> NodeMap: ...
    def plan(self, nodes: NodeMap) -> PoolPlan: ...
    def discard_plan(self) -> None: ...


WorkspaceFactory = Callable[[TerraformSettings, PoolRef, int], Workspace]


def default_workspace(settings: TerraformSettings, ref: PoolRef, shard: int = 0,
                      image: BakedImage | None = None) -> Workspace:
    return PoolWorkspace(settings, ref.team, ref.pool, ref.cloud, ref.region, shard=shard,
                         image=image)


def baked_workspace(images: Mapping[str, BakedImage]) -> WorkspaceFactory:
    """The default workspace, with the image of each baked pool (pool key -> BakedImage,
    from ``bootstrap_hash.baked_images``; a pool not in it is a base pool)."""
    def make(settings: TerraformSettings, ref: PoolRef, shard: int = 0) -> Workspace:
        return default_workspace(settings, ref, shard, images.get(ref.key))
    return make


def map_cost(ref: PoolRef, nodes: NodeMap, prices: PriceBook) -> tuple[float, list[str]]:
    """$/h of a node map (observed offerings first, then the catalog) and unpriced nodes."""
    total, unpriced = 0.0, []
    for name, spec in sorted(nodes.items()):
        if spec.power == "stopped":  # a warm node: its volume only (catalog/volumes.py)
            total += stopped_hourly_usd()
            continue
        lookup = prices.spot if spec.market is Market.SPOT else prices.on_demand
        price = lookup(ref.cloud, ref.region, spec.instance_type, spec.zone or None)
        if price is None:
            unpriced.append(name)
        else:
            total += price
    return round(total, 4), unpriced


def preview_pools(maps: Mapping[str, PoolMaps], settings: TerraformSettings, prices: PriceBook,
                  workspace: WorkspaceFactory = default_workspace) -> list[PoolPreview]:
    return [preview_pool(maps[key], settings, prices, workspace) for key in sorted(maps)]


def preview_pool(pm: PoolMaps, settings: TerraformSettings, prices: PriceBook,
                 workspace: WorkspaceFactory = default_workspace) -> PoolPreview:
    ref = pm.ref
    before, unpriced_before = map_cost(ref, pm.before, prices)
    after, unpriced_after = map_cost(ref, pm.after, prices)
    base = {"pool": ref.key, "cloud": ref.cloud, "region": ref.region,
            "hourly_before": before, "hourly_after": after, "reasons": pm.reasons,
            "unpriced": sorted(set(unpriced_before) | set(unpriced_after))}
    if settings.inputs_for(ref.cloud, ref.region) is None:
        return PoolPreview(status="not-configured", **base)
    pool_dir = Path(settings.workdir).resolve() / ref.team / ref.pool
    changes: list[NodeChange] = []
    files: list[str] = []
    image: str | None = None
    try:
        existing = {k: workspace(settings, ref, k) for k in sorted({0, *shards.existing(pool_dir)})}
        held = shards.held({k: ws.applied_nodes() for k, ws in existing.items()})
        for k, node_map in sorted(shards.assign(pm.after, held, settings.shard_size,
                                                existing).items()):
            ws = existing.get(k) or workspace(settings, ref, k)
            if node_map == ws.applied_nodes():
                ws.discard_plan()  # an older pending plan no longer matches the fleet
                continue
            plan = ws.plan(node_map)
            changes += plan.changes
            files.append(str(plan.plan_file))
            image = plan.image.describe() if plan.image is not None else image
    except TerraformError as exc:
        return PoolPreview(status="error", error=str(exc), **base)
    if not files:
        return PoolPreview(status="unchanged", **base)
    return PoolPreview(status="planned", changes=sorted(changes, key=lambda c: (c.action, c.node)),
                       plan_files=files, image=image, **base)
