"""Fencing on real PostgreSQL: two service instances (each its own engine and store, as
two hosts would have), one clock skewed by more than the lease TTL.

* The skewed one never leads while the other renews: the database's clock decides.
* A leader deposed while it believed it still led (a paused VM's monotonic clock does
  not see the pause) has its store writes and its Terraform apply refused.
* A takeover waits for a fenced write in flight; every write after it is refused.
* The lease job keeps renewing while a tick is stuck in a long action, and once
  renewals fail the instance stops acting before its lease can run out.
* A renewal the scheduler starts late (a starved host) still runs: the lease holds.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from apscheduler.executors.pool import ThreadPoolExecutor

from autoscaler.actuators.drain import no_drainer
from autoscaler.catalog import default_catalog
from autoscaler.fleet import lease
from autoscaler.fleet.store import Fenced, FleetStore, LeaseToken
from autoscaler.fleet.tables import AuditRow, Base
from autoscaler.model.clock import utc_now
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Plan
from autoscaler.model.pool import PoolRef
from autoscaler.model.snapshot import PoolObservation
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.service.app import Service
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.executor import Executor, ExecutorSettings
from autoscaler.service.wiring import Overrides, build_service
from tests.fakes import FakeAnsible, FakeCloud, FakeTerraform
from tests.fleet.writes import transition
from tests.service import postgres
from tests.service.service_fakes import FakeExecutor, FakePrices, FakeSignals, write_policy

TTL_S = 2
SKEW = timedelta(seconds=31)  # the skew that once gave two leaders; more than the TTL
POOL = PoolRef("lead", "gpu", "aws", "us-east-1")

pg = pytest.fixture(scope="module")(postgres.running)


def service_config(tmp: Path, pg: postgres.Postgres, holder: str) -> ServiceConfig:
    return ServiceConfig.model_validate({
        "policies_dir": str(tmp / "policies"), "store": {"url": pg.url},
        # Required for HA; the Terraform here is the fake world below (not run).
        "terraform": {"backend": {"kind": "s3", "bucket": "state"}},
        "http": {"enabled": False},
        "leader": {"enabled": True, "ttl": f"{TTL_S}s", "holder": holder},
    })


@dataclass
class Instance:
    """One service instance: its own store (engine), clock, Ansible; the cloud and the
    Terraform state are the world both share (as an S3 backend is)."""

    service: Service
    store: FleetStore
    ansible: FakeAnsible
    signals: FakeSignals

    def freeze(self) -> None:
        """Pause the VM: its monotonic clock stops, so its own view of the lease stays."""
        stopped = time.monotonic()
        self.service.leadership.monotonic = lambda: stopped


def instance(tmp: Path, pg: postgres.Postgres, holder: str, tf: FakeTerraform,
             skew: timedelta = timedelta(0)) -> Instance:
    def clock() -> datetime:
        return utc_now() + skew

    store = FleetStore(pg.url)
    ansible, signals = FakeAnsible(), FakeSignals()
    signals.pools = {"lead/gpu": PoolObservation()}  # the floor node only
    box: dict[str, Service] = {}
    executor = Executor(store, lambda: box["service"].loop.policies(), tf, ansible,
                        {"none": no_drainer()}, lambda node: "127.0.0.1",
                        ExecutorSettings(ready_requires_metrics=False), default_catalog(), clock)
    box["service"] = build_service(service_config(tmp, pg, holder), clock=clock, overrides=Overrides(
        store=store, executor=executor, signals=signals, prices=FakePrices()))
    return Instance(box["service"], store, ansible, signals)


def applies(tf: FakeTerraform) -> int:
    return sum(1 for call in tf.calls if call[0] == "apply")


def plans(store: FleetStore) -> int:
    last = store.last_plan()
    return last[0] if last else 0


@pytest.fixture
def world(tmp_path, pg):
    write_policy(tmp_path / "policies", "lead", name="gpu", min_nodes=1, max_nodes=2,
                 instance_types=["p3.2xlarge"], cluster={"kind": "none"})
    tf = FakeTerraform(FakeCloud())
    made: list[Instance] = []

    def make(holder: str, skew: timedelta = timedelta(0)) -> Instance:
        made.append(instance(tmp_path, pg, holder, tf, skew))
        return made[-1]

    yield tf, make
    for inst in made:
        inst.store.close()
    cleaner = FleetStore(pg.url)
    with cleaner.session() as s:  # the next test starts on an empty database
        for table in Base.metadata.sorted_tables:
            s.execute(table.delete())
    cleaner.close()


def test_a_skewed_instance_never_leads_and_a_deposed_leaders_write_and_apply_are_refused(world):
    tf, make = world
    a, b = make("a"), make("b", skew=SKEW)
    first = a.service.tick()
    assert first.leader and first.error is None, first.error
    assert [n.state for n in a.store.nodes()] == [NodeState.READY] and applies(tf) == 1
    # b's clock says a's lease ran out 31 s ago: b would have taken it. The database says no.
    for _ in range(3):
        follower = b.service.tick()
        assert not follower.leader and follower.plan is None and b.signals.calls == 0
        assert a.service.tick().leader
        time.sleep(TTL_S / 4)
    lease = a.store.lease("gpu-autoscaler")
    assert (lease.holder, lease.epoch) == ("a", 1)
    assert applies(tf) == 1 and b.ansible.calls == []

    # a's VM pauses longer than the TTL; b takes over on the database's clock.
    a.freeze()
    time.sleep(TTL_S + 0.3)
    took = b.service.tick()
    assert took.leader and took.error is None and b.service.leadership.epoch == 2
    assert a.service.leadership.is_leader(), "a wakes up sure it still leads"

    # a's store writes are refused inside their own transaction...
    node = a.store.nodes()[0].name
    before = (plans(a.store), a.store.nodes())
    with pytest.raises(Fenced, match=r"held by b \(epoch 2\); a \(epoch 1\) was deposed"):
        transition(a.store, node, NodeState.DRAINING, utc_now(), "stale plan")
    with pytest.raises(Fenced):
        a.store.record_plan(Plan(decided_at=utc_now()))
    with pytest.raises(Fenced):
        a.service.loop.executor.submit(first.plan)
    # ...and so is its apply: the pool is due one (its state looks stale), none is run.
    tf.mark_stale(POOL)
    report = a.service.loop.executor.advance()
    assert any("Fenced: refused" in e and "was deposed" in e for e in report.errors), report.errors
    assert applies(tf) == 1 and report.applies == []
    assert (plans(a.store), a.store.nodes()) == before
    # Back in its own loop, a finds out and stays a follower; b keeps acting alone.
    assert not a.service.tick().leader
    again = b.service.tick()
    assert again.leader and again.error is None and applies(tf) == 2
    assert [n.name for n in b.store.nodes(include_terminated=True)] == ["lead-gpu-1"]


def test_the_lease_is_renewed_through_a_long_action_and_acting_stops_when_renewal_fails(
        world, monkeypatch):
    _, make = world
    a = make("a")
    executor = FakeExecutor(a.store, a.service.loop.clock)
    a.service.loop.executor = executor
    inside, release = threading.Event(), threading.Event()

    def long_action() -> None:  # a 30-minute apply, in miniature
        inside.set()
        release.wait(30)

    executor.on_submit = long_action
    sched = a.service.scheduler()
    sched.start()
    try:
        assert inside.wait(30), "the tick never reached its long action"
        expiry = a.store.lease("gpu-autoscaler").expires_at
        time.sleep(TTL_S * 1.5)  # longer than the TTL: only renewals keep the lease
        assert a.store.lease("gpu-autoscaler").expires_at > expiry + timedelta(seconds=TTL_S)
        assert a.service.leadership.is_leader() and not release.is_set()
        a.store.fence()

        # The database becomes unreachable for renewals: acting stops at the margin.
        def down(*_args: object) -> None:
            raise OSError("connection refused")

        monkeypatch.setattr(a.store, "try_lease", down)
        time.sleep(TTL_S)  # past the 80% margin since the last good renewal
        assert not a.service.leadership.is_leader()
        with pytest.raises(Fenced, match="does not hold"):
            a.store.fence()
        release.set()
        wait_until(lambda: a.service.loop.state.ticks >= 1, 30, "the tick to finish",
                   interval=0.1)
        assert a.service.loop.state.ticks == 1 and executor.submitted
        assert executor.advanced == 0, "the rest of the tick was skipped: no side effects"
    finally:
        release.set()
        sched.shutdown(wait=True)


LATE_S = 1.2  # more than APScheduler's default 1 s grace, less than the TTL


class LateExecutor(ThreadPoolExecutor):
    """Every run starts ``LATE_S`` after it was due, as on a starved host."""

    def _do_submit_job(self, job, run_times):  # type: ignore[no-untyped-def]
        time.sleep(LATE_S)
        super()._do_submit_job(job, run_times)


def test_renewals_the_scheduler_starts_late_still_run_and_the_lease_holds(world):
    _, make = world
    a = make("a")
    sched = a.service.scheduler()
    sched.add_executor(LateExecutor(), "default")
    sched.start()
    try:
        wait_until(lambda: a.store.lease("gpu-autoscaler") is not None, 30,
                   "the first lease", interval=0.1)
        expiry = a.store.lease("gpu-autoscaler").expires_at
        time.sleep(TTL_S * 3)  # only renewals that run late keep the lease this long
        lease = a.store.lease("gpu-autoscaler")
        assert (lease.holder, lease.epoch) == ("a", 1), "the lease lapsed between late renewals"
        assert lease.expires_at > expiry + timedelta(seconds=TTL_S)
        assert a.service.leadership.is_leader()
    finally:
        sched.shutdown(wait=True)


def test_a_takeover_waits_for_a_write_in_flight_and_every_later_write_fails(world, pg):
    """The fence and the write share one transaction: the row lock it takes makes the
    takeover wait until the write committed; from then on the old epoch is refused."""
    old, new = FleetStore(pg.url), FleetStore(pg.url)
    token = LeaseToken("gpu-autoscaler", "a", old.try_lease("gpu-autoscaler", "a",
                                                            timedelta(seconds=0.5)))
    old.set_fence(lambda: token)
    taken: list[int | None] = []
    taker = threading.Thread(target=lambda: taken.append(
        new.try_lease("gpu-autoscaler", "b", timedelta(seconds=30))))
    try:
        with old.session() as s:  # what every fenced write does first
            lease.check(s, token)
            time.sleep(0.7)  # the lease runs out (database clock) while the write is open
            taker.start()
            time.sleep(1)
            assert taken == [], "the takeover waits for the write in flight"
            s.add(AuditRow(at=utc_now(), actor="a", event="in-flight", detail=""))
        taker.join(10)
        assert taken == [2]
        with pytest.raises(Fenced, match="held by b"):
            old.audit("late", "after the takeover", utc_now())
        assert [r.event for r in new.audit_log()] == ["in-flight"]
    finally:
        taker.join(10)
        old.close()
        new.close()
