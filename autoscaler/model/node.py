"""A node as the store holds it, with its typed progress; the fleet view the engine reads."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field
from pydantic.dataclasses import dataclass

from autoscaler.model.lifecycle import NodeState
from autoscaler.model.progress import NodeProgress
from autoscaler.model.record import RECORD
from autoscaler.policy.models import Market, pool_key


# A slotted record (model/record.py): decide() reads it per node.
@dataclass(frozen=True, slots=True, kw_only=True, config=RECORD)
class Node:
    name: str
    team: str
    pool: str
    cloud: str
    region: str
    zone: str | None = None
    instance_type: str
    market: Market
    state: NodeState
    state_since: datetime
    created_at: datetime
    ready_at: datetime | None = None
    instance_id: str | None = None
    address: str | None = None
    reason: str = ""
    drain_trigger: str | None = Field(
        default=None, description="Why a DRAINING/DRAINED node is leaving (idle, unhealthy, ...).")
    replacement_requested: bool = Field(
        default=False, description="A replacement was launched for this node (interruption, Replace).")
    replaces: str | None = Field(default=None, description="The node this one stands in for.")
    launched_for: str | None = Field(
        default=None, description="The trigger of the launch that made it (pending, interruption, "
        "return-to-spot, ...).")
    fallback_from_spot: bool = Field(
        default=False, description="Launched on-demand because spot was refused or its jobs waited "
        "max_wait: a candidate to move back to spot (capacity.return_to_spot).")
    progress: NodeProgress = Field(
        default_factory=NodeProgress, description="What the executor keeps about it: "
        "bootstrap attempts, drain, interruption, long jobs, a promised replacement.")

    @property
    def pool_key(self) -> str:
        return pool_key(self.team, self.pool)

    def with_instance(self, *, instance_id: str | None, address: str | None) -> Node:
        """The node as a launch reported it, before the store has it: its instance and
        that instance's address."""
        return dataclasses.replace(self, instance_id=instance_id, address=address)

    def __hash__(self) -> int:
        # Its progress holds dicts (long jobs): hash what names this version of the node.
        return hash((self.name, self.state, self.state_since))


class PoolHistory(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    last_scale_up_at: datetime | None = None
    last_scale_down_at: datetime | None = None


class FleetView(BaseModel):
    """Nodes that are not TERMINATED, and per-pool scaling history for cooldowns."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: list[Node] = Field(default_factory=list)
    history: dict[str, PoolHistory] = Field(default_factory=dict)
