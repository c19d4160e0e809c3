"""Crash safety with the real terraform binary and AWS provider against moto.

One fleet life (launch 2 nodes, READY, scale to 0, destroyed), in one sequence:

1. a child process runs the loop and is SIGKILLed, with its terraform and provider, as
   soon as the first instance shows up in moto: the apply dies between RunInstances and
   saving the state (the provider waits >= 10 s for "running"), so the cloud holds an
   instance the state does not know: a retry that simply applied again would double it;
2. the loop restarts in this process on the same SQLite file and Terraform workdir and
   is crashed once at every kind of point it reaches (store writes, applies), restarting
   each time, until the fleet is up and then gone.

Checks: every node TERMINATED, no instance left in moto, and moto never saw two
instances for one node name (it lists terminated instances too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler.model.lifecycle import NodeState
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.moto_server import MotoSandbox, running_instances
from tests.actuators.terraform_fixtures import moto, needs_terraform, sandbox_settings  # noqa: F401
from tests.service.crash_harness import CrashOncePerPoint, Scenario, coarse
from tests.service.sigkill import child_pids, every_instance, kill_tree  # noqa: F401
from tests.service.terraform_world import POOL, later, make_world, policy, spawn_child

pytestmark = [pytest.mark.slow, needs_terraform]
S = NodeState


@pytest.mark.timeout(1500)  # ~4 min on an idle 2-core machine; terraform is slow under load
def test_sigkill_mid_apply_then_a_crash_at_every_kind_of_point(
        moto: MotoSandbox, tmp_path: Path, child_pids: list[int],  # noqa: F811
        capsys: pytest.CaptureFixture[Any]) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    terraform = sandbox_settings(moto, tmp_path / "tf")
    child = spawn_child(tmp_path, "executor-child", url, terraform, moto.endpoint, moto.env())
    try:
        wait_until(lambda: running_instances(moto.client(), pool=POOL), 420,
                   "the child's terraform apply to launch an instance", interval=0.1, proc=child)
        kill_tree(child.pid, child_pids)  # provider and terraform first, then the loop
    finally:
        child.kill()
    killed_with = sorted(every_instance(moto, POOL))

    world = make_world(url, terraform, moto.endpoint)
    faults = CrashOncePerPoint(key=coarse)
    scenario = Scenario(world, faults, later(5))

    def ready() -> bool:
        return sorted(s for s in scenario.states().values()) == [S.READY, S.READY]

    scenario.run_until(ready, max_ticks=60)
    world.policies = {"vision": policy(0)}
    scenario.run_until(lambda: set(scenario.states().values()) == {S.TERMINATED}, max_ticks=60)

    states = scenario.states()
    assert sorted(states) == ["vision-v100-1", "vision-v100-2"], states
    assert running_instances(moto.client(), pool=POOL) == [], "orphaned instances"
    seen = every_instance(moto, POOL)
    assert sorted(seen) == sorted(states) and all(len(ids) == 1 for ids in seen.values()), seen
    imported = world.provisioner.imported
    with capsys.disabled():
        print(f"\nSIGKILL mid-apply with {len(killed_with)} instance(s) launched; adopted by "
              f"terraform import: {[key for _, key, _ in imported]}; then crash points covered "
              f"(real terraform): {len(scenario.crashes)} kinds, {scenario.ticks} ticks")
    assert imported, "the instance the killed apply created was not imported"
    assert {coarse(p) for p in scenario.crashes} >= {
        "before terraform.apply", "after terraform.apply",
        "before store.move(<node> -> BOOTSTRAPPING)", "after store.move(<node> -> READY)",
        "after store.move(<node> -> TERMINATING)", "after store.move(<node> -> TERMINATED)"}
