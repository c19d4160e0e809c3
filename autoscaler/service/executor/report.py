"""What one ``advance()`` did: transitions, applies, bootstrap runs, drain steps, errors."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.engine.snapshot import CapacityError
from autoscaler.fleet.lifecycle import NodeState


class Change(BaseModel):
    model_config = ConfigDict(frozen=True)

    node: str
    to: NodeState
    reason: str


class PoolApply(BaseModel):
    model_config = ConfigDict(frozen=True)

    pool: str
    ok: bool
    created: list[str] = Field(default_factory=list)
    destroyed: list[str] = Field(default_factory=list)
    failed: dict[str, str] = Field(default_factory=dict)
    seconds: float = 0.0


class AdvanceReport(BaseModel):
    started_at: datetime
    seconds: float = 0.0
    changes: list[Change] = Field(default_factory=list)
    applies: list[PoolApply] = Field(default_factory=list)
    deferred_pools: list[str] = Field(default_factory=list, description="Left for the next "
                                      "advance (time budget).")
    bootstrapped: list[str] = Field(default_factory=list)
    bootstrap_failed: dict[str, str] = Field(default_factory=dict)
    drain_steps: dict[str, str] = Field(default_factory=dict, description="node -> last message")
    capacity_errors: list[CapacityError] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)

    def moved(self, to: NodeState) -> list[str]:
        return [c.node for c in self.changes if c.to is to]
