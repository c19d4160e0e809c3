"""Crash safety with fakes: the executor is stopped at every store write and every side
effect of a whole fleet life (launch 2, bootstrap, join, a spot interruption with its
replacement, drains with a checkpoint and requeue, terminate all), restarted on the same
SQLite file, and must converge: no instance left, none doubled, every node TERMINATED.

Two plans: one run that crashes once at every distinct point it reaches (node names
included), and one fresh run per kind of side effect crashing only there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.ansible import BootstrapRun
from autoscaler.clouds.base import Interruption, InterruptionKind
from autoscaler.fleet.node_rows import NODE_FACTS
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import NodeProgress
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.control.interruptions import PollingSource
from autoscaler.service.executor import ExecutorSettings
from tests.builders import NOW, make_policy
from tests.fakes import FakeAnsible, FakeCloud, FakeDrainer, FakeScheduler, FakeTerraform
from tests.service.crash_harness import (
    CrashAt,
    CrashOncePerPoint,
    Faults,
    Scenario,
    World,
    coarse,
    node_of,
)

S = NodeState


def policy(nodes: int) -> TeamPolicy:
    return make_policy(team="vision", min_nodes=nodes, max_nodes=nodes,
                       capacity={"on_demand_base": 0, "spot_percent": 100},
                       scale_down={"drain_timeout": "2m", "checkpoint_grace": "30s",
                                   "max_draining_percent": 50},
                       cluster={"kind": "slurm", "partition": "gpu"})


class JoiningAnsible(FakeAnsible):
    """Bootstrap success includes joining the scheduler, as cluster_join does."""

    def __init__(self, scheduler: FakeScheduler):
        super().__init__()
        self.scheduler = scheduler

    def bootstrap(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy], *,
                  secrets: Mapping[str, str] | None = None) -> BootstrapRun:
        run = super().bootstrap(nodes, policies, secrets=secrets)
        for name in run.ok:
            self.scheduler.join(name)
        return run


class Life:
    """The world and the goal sequence of one fleet life."""

    def __init__(self, tmp_path: Path, faults: Faults, operations: str = "inline"):
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.cloud = FakeCloud()
        self.tf = FakeTerraform(self.cloud)
        self.slurm = FakeDrainer("slurm")
        self.sched = self.slurm.scheduler
        self.world = World(
            url=f"sqlite:///{tmp_path / 'fleet.db'}", policies={"vision": policy(2)},
            provisioner=self.tf, bootstrapper=JoiningAnsible(self.sched),
            drainers={"slurm": self.slurm}, address_of=self.address_of,
            clouds=lambda cloud, region: self.cloud, sources=[PollingSource(self.cloud)],
            jobs=lambda name: [w.id for w in self.sched.work.get(name, [])],
            settings=ExecutorSettings(bootstrap_retry_backoff="0s", bootstrap_retries=3),
            operations=operations)  # type: ignore[arg-type]
        self.scenario = Scenario(self.world, faults, NOW)

    @staticmethod
    def address_of(node: Node) -> str | None:
        return "169.254.77.2" if node.instance_id else None

    def ready(self) -> list[str]:
        return [n for n, s in self.scenario.states().items() if s is S.READY]

    def live(self) -> list[str]:
        return [n for n, s in self.scenario.states().items() if s is not S.TERMINATED]

    def run(self) -> None:
        sc = self.scenario
        sc.run_until(lambda: len(self.ready()) == 2)
        first, second = sorted(self.ready())
        self.sched.run(first, "job-1")
        # The second node is busy too, so the interrupted node's job needs a stand-in
        # (the engine would otherwise pack it onto the free GPU of the other node).
        self.sched.run(second, "job-2")
        instance = sc.raw_store.get(first).instance_id  # type: ignore[union-attr]
        self.cloud.notices.append(Interruption(instance or "", InterruptionKind.INTERRUPTION, sc.now,
                                               sc.now + timedelta(minutes=2), "test"))
        sc.run_until(lambda: sc.states()[first] is S.TERMINATED and len(self.ready()) == 2)
        self.cloud.notices.clear()
        for name in self.ready():
            self.sched.run(name, f"job-{name}")  # never ends: drained at the deadline
        self.world.policies = {"vision": policy(0)}
        sc.run_until(lambda: not self.live())

    def check(self) -> None:
        states = self.scenario.states()
        assert set(states.values()) == {S.TERMINATED}, states
        assert len(states) == 3, f"expected 2 nodes and one replacement: {sorted(states)}"
        assert self.cloud.live() == [], "orphaned instances"
        per_node: dict[str, list[str]] = {}
        for inst in self.cloud.instances.values():
            per_node.setdefault(inst.node or "?", []).append(inst.instance_id)
        assert sorted(per_node) == sorted(states)
        doubled = {n: ids for n, ids in per_node.items() if len(ids) != 1}
        assert not doubled, f"doubled instances: {doubled}"


def test_crash_free_life_converges(tmp_path: Path) -> None:
    life = Life(tmp_path, Faults())
    life.run()
    life.check()
    # Every key the executor wrote is a typed field of the node's progress record.
    store = life.scenario.raw_store
    for node in store.nodes(include_terminated=True):
        meta = store.meta(node.name)
        assert set(meta) <= set(NodeProgress.model_fields) | set(NODE_FACTS), (node.name, sorted(meta))
        NodeProgress.model_validate(meta)
    kinds = {node_of(p) for p in life.scenario.faults.seen}
    for expected in ("before store.move(<node> -> PROVISIONING)",
                     "after terraform.apply(vision/gpu: <node>,<node>)",
                     "before store.move(<node> -> INTERRUPTED)", "before slurm.step(<node> signalling)",
                     "before slurm.step(<node> requeueing)", "after store.move(<node> -> TERMINATED)",
                     "before ansible.bootstrap(<node>,<node>)", "after store.create(vision/gpu)",
                     # A launch that replaces a node: its nodes and the old node's flag,
                     # one write (a crash leaves all of it or none).
                     "after store.create(vision/gpu)+patch(<node>: progress,replacement_requested)",
                     "before slurm.forget(<node>)"):
        assert expected in kinds, expected


REQUIRED = [f"{when} {what}" for when in ("before", "after") for what in (
    *(f"store.move(<node> -> {s})" for s in ("PROVISIONING", "BOOTSTRAPPING", "READY",
      "INTERRUPTED", "DRAINING", "DRAINED", "TERMINATING", "TERMINATED")),
    "store.create(vision/gpu)", "store.patch(<node>: progress)",
    "store.create(vision/gpu)+patch(<node>: progress,replacement_requested)",
    "store.set_action_status(submitting)",
    "store.audit", "store.record_plan", "terraform.apply", "ansible.bootstrap",
    *(f"slurm.step(<node> {p})" for p in ("requested", "cordoned", "signalling", "signalled",
                                          "requeueing")),
    "slurm.forget(<node>)")]


def test_crash_once_at_every_point_in_one_life(tmp_path: Path, capsys: pytest.CaptureFixture[Any]) -> None:
    faults = CrashOncePerPoint()
    life = Life(tmp_path, faults)
    life.run()
    life.check()
    crashed = life.scenario.crashes
    assert crashed == faults.crashed and len(crashed) == len(set(crashed))
    kinds = {coarse(p) for p in crashed}
    with capsys.disabled():
        print(f"\ncrash points covered (fakes, one life): {len(crashed)} ({len(kinds)} kinds), "
              f"each followed by a restart; {life.scenario.ticks} ticks")
    missed = [k for k in REQUIRED if k not in kinds]
    assert not missed, f"never crashed at: {missed}"


@pytest.mark.parametrize("operations", ["deferred", "workers"])
def test_crash_once_at_every_point_with_operations_in_flight(tmp_path: Path, operations: str) -> None:
    """The same life with every apply, bootstrap batch and drain step running after it was
    handed over: one tick later ("deferred"), or on the service's real WorkerPools
    ("workers"), where a crash in any thread (the tick's or a worker's) kills them all until
    the restart. The tick decides and submits while they are in flight, and a crash lands
    inside a running operation."""
    faults = CrashOncePerPoint()
    life = Life(tmp_path, faults, operations=operations)
    life.run()
    life.check()
    kinds = {coarse(p) for p in life.scenario.crashes}
    # Drain steps that run later chain differently (the cordon is followed at once by the
    # signal), so only the phases every drain passes are required here.
    required = [k for k in REQUIRED if "slurm.step" not in k or "signalling" in k]
    missed = [k for k in required if k not in kinds]
    assert not missed, f"never crashed at: {missed}"


# Side effects whose half-done state matters most: applies, bootstrap runs, the drain's
# signal and requeue intents, the scheduler forgetting a node.
SIDE_EFFECTS = ("terraform.apply", "ansible.bootstrap", "slurm.forget", "slurm.step(<node> signalling)",
                "slurm.step(<node> requeueing)")


@pytest.mark.slow
def test_crash_alone_at_each_side_effect(tmp_path: Path, capsys: pytest.CaptureFixture[Any]) -> None:
    """A fresh life per kind of side effect (before and after it), crashing only there:
    what a single crash leaves behind, without the earlier crashes of the run above.
    (A life costs ~0.3 s per tick here, so every index of a life would take too long.)"""
    reference = Life(tmp_path / "ref", Faults())
    reference.run()
    seen = reference.scenario.faults.seen
    first_of_kind: dict[str, int] = {}
    for i, point in enumerate(seen):
        if coarse(point).split(" ", 1)[1].startswith(SIDE_EFFECTS):
            first_of_kind.setdefault(coarse(point), i)
    indexes = sorted(first_of_kind.values())
    for index in indexes:
        life = Life(tmp_path / f"crash-{index}", CrashAt(index))
        life.run()
        assert life.scenario.crashes == [seen[index]], index
        life.check()
    with capsys.disabled():
        print(f"\ncrash points covered (fakes, one life per side-effect kind): {len(indexes)}")
