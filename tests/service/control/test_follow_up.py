"""tick.follow_up on the service as build_service wires it (APScheduler, WorkerPools): an
apply that created a node or a bootstrap that went through starts the next tick soon, so a
new node goes from its launch to READY in seconds while the interval is an hour. Off, it
waits; a drain step never follows up, a refused launch only in a pool with placement-group
mates (the next decide spills the work to one of them); in a pool decided alone it is
demand, which wakes a tick only with tick.wake_after."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from ruamel.yaml import YAML

from autoscaler.actuators.drain import no_drainer
from autoscaler.catalog import default_catalog
from autoscaler.fleet.store import FleetStore
from autoscaler.model.clock import utc_now
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.snapshot import CapacityError, PoolObservation
from autoscaler.policy.models import Market
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.service.app import Service
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.executor import Executor, ExecutorSettings
from autoscaler.service.executor.advance import AdvanceReport, Change, PoolApply
from autoscaler.service.executor.operations import WorkerPools
from autoscaler.service.wiring import Overrides, build_service
from tests.builders import make_pool_dict
from tests.fakes import FakeAnsible, FakeCloud, FakeTerraform
from tests.service.service_fakes import FakePrices, FakeSignals, write_policy

S = NodeState


def service(tmp: Path, follow_up: str | None) -> tuple[Service, FleetStore, WorkerPools]:
    write_policy(tmp / "policies", "lead", name="gpu", min_nodes=1, max_nodes=1,
                 instance_types=["p3.2xlarge"], cluster={"kind": "none"})
    # A second team, not launched by any test here: two regions' pools in one placement group
    # and a third pool decided alone.
    pools = [make_pool_dict(name, region=region, instance_types=["p3.2xlarge"], max_nodes=2,
                            cluster={"kind": "none"}, **group)
             for name, region, group in [("east", "us-east-1", {"placement_group": "v100"}),
                                         ("west", "us-west-2", {"placement_group": "v100"}),
                                         ("solo", "us-east-2", {})]]
    YAML(typ="safe").dump({"apiVersion": "gpu-autoscaler/v1", "team": "spill", "priority": "high",
                           "pools": pools}, tmp / "policies" / "spill.yaml")
    config = ServiceConfig.model_validate({
        "policies_dir": str(tmp / "policies"), "store": {"url": f"sqlite:///{tmp / 'fleet.db'}"},
        "http": {"enabled": False}, "tick": {"interval": "1h", "follow_up": follow_up}})
    store = FleetStore(config.store.url)
    signals = FakeSignals()
    signals.pools = {"lead/gpu": PoolObservation()}  # the floor node only
    runner = WorkerPools(utc_now, {"apply": 1, "bootstrap": 1, "drain": 1, "state": 1})
    box: dict[str, Service] = {}
    executor = Executor(store, lambda: box["service"].loop.policies(), FakeTerraform(FakeCloud()),
                        FakeAnsible(), {"none": no_drainer()}, lambda node: "127.0.0.1",
                        ExecutorSettings(ready_requires_metrics=False), default_catalog(),
                        utc_now, runner=runner)
    box["service"] = build_service(config, overrides=Overrides(
        store=store, executor=executor, signals=signals, prices=FakePrices()))
    return box["service"], store, runner


def states(store: FleetStore) -> list[S]:
    return [n.state for n in store.nodes()]


def test_finished_applies_and_bootstraps_tick_the_node_to_ready_within_seconds(tmp_path, caplog):
    svc, store, runner = service(tmp_path, "1s")
    assert runner.on_done is not None  # wired by build_service
    sched = svc._scheduler = svc.scheduler()
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="autoscaler.service.control.wake"):
        sched.start()
        try:
            wait_until(lambda: states(store) == [S.READY], 20, "the floor node READY")
        finally:
            sched.shutdown(wait=True)
            runner.close()
            store.close()
    took = time.monotonic() - started
    # launch, apply (worker), bootstrap (worker), READY: one regular tick and one per
    # finished operation, each 1 s after the last began, where the interval was an hour
    assert took < 20 and svc.loop.state.ticks >= 3 and svc.waker.wakes >= 2
    assert "terraform apply lead/gpu finished: next tick at" in caplog.text
    assert "(tick.follow_up 1s)" in caplog.text
    assert "ansible " in caplog.text and " finished: next tick at" in caplog.text


def test_off_a_finished_apply_waits_for_the_interval(tmp_path):
    svc, store, runner = service(tmp_path, None)
    done: list[str] = []
    finished = svc.work_finished

    def seen(why: str, report: AdvanceReport) -> None:
        done.append(why)
        finished(why, report)

    runner.on_done = seen
    sched = svc._scheduler = svc.scheduler()
    sched.start()
    try:
        wait_until(lambda: "terraform apply lead/gpu finished" in done, 20,
                   "the launch's apply to finish")
        time.sleep(2)  # what a follow-up of 1 s would have used
        assert svc.loop.state.ticks == 1 and svc.waker.wakes == 0
        assert states(store) == [S.BOOTSTRAPPING]
    finally:
        sched.shutdown(wait=True)
        runner.close()
        store.close()


def report(**fields: object) -> AdvanceReport:
    return AdvanceReport(started_at=utc_now(), **fields)


def test_only_work_that_gave_its_node_a_next_step_follows_up(tmp_path):
    svc, store, runner = service(tmp_path, "1s")
    woken: list[str] = []
    svc.waker.follow_up = woken.append  # type: ignore[method-assign]
    created = Change(node="lead-gpu-1", to=S.BOOTSTRAPPING, reason="instance i-1 created")
    refused = CapacityError(cloud="aws", region="us-east-1", instance_type="p3.2xlarge",
                            zone="us-east-1a", market=Market.SPOT,
                            code="InsufficientInstanceCapacity", at=utc_now())
    try:
        svc.work_finished("terraform apply lead/gpu finished", report(changes=[created]))
        svc.work_finished("ansible lead-gpu-1 finished", report(bootstrapped=["lead-gpu-1"]))
        # a refused launch in a pool decided alone is demand (tick.wake_after, the waker's
        # wake, not its follow-up), a drain step runs every tick
        svc.work_finished("terraform apply lead/gpu finished", report(capacity_errors=[refused]))
        svc.work_finished("drain step lead-gpu-1 finished",
                          report(drain_steps={"lead-gpu-1": "2 jobs running"}))
        svc.work_finished("terraform apply lead/gpu failed", report(errors=["apply failed"]))
        assert woken == ["terraform apply lead/gpu finished", "ansible lead-gpu-1 finished"]
    finally:
        runner.close()
        store.close()


def test_a_refused_launch_follows_up_only_where_a_group_mate_can_take_the_work(tmp_path, caplog):
    svc, store, runner = service(tmp_path, "1s")
    svc.loop.tick()  # loads the policies (and launches lead's floor node)
    assert svc.loop.policies()["spill"].group_mates("east") == ["west"]
    woken: list[str] = []
    demand: list[str] = []
    svc.waker.follow_up = woken.append  # type: ignore[method-assign]
    svc.waker.wake = demand.append  # type: ignore[method-assign]

    def refused(pool: str, region: str) -> AdvanceReport:
        return report(applies=[PoolApply(pool=pool, ok=False, failed={f"{pool}-1": "refused"})],
                      capacity_errors=[CapacityError(
                          cloud="aws", region=region, instance_type="p3.2xlarge",
                          zone=f"{region}a", market=Market.SPOT,
                          code="InsufficientInstanceCapacity", at=utc_now())])
    try:
        svc.work_finished("terraform apply spill/east finished", refused("spill/east", "us-east-1"))
        # alone: demand, not a follow-up; in the group but failed for another reason: neither
        svc.work_finished("terraform apply spill/solo finished", refused("spill/solo", "us-east-2"))
        svc.work_finished("terraform apply spill/west failed", report(
            applies=[PoolApply(pool="spill/west", ok=False, failed={"spill-west-1": "boom"})],
            errors=["apply failed"]))
        assert woken == ["terraform apply spill/east finished: capacity refused in spill/east, "
                         "whose placement group has other pools"]
        # solo's work is unserved: demand (a tick sooner only with tick.wake_after, which
        # the waker reads); the failed apply of west is not a refusal
        assert demand == ["terraform apply spill/solo finished: capacity refused in spill/solo"]
    finally:
        runner.close()
        store.close()
