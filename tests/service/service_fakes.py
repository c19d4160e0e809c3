"""Fakes and builders for the service loop tests (same Protocols as the real parts)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from autoscaler.catalog import default_catalog
from autoscaler.engine import Plan
from autoscaler.fleet.intents import NewNode, Remove, StartDrain, interpret
from autoscaler.fleet.store import FleetStore
from autoscaler.model.changes import Create, Move, NodeFields
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.snapshot import CapacityError, NodeObservation, PoolObservation, Snapshot, SpotScore
from autoscaler.model.snapshot_parts import Observed, PriceView
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.config.models import LeaderSettings
from autoscaler.service.config.reload import PolicyReloader
from autoscaler.service.control.leader import Leadership
from autoscaler.service.control.loop import ServiceLoop
from autoscaler.service.control.reconciler import ReconcileReport
from autoscaler.service.executor import AdvanceReport
from autoscaler.service.executor.operations import Operation
from autoscaler.service.observe.metrics import ServiceMetrics
from tests.builders import NOW, make_pool_dict


def write_policy(directory: Path, team: str = "vision", **pool_kw: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"apiVersion": "gpu-autoscaler/v1", "team": team, "priority": "high",
           "pools": [make_pool_dict(**pool_kw)]}
    path = directory / f"{team}.yaml"
    YAML(typ="safe").dump(doc, path)
    return path


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, start: datetime = NOW):
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class FakeSignals:
    """Returns what the test set: per-pool pending jobs and per-node observations."""

    pools: dict[str, PoolObservation] = field(default_factory=dict)
    nodes: dict[str, NodeObservation] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    next_error: Exception | None = None
    calls: int = 0

    def read(self, policies: Mapping[str, TeamPolicy], fleet_nodes: Sequence[Node],
             now: datetime) -> Observed:
        self.calls += 1
        if self.next_error is not None:
            err, self.next_error = self.next_error, None
            raise err
        return Observed(taken_at=now, pools=dict(self.pools), nodes=dict(self.nodes),
                        missing=list(self.missing))


@dataclass
class FakePrices:
    recorded: list[CapacityError] = field(default_factory=list)
    scores: list[SpotScore] = field(default_factory=list)

    def observe(self, policies: Mapping[str, TeamPolicy]) -> PriceView:
        return PriceView([], list(self.recorded), [], list(self.scores))

    def record_capacity_error(self, error: CapacityError) -> None:
        self.recorded.append(error)


class FakeExecutor:
    """Records plans; ``submit`` writes intents like the real one, ``advance`` makes
    requested nodes READY and drained nodes TERMINATED in one step."""

    def __init__(self, store: FleetStore, clock: Clock):
        self.store, self.clock = store, clock
        self.submitted: list[tuple[Plan, int | None]] = []
        self.advanced = 0
        self.next_error: Exception | None = None
        self.capacity_errors: list[CapacityError] = []
        self.on_submit: Any = None
        self.snapshots: list[Snapshot | None] = []

    def submit(self, plan: Plan, plan_id: int | None = None) -> list[str]:
        self.submitted.append((plan, plan_id))
        created = []
        for intent in interpret(plan):  # the executor's own reading of a plan
            if isinstance(intent, NewNode):
                team, pool = intent.pool.split("/")
                [node] = self.store.apply([Create(team, pool, "aws", "us-east-1",
                                                  intent.launch())], self.clock())
                created.append(node.name)
            elif isinstance(intent, StartDrain):
                self.store.apply([Move(intent.node, NodeState.DRAINING, intent.reason,
                                       NodeFields(drain_trigger=intent.trigger),
                                       cooldown=intent.cooldown)], self.clock())
            elif isinstance(intent, Remove):
                self.store.apply([Move(intent.node, NodeState.TERMINATING, intent.reason)],
                                 self.clock())
        if self.on_submit is not None:
            self.on_submit()
        return created

    def advance(self, snapshot: Snapshot | None = None) -> AdvanceReport:
        self.advanced += 1
        self.snapshots.append(snapshot)
        if self.next_error is not None:
            err, self.next_error = self.next_error, None
            raise err
        now = self.clock()
        for node in self.store.nodes():
            steps = {NodeState.REQUESTED: [NodeState.PROVISIONING, NodeState.BOOTSTRAPPING,
                                           NodeState.READY],
                     NodeState.DRAINING: [NodeState.DRAINED],
                     NodeState.TERMINATING: [NodeState.TERMINATED]}.get(node.state, [])
            for to in steps:
                self.store.apply([Move(node.name, to, f"fake advance to {to}")], now)
        report = AdvanceReport(started_at=now, capacity_errors=list(self.capacity_errors))
        self.capacity_errors = []
        return report

    def running(self) -> list[Operation]:
        return []

    def wait(self, timeout: float) -> bool:
        return True

    def stop_bootstraps(self) -> None:
        return None


class FakeReconciler:
    """Records what it was given; ``on_run`` changes the store as a real run would."""

    def __init__(self) -> None:
        self.runs = 0
        self.next_error: Exception | None = None
        self.snapshots: list[Observed | None] = []
        self.on_run: Callable[[], None] | None = None

    def run(self, snapshot: Observed | None = None) -> ReconcileReport:
        self.runs += 1
        self.snapshots.append(snapshot)
        if self.next_error is not None:
            err, self.next_error = self.next_error, None
            raise err
        if self.on_run is not None:
            self.on_run()
        return ReconcileReport(at=datetime.now(UTC))


@dataclass
class LoopKit:
    loop: ServiceLoop
    store: FleetStore
    signals: FakeSignals
    executor: FakeExecutor
    reconciler: FakeReconciler
    prices: FakePrices
    clock: Clock
    policies_dir: Path


def make_loop(tmp_path: Path, *, dry_run: bool = False, leader: LeaderSettings | None = None,
              store: FleetStore | None = None, **engine: Any) -> LoopKit:
    from autoscaler.engine import EngineSettings

    clock = Clock()
    store = store or FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    policies_dir = tmp_path / "policies"
    if not policies_dir.exists():
        write_policy(policies_dir, "vision", name="train", max_nodes=4)
    catalog = default_catalog()
    signals, prices = FakeSignals(), FakePrices()
    executor, reconciler = FakeExecutor(store, clock), FakeReconciler()
    loop = ServiceLoop(
        store=store, reloader=PolicyReloader(policies_dir, catalog), signals=signals,
        catalog=catalog, metrics=ServiceMetrics(),
        leadership=Leadership(store, leader or LeaderSettings()),
        executor=executor, reconciler=reconciler, prices=prices,
        engine=EngineSettings(**engine), clock=clock, dry_run=dry_run, interval_s=5)
    return LoopKit(loop, store, signals, executor, reconciler, prices, clock, policies_dir)
