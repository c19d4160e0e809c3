"""SIGKILL the service while an operation runs on its worker pools (real terraform and the
AWS provider against moto; issue 22).

A child process runs the loop with the service's :class:`WorkerPools` (``terraform_world``
with ``operations="workers"``), one simulated second per real second:

1. it is SIGKILLed, with its terraform and provider, as soon as the apply running in an
   apply worker has launched the first instance (the loop kept ticking meanwhile);
2. a second child on the same store and Terraform workdir resumes: the retried apply
   imports the instance the killed one left outside the state and creates the other; the
   nodes' bootstraps then hang in a bootstrap worker (a driver build) and the child is
   SIGKILLed again, the attempt already counted in the store;
3. the loop restarts in this process, on workers too, retries the bootstraps, reaches two
   READY nodes and then scales to zero.

Checks: every node TERMINATED, no instance left in moto (no orphan), moto never saw two
instances for one node (no double), the killed bootstrap was retried (attempt 2), and the
operations journal closed the killed apply and bootstrap as interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler.fleet.operations import OperationLog
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.sandbox.hosts.procs import ManagedProcess, wait_until
from autoscaler.sandbox.services.moto_server import MotoSandbox, running_instances
from tests.actuators.terraform_fixtures import moto, needs_terraform, sandbox_settings  # noqa: F401
from tests.service.crash_harness import Faults, Scenario
from tests.service.sigkill import child_pids, every_instance, kill_tree  # noqa: F401
from tests.service.terraform_world import POOL, later, make_world, policy, spawn_child

pytestmark = [pytest.mark.slow, needs_terraform]
S = NodeState


def child(tmp_path: Path, name: str, moto: MotoSandbox, url: str,  # noqa: F811
          terraform: Any, **options: Any) -> ManagedProcess:
    return spawn_child(tmp_path, name, url, terraform, moto.endpoint, moto.env(),
                       operations="workers", **options)


def bootstraps(url: str) -> dict[str, tuple[NodeState, int]]:
    store = FleetStore(url)
    try:
        return {n.name: (n.state, n.progress.bootstrap.attempts)
                for n in store.nodes(include_terminated=True)}
    finally:
        store.close()


@pytest.mark.timeout(1500)  # ~4 min on an idle 2-core machine; terraform is slow under load
def test_sigkill_while_an_apply_then_a_bootstrap_runs_in_a_worker(
        moto: MotoSandbox, tmp_path: Path, child_pids: list[int],  # noqa: F811
        capsys: pytest.CaptureFixture[Any]) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    terraform = sandbox_settings(moto, tmp_path / "tf")

    first = child(tmp_path, "apply-worker", moto, url, terraform)
    try:
        wait_until(lambda: running_instances(moto.client(), pool=POOL), 420,
                   "the apply worker to launch an instance", interval=0.1, proc=first)
        kill_tree(first.pid, child_pids)
    finally:
        first.kill()
    log = (tmp_path / "apply-worker.log").read_text()
    ticks_while_applying = log.count("running: terraform apply")
    assert ticks_while_applying >= 2, f"the loop waited for the apply:\n{log[-2000:]}"
    # Written before the side effect: the store says what the killed apply was doing.
    assert {s for s, _ in bootstraps(url).values()} == {S.PROVISIONING}

    markers = tmp_path / "bootstrapping"
    markers.mkdir()
    second = child(tmp_path, "bootstrap-worker", moto, url, terraform, start_minutes=5,
                   slow_bootstrap=str(markers))
    try:
        wait_until(lambda: any(markers.iterdir()), 600, "a bootstrap to start in a worker",
                   interval=0.2, proc=second)
        kill_tree(second.pid, child_pids)
    finally:
        second.kill()
    hung = sorted(p.name for p in markers.iterdir())
    at_kill = bootstraps(url)
    assert all(at_kill[n] == (S.BOOTSTRAPPING, 1) for n in hung), at_kill
    killed_with = every_instance(moto, POOL)

    world = make_world(url, terraform, moto.endpoint)
    world.operations = "workers"
    scenario = Scenario(world, Faults(), later(10))

    def settle() -> None:
        assert scenario.executor.wait(600), "an operation did not finish"

    try:
        scenario.run_until(lambda: sorted(scenario.states().values()) == [S.READY, S.READY],
                           max_ticks=40, between=settle)
        retried = bootstraps(url)
        world.policies = {"vision": policy(0)}
        scenario.run_until(lambda: set(scenario.states().values()) == {S.TERMINATED},
                           max_ticks=40, between=settle)
    finally:
        scenario.executor.close()
        scenario.raw_store.close()

    states = scenario.states()
    assert sorted(states) == ["vision-v100-1", "vision-v100-2"], states
    assert running_instances(moto.client(), pool=POOL) == [], "orphaned instances"
    seen = every_instance(moto, POOL)
    assert sorted(seen) == sorted(states) and all(len(ids) == 1 for ids in seen.values()), seen
    assert all(retried[n] == (S.READY, 2) for n in hung), retried
    store = FleetStore(url)
    try:  # the journal knows what each SIGKILL cut short
        cut = [(r.kind, r.what) for r in OperationLog(store).recent(500) if r.outcome == "interrupted"]
    finally:
        store.close()
    assert ("apply", f"terraform apply vision/{POOL}") in cut, cut
    assert all(any(kind == "bootstrap" and n in what for kind, what in cut) for n in hung), cut
    with capsys.disabled():
        print(f"\nSIGKILL with an apply on a worker ({ticks_while_applying} ticks while it ran), "
              f"then with {hung} bootstrapping on a worker ({len(killed_with)} instance(s) "
              f"then); restarted on workers: {scenario.ticks} ticks to READY and back to 0")
