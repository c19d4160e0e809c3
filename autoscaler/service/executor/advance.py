"""One advance of the executor: the :class:`Step` every phase works with (store, clock,
policies, drainers, checked moves) and the :class:`AdvanceReport` it fills (transitions,
applies, bootstrap runs, drain steps, errors)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.actuators.drain import Drainer
from autoscaler.catalog import Catalog, CatalogError
from autoscaler.fleet.store import FleetStore, StoreError
from autoscaler.model.changes import Move, NodeFields, Patch, ProgressChange
from autoscaler.model.lifecycle import IllegalTransitionError, NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import Cooldown, DrainProgress
from autoscaler.model.snapshot import CapacityError
from autoscaler.policy.models import Pool, TeamPolicy, find_pool
from autoscaler.service.executor.settings import ExecutorSettings
from autoscaler.service.executor.steady import SteadyTimeline

log = logging.getLogger("autoscaler.service.executor")


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
    created: list[str] = Field(default_factory=list, description="Nodes created by a repair "
                               "(replacements promised before a restart).")

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


class SubmitError(RuntimeError):
    """An action of the plan cannot be carried out (unknown node, illegal move...)."""


@dataclass
class Step:
    store: FleetStore
    settings: ExecutorSettings
    clock: Callable[[], datetime]
    policies: Mapping[str, TeamPolicy]
    drainers: Mapping[str, Drainer]
    report: AdvanceReport
    catalog: Catalog | None = None
    timeline: SteadyTimeline = field(default_factory=lambda: SteadyTimeline(None))

    def now(self) -> datetime:
        return self.clock()

    def type_gpus(self, node: Node) -> int | None:
        """The GPUs of the node's instance type; None for a type the catalog lacks."""
        if self.catalog is None:
            return None
        try:
            return self.catalog.get(node.cloud, node.instance_type).gpus
        except CatalogError:
            return None

    def move(self, name: str, to: NodeState, reason: str, *, fields: NodeFields | None = None,
             progress: ProgressChange | None = None, cooldown: Cooldown = None) -> Node | None:
        """Write a transition (checked and committed); None when the node moved meanwhile."""
        return self._write_move(Move(name, to, reason, fields or NodeFields(), progress, cooldown))

    def _write_move(self, change: Move) -> Node | None:
        try:
            [node] = self.store.apply([change], self.now())
        except (IllegalTransitionError, StoreError) as exc:
            self.error("store", f"{change.node}: not moved to {change.to}: {exc}")
            return None
        self._moved(change)
        return node

    def _moved(self, change: Move) -> None:
        """A written transition, reported and logged."""
        self.report.changes.append(Change(node=change.node, to=change.to, reason=change.reason))
        log.info("%s -> %s: %s", change.node, change.to, change.reason)

    def move_all(self, moves: Sequence[Move]) -> list[Node | None]:
        """Several transitions in ONE store write (one transaction, not one per node);
        when that write is refused (a node moved meanwhile, an illegal move) each is written
        on its own, so only the nodes at fault are left out (None), as with :meth:`move`."""
        if not moves:
            return []
        try:
            written: list[Node | None] = list(self.store.apply(moves, self.now()))
        except (IllegalTransitionError, StoreError):
            return [self._write_move(m) for m in moves]
        for m in moves:
            self._moved(m)
        return written

    def patch_all(self, patches: Sequence[Patch]) -> list[Node]:
        """Several patches in ONE store write (all or none, like :meth:`patch`)."""
        return self.store.apply(patches, self.now()) if patches else []

    def patch(self, name: str, *, fields: NodeFields | None = None,
              progress: ProgressChange | None = None) -> Node:
        """Write columns and progress of a node without moving it."""
        [node] = self.store.apply([Patch(name, fields or NodeFields(), progress)], self.now())
        return node

    def error(self, component: str, text: str) -> None:
        """An error caught inside actuation: in the report (and so /status and the
        ``step_errors_total{component}`` metric) and the log."""
        self.report.error(component, text)
        log.warning("%s", text)

    def pool(self, node: Node) -> Pool | None:
        return find_pool(self.policies, node.team, node.pool)

    def cluster_kind(self, node: Node) -> str:
        """The scheduler the node joined: as launched, else its pool's current policy."""
        if node.progress.cluster:
            return node.progress.cluster
        pool = self.pool(node)
        return pool.cluster.kind if pool is not None else "none"

    def drainer(self, kind: str) -> Drainer | None:
        found = self.drainers.get(kind)
        if found is None:
            self.error("drain", f"no drainer configured for cluster kind {kind!r}")
        return found

    def drain_progress(self, node: Node, reason: str, now: datetime,
                       trigger: str | None = None) -> DrainProgress:
        return new_drain(self.settings, self.pool(node), reason, now, trigger)


def new_drain(settings: ExecutorSettings, pool: Pool | None, reason: str, now: datetime,
              trigger: str | None = None) -> DrainProgress:
    """A new drain with the pool's wait (by trigger), signal and grace (the settings' for
    orphans)."""
    sd = pool.scale_down if pool is not None else None
    return DrainProgress(
        reason=reason, started_at=now,
        deadline=now + (sd.drain_wait(trigger) if sd else settings.drain_timeout),
        grace=sd.checkpoint_grace if sd else settings.checkpoint_grace,
        signal=sd.checkpoint_signal if sd else settings.checkpoint_signal)
