"""Typed changes to the fleet store: the only way a node is written.

``FleetStore.apply(changes, now)`` applies a batch in one fenced transaction: every
:class:`Move` is checked against the lifecycle table and compare-and-set on the state it
leaves, every move and creation writes its transition row, and a change's ``cooldown``
(never a default) is what restarts its pool's scale-up or scale-down cooldown.

* :class:`Create`: a REQUESTED node with its pool's next name, from a :class:`LaunchSpec`;
* :class:`Adopt`: a node found in the cloud, inserted as it is;
* :class:`Move`: a state transition, with the columns and progress it writes;
* :class:`Patch`: columns and progress without a transition.

Progress is written as a :class:`ProgressUpdate`, or as a function of the progress read
inside the write's own transaction (a read-modify-write no other writer can split: the
spot-notice loop joining a drain the executor is running).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import Cooldown, LaunchSpec, NodeProgress, ProgressUpdate


class NodeFields(BaseModel):
    """Node columns to write: exactly the ones given (``None`` clears one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    zone: str | None = None
    instance_id: str | None = None
    address: str | None = None
    drain_trigger: str | None = None
    replacement_requested: bool | None = None
    ready_at: datetime | None = None

    def given(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.model_fields_set}


ProgressChange = ProgressUpdate | Callable[[NodeProgress], ProgressUpdate]


@dataclass(frozen=True)
class Create:
    """A new REQUESTED node of ``team/pool`` (cloud and region from its policy)."""

    team: str
    pool: str
    cloud: str
    region: str
    launch: LaunchSpec
    progress: NodeProgress = field(default_factory=NodeProgress)
    replaces: str | None = None  # the node it stands in for

    @property
    def cooldown(self) -> Cooldown:
        return self.launch.cooldown


@dataclass(frozen=True)
class Adopt:
    """A node found in the cloud but not in the store, inserted as ``node`` says."""

    node: Node
    reason: str


@dataclass(frozen=True)
class Move:
    node: str
    to: NodeState
    reason: str
    fields: NodeFields = field(default_factory=NodeFields)
    progress: ProgressChange | None = None
    cooldown: Cooldown = None  # "down": a scale-down drain restarts the pool's cooldown


@dataclass(frozen=True)
class Patch:
    node: str
    fields: NodeFields = field(default_factory=NodeFields)
    progress: ProgressChange | None = None


NodeChange = Create | Adopt | Move | Patch
