"""Side effects on the service's worker pools: advance() hands them over and returns, a
busy pool is never applied twice, the spot-notice path drains while a bootstrap runs, and
a restart after an operation died half way converges with no orphan and no double."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.ansible import BootstrapRun
from autoscaler.actuators.node_map import NodeMap
from autoscaler.actuators.terraform import ApplyResult
from autoscaler.clouds.base import Interruption, InterruptionKind
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.pool import PoolRef
from autoscaler.policy.models import Market, TeamPolicy
from autoscaler.service.control.interruptions import InterruptionIntake, NoticeLoop, PollingSource
from autoscaler.service.executor import Executor
from autoscaler.service.executor.operations import WorkerPools
from tests.fakes import FakeAnsible, FakeTerraform
from tests.service.crash_harness import Crash
from tests.service.executor_rig import Rig, launch, make_rig, slurm_policy

S = NodeState
WAIT = 20.0  # seconds: a bound on waits for worker threads, never a measured quantity


class GatedTerraform(FakeTerraform):
    """Applies block until ``gate`` is set (a long apply); ``die_after`` makes the next
    apply create its instances and then kill its worker before any bookkeeping."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.die_after = False

    def apply(self, ref: PoolRef, nodes: NodeMap, *, destroy: Collection[str] = ()) -> ApplyResult:
        self.entered.set()
        assert self.gate.wait(WAIT), "test never released the apply"
        result = super().apply(ref, nodes, destroy=destroy)
        if self.die_after:
            self.die_after = False
            raise Crash("worker killed after terraform apply")
        return result


class GatedAnsible(FakeAnsible):
    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def bootstrap(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy], *,
                  secrets: Mapping[str, str] | None = None) -> BootstrapRun:
        self.entered.set()
        assert self.gate.wait(WAIT), "test never released the bootstrap"
        return super().bootstrap(nodes, policies, secrets=secrets)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = make_rig(tmp_path, policies={"vision": slurm_policy(
        capacity={"on_demand_base": 0, "spot_percent": 100})})
    r.tf = GatedTerraform(r.cloud)
    r.ansible = GatedAnsible()
    yield r
    r.tf.gate.set()  # type: ignore[attr-defined]
    r.ansible.gate.set()  # type: ignore[attr-defined]
    r.store.close()


def workers(rig: Rig, store: FleetStore | None = None) -> Executor:
    ex = rig.executor(store)
    ex.runner = WorkerPools(rig.clock, {"apply": 2, "bootstrap": 2, "drain": 2})
    return ex


def settle(ex: Executor) -> None:
    assert ex.wait(WAIT), f"operations still running: {ex.running()}"


def test_advance_hands_a_long_apply_over_and_never_applies_the_pool_twice(rig: Rig) -> None:
    tf: GatedTerraform = rig.tf  # type: ignore[assignment]
    rig.ansible.gate.set()  # type: ignore[attr-defined]
    ex = workers(rig)
    [first] = ex.submit(rig_plan(rig, 1))
    report = ex.advance()
    assert tf.entered.wait(WAIT)
    # advance() came back while the apply is still blocked in its worker.
    assert report.started == ["apply:vision/gpu"] and not tf.gate.is_set()
    assert rig.state(first) is S.PROVISIONING  # written before the apply: counted in flight
    assert [op.keys for op in ex.running()] == [("apply:vision/gpu",)]
    [second] = ex.submit(rig_plan(rig, 1))
    again = ex.advance()
    assert again.started == [] and rig.state(second) is S.REQUESTED  # waits for the pool
    tf.gate.set()
    settle(ex)
    collected = ex.advance()  # the finished apply's report, and the next apply started
    assert [a.pool for a in collected.applies] == ["vision/gpu"]
    assert collected.moved(S.BOOTSTRAPPING) == [first]
    assert collected.started[0] == "apply:vision/gpu"
    settle(ex)
    ex.advance()
    assert rig.state(second) is S.BOOTSTRAPPING
    assert len([c for c in tf.calls if c[0] == "apply"]) == 2
    ex.close()


def test_spot_notice_drains_at_once_while_a_bootstrap_runs(rig: Rig) -> None:
    tf: GatedTerraform = rig.tf  # type: ignore[assignment]
    ansible: GatedAnsible = rig.ansible  # type: ignore[assignment]
    tf.gate.set()
    ansible.gate.set()
    [ready] = rig.ready_nodes(market=Market.SPOT)  # inline: READY before the workers start
    rig.slurm.scheduler.run(ready, "4242")
    ansible.gate.clear()
    ex = workers(rig)
    [booting] = ex.submit(rig_plan(rig, 1))
    ex.advance()
    # The apply's worker can finish before this advance reaches its bootstrap step, which
    # then hands the gated batch to a worker at once: wait for the apply alone.
    deadline = time.monotonic() + WAIT
    while any(op.kind == "apply" for op in ex.running()) and time.monotonic() < deadline:
        time.sleep(0.01)
    ex.advance()  # the bootstrap batch goes to a worker and blocks there
    assert ansible.entered.wait(WAIT) and rig.state(booting) is S.BOOTSTRAPPING
    instance = rig.node(ready).instance_id or ""
    rig.cloud.notices.append(Interruption(instance, InterruptionKind.INTERRUPTION, rig.clock(),
                                          rig.clock().replace(minute=2), "test"))
    intake = InterruptionIntake(rig.store, [PollingSource(rig.cloud)], rig.settings, rig.clock,
                                lambda: rig.policies)
    errors: list[str] = []
    notices = NoticeLoop(intake, ex.drain_now, lambda: True, lambda counts, texts: errors.extend(texts))
    report = notices.run_once()
    assert report.interrupted == [ready] and not errors
    assert rig.state(ready) is S.INTERRUPTED and ready in rig.slurm.scheduler.cordoned
    assert any(c[:2] == ("checkpoint", ready) for c in rig.slurm.calls)  # signal first
    assert not ansible.gate.is_set() and [op.kind for op in ex.running()] == ["bootstrap"]
    ansible.gate.set()
    settle(ex)
    ex.close()


def test_worker_killed_after_apply_restart_converges_without_double(rig: Rig) -> None:
    tf: GatedTerraform = rig.tf  # type: ignore[assignment]
    rig.ansible.gate.set()  # type: ignore[attr-defined]
    tf.die_after = True
    ex = workers(rig)
    [name] = ex.submit(rig_plan(rig, 1))
    ex.advance()
    tf.gate.set()
    settle(ex)  # the worker died: the instance exists, the store still says PROVISIONING
    assert rig.state(name) is S.PROVISIONING and len(rig.cloud.live()) == 1
    ex.close()
    rig.store.close()
    store = FleetStore(rig.store.url)  # the restart: nothing in memory survives
    again = workers(rig, store)
    again.advance()
    settle(again)
    again.advance()
    node = store.get(name)
    assert node is not None and node.state is S.BOOTSTRAPPING
    assert [i.instance_id for i in rig.cloud.live()] == [node.instance_id]  # no double
    again.close()
    store.close()


def rig_plan(rig: Rig, count: int) -> Any:
    from autoscaler.model.plan import Plan

    return Plan(decided_at=rig.clock(), actions=[launch(count, market=Market.SPOT)])


def test_service_schedules_the_notice_loop_as_its_own_job(tmp_path: Path) -> None:
    from autoscaler.service.app import Service
    from autoscaler.service.config.models import ServiceConfig
    from tests.service.service_fakes import make_loop

    kit = make_loop(tmp_path)
    config = ServiceConfig.model_validate({
        "policies_dir": tmp_path / "policies", "store": {"url": f"sqlite:///{tmp_path / 'fleet.db'}"},
        "executor": {"notice_interval": "3s"}})
    intake = InterruptionIntake(kit.store, [], config.executor, kit.clock)
    counted: list[tuple[Mapping[str, int], Sequence[str]]] = []
    notices = NoticeLoop(intake, lambda names: None, lambda: False,  # type: ignore[arg-type,return-value]
                         lambda c, t: counted.append((c, t)))
    service = Service(config, kit.loop, kit.store, kit.loop.catalog, notices=notices)
    job = service.scheduler().get_job("notices")
    assert job is not None and job.trigger.interval.total_seconds() == 3
    assert notices.run_once().interrupted == [] and counted == []  # a follower reads nothing
    kit.loop.count_step_errors({"terraform": 2}, ["pool a: boom", "pool b: boom"])
    assert kit.loop.state.step_errors == {"terraform": 2}
    assert 'gpu_autoscaler_step_errors_total{component="terraform"} 2.0' in \
        kit.loop.metrics.exposition().decode()
    kit.store.close()
