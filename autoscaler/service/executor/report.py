"""What one ``advance()`` did: transitions, applies, bootstrap runs, drain steps, errors."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.model.lifecycle import NodeState
from autoscaler.model.snapshot import CapacityError


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
    step_errors: dict[str, int] = Field(default_factory=dict, description="Errors caught "
                                        "inside actuation, by component (the step_errors metric).")
    started: list[str] = Field(default_factory=list, description="Operations handed to the "
                               "workers by this advance.")

    def error(self, component: str, text: str) -> None:
        self.errors.append(text)
        self.step_errors[component] = self.step_errors.get(component, 0) + 1

    def absorb(self, other: AdvanceReport) -> None:
        """Add what a finished operation did (its own report) to this one."""
        for name in ("changes", "applies", "deferred_pools", "bootstrapped", "capacity_errors",
                     "errors", "started"):
            getattr(self, name).extend(getattr(other, name))
        self.bootstrap_failed.update(other.bootstrap_failed)
        self.drain_steps.update(other.drain_steps)
        for component, count in other.step_errors.items():
            self.step_errors[component] = self.step_errors.get(component, 0) + count

    def moved(self, to: NodeState) -> list[str]:
        return [c.node for c in self.changes if c.to is to]
