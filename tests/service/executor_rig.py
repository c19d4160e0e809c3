"""A store, the fakes and an Executor/Reconciler wired together, with a hand-driven clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from autoscaler.actuators.drain import no_drainer
from autoscaler.catalog import default_catalog
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.plan import Action, Drain, Launch, Plan, Terminate
from autoscaler.policy.models import Market, TeamPolicy
from autoscaler.service.control.interruptions import InterruptionIntake, InterruptionSource
from autoscaler.service.control.reconciler import Reconciler
from autoscaler.service.executor import AdvanceReport, Executor, ExecutorSettings
from tests.builders import NOW, make_policy
from tests.fakes import FakeAnsible, FakeCloud, FakeDrainer, FakeTerraform

S = NodeState


class Clock:
    def __init__(self, now: datetime = NOW):
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float = 30) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def slurm_policy(**pool_kw: Any) -> TeamPolicy:
    pool_kw.setdefault("cluster", {"kind": "slurm", "partition": "gpu"})
    pool_kw.setdefault("scale_down", {"drain_timeout": "10m", "checkpoint_grace": "1m",
                                      "checkpoint_signal": "USR2"})
    pool_kw.setdefault("bootstrap", {"timeout": "10m"})
    return make_policy(team="vision", **pool_kw)


@dataclass
class Rig:
    store: FleetStore
    clock: Clock = field(default_factory=Clock)
    cloud: FakeCloud = field(default_factory=FakeCloud)
    ansible: FakeAnsible = field(default_factory=FakeAnsible)
    slurm: FakeDrainer = field(default_factory=lambda: FakeDrainer("slurm"))
    policies: dict[str, TeamPolicy] = field(default_factory=lambda: {"vision": slurm_policy()})
    settings: ExecutorSettings = field(default_factory=ExecutorSettings)
    addresses: dict[str, str] | None = None  # None: every node resolves to 169.254.77.x
    tf: FakeTerraform = field(init=False)

    def __post_init__(self) -> None:
        self.tf = FakeTerraform(self.cloud)

    # -- wiring ---------------------------------------------------------------------------
    def address_of(self, node: Node) -> str | None:
        if self.addresses is not None:
            return self.addresses.get(node.name)
        return f"169.254.77.{2 + int(node.name.rsplit('-', 1)[-1])}" if node.instance_id else None

    def executor(self, store: FleetStore | None = None,
                 monotonic: Callable[[], float] | None = None) -> Executor:
        return Executor(store or self.store, lambda: self.policies, self.tf, self.ansible,
                        {self.slurm.kind: self.slurm, "none": no_drainer()}, self.address_of,
                        self.settings, default_catalog(), self.clock, monotonic=monotonic)

    def reconciler(self, sources: list[InterruptionSource] | None = None) -> Reconciler:
        intake = None
        if sources is not None:
            intake = InterruptionIntake(self.store, sources, self.settings, self.clock,
                                        lambda: self.policies)
        return Reconciler(self.store, self.tf, lambda cloud, region: self.cloud, self.settings,
                          self.clock, policies=lambda: self.policies, interruptions=intake,
                          repair=self.executor().repair)

    # -- driving --------------------------------------------------------------------------
    def submit(self, *actions: Action, record: bool = False) -> list[str]:
        plan = Plan(decided_at=self.clock(), actions=list(actions))
        plan_id = self.store.record_plan(plan) if record else None
        return self.executor().submit(plan, plan_id)

    def advance(self, **kw: Any) -> AdvanceReport:
        return self.executor().advance(**kw)

    def state(self, name: str) -> NodeState:
        node = self.store.get(name)
        assert node is not None, name
        return node.state

    def node(self, name: str) -> Node:
        node = self.store.get(name)
        assert node is not None, name
        return node

    def ready_nodes(self, count: int = 1, **launch_kw: Any) -> list[str]:
        """``count`` nodes launched, bootstrapped and joined: READY."""
        names = self.submit(launch(count, **launch_kw))
        self.advance()
        for name in names:
            self.slurm.scheduler.join(name)
        self.advance()
        assert [self.state(n) for n in names] == [S.READY] * count
        return names


def launch(count: int = 1, pool: str = "vision/gpu", market: Market = Market.ON_DEMAND,
           instance_type: str = "p3.2xlarge", replaces: list[str] | None = None,
           trigger: str = "pending") -> Launch:
    return Launch(pool=pool, instance_type=instance_type, market=market, count=count,
                  gpus_per_node=1, hourly_usd=3.06, trigger=trigger, replaces=replaces or [],
                  reason=f"{pool}: 2 jobs pending")


def drain(node: str, pool: str = "vision/gpu", trigger: str = "idle") -> Drain:
    return Drain(pool=pool, node=node, trigger=trigger, reason=f"{pool}: {node} {trigger}")


def terminate(node: str, pool: str = "vision/gpu") -> Terminate:
    return Terminate(pool=pool, node=node, reason=f"{pool}: {node} is drained")


def make_rig(tmp_path: Path, **kw: Any) -> Rig:
    return Rig(FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}"), **kw)
