"""Warm pools through the executor, with fakes, crashed at every point of one life.

The life: a warm pool of 1 fills (launched, image-time bootstrap, stopped: WARM); a floor
of 1 starts that node (STARTING, node-time bootstrap, READY) and the pool refills behind
it; then the policy drops the floor and the warm pool and everything is terminated. The
executor is stopped at every store write and side effect it reaches (a crash between
stopping an instance and recording the node WARM among them) and restarted on the same
SQLite file. It must converge with nothing lost and nothing doubled: one instance per
node ever, the started node's the same instance it had while warm, none left running.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.ansible import BootstrapRun
from autoscaler.actuators.ansible.runner import WARM_ENTRY, node_part
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.executor import ExecutorSettings
from tests.builders import NOW, make_policy
from tests.fakes import FakeAnsible, FakeCloud, FakeDrainer, FakeTerraform
from tests.service.crash_harness import CrashOncePerPoint, Faults, Scenario, World, coarse

S = NodeState


def policy(floor: int, warm: int, most: int = 1) -> TeamPolicy:
    return make_policy(team="vision", min_nodes=floor, max_nodes=most,
                       instance_types=["g4dn.xlarge"], capacity={"spot_percent": 0},
                       warm_pool={"size": warm, "max": 1} if warm else None,
                       scale_down={"drain_timeout": "2m", "checkpoint_grace": "30s",
                                   "max_draining_percent": 100},
                       cluster={"kind": "slurm", "partition": "gpu"})


class TaggedAnsible(FakeAnsible):
    """Records the part of the playbook each node ran; any but a warm entry joins Slurm."""

    def __init__(self, drainer: FakeDrainer):
        super().__init__()
        self.scheduler = drainer.scheduler
        self.parts: list[tuple[str, str]] = []

    def bootstrap(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy], *,
                  secrets: Mapping[str, str] | None = None) -> BootstrapRun:
        run = super().bootstrap(nodes, policies, secrets=secrets)
        for node in nodes:
            if node.name in run.ok:
                self.parts.append((node.name, node_part(node).name))
                if node_part(node) != WARM_ENTRY:
                    self.scheduler.join(node.name)
        return run


class WarmLife:
    def __init__(self, tmp_path: Path, faults: Faults):
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.cloud = FakeCloud()
        self.tf = FakeTerraform(self.cloud)
        self.slurm = FakeDrainer("slurm")
        self.ansible = TaggedAnsible(self.slurm)
        self.world = World(
            url=f"sqlite:///{tmp_path / 'fleet.db'}", policies={"vision": policy(0, 1)},
            provisioner=self.tf, bootstrapper=self.ansible, drainers={"slurm": self.slurm},
            address_of=lambda node: "169.254.77.2" if node.instance_id else None,
            clouds=lambda cloud, region: self.cloud,
            settings=ExecutorSettings(bootstrap_retry_backoff="0s", bootstrap_retries=3))
        self.scenario = Scenario(self.world, faults, NOW)

    def count(self, state: S) -> int:
        return sum(1 for s in self.scenario.states().values() if s is state)

    def run(self) -> dict[str, str]:
        sc = self.scenario
        sc.run_until(lambda: self.count(S.WARM) == 1)
        [first] = [n for n, s in sc.states().items() if s is S.WARM]
        warm_id = sc.raw_store.get(first).instance_id  # type: ignore[union-attr]
        self.world.policies = {"vision": policy(1, 1)}
        sc.run_until(lambda: sc.states()[first] is S.READY and self.count(S.WARM) == 1)
        started = sc.raw_store.get(first)
        assert started is not None and started.instance_id == warm_id, "started a new instance"
        self.world.policies = {"vision": policy(0, 0, most=0)}
        sc.run_until(lambda: set(sc.states().values()) == {S.TERMINATED}, max_ticks=120)
        return {"first": first}

    def check(self, first: str) -> None:
        states = self.scenario.states()
        assert len(states) == 2, f"one warm node started, one refill: {sorted(states)}"
        assert self.cloud.live() == [], "orphaned instances"
        per_node: dict[str, list[str]] = {}
        for inst in self.cloud.instances.values():
            per_node.setdefault(inst.node or "?", []).append(inst.instance_id)
        doubled = {n: ids for n, ids in per_node.items() if len(ids) != 1}
        assert not doubled, f"doubled instances: {doubled}"
        parts = {(n, p) for n, p in self.ansible.parts}
        # Entry (all but the start part, join held off), then its start part.
        assert (first, "warm") in parts and (first, "start") in parts, parts
        assert (first, "full") not in parts, "a warm node never runs the whole playbook"
        stops = [c for c in self.cloud.calls if c[0] == "power" and c[1][1] == "stopped"]
        starts = [c for c in self.cloud.calls if c[0] == "power" and c[1][1] == "running"]
        assert len(starts) == 1 and len(stops) == 2, (starts, stops)


def test_a_warm_life_converges_and_each_transition_is_recorded(tmp_path: Path) -> None:
    life = WarmLife(tmp_path, Faults())
    names = life.run()
    life.check(names["first"])
    moves = [(t.node, t.to_state) for t in life.scenario.raw_store.transitions()]
    first = names["first"]
    assert [s for n, s in moves if n == first] == [
        "REQUESTED", "PROVISIONING", "BOOTSTRAPPING", "STOPPING", "WARM", "STARTING",
        "BOOTSTRAPPING", "READY", "DRAINING", "DRAINED", "TERMINATING", "TERMINATED"]


def test_a_crash_at_every_point_of_a_warm_life_loses_and_doubles_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[Any]) -> None:
    faults = CrashOncePerPoint()
    life = WarmLife(tmp_path, faults)
    names = life.run()
    life.check(names["first"])
    kinds = {coarse(p) for p in life.scenario.crashes}
    with capsys.disabled():
        print(f"\nwarm pool crash points (fakes, one life): {len(life.scenario.crashes)} "
              f"({len(kinds)} kinds)")
    for required in ("before store.move(<node> -> WARM)", "after store.move(<node> -> WARM)",
                     "before store.move(<node> -> STOPPING)", "before store.move(<node> -> STARTING)",
                     "after store.move(<node> -> STARTING)", "after terraform.apply"):
        assert required in kinds, (required, sorted(kinds))
