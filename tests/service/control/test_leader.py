"""Leader lease: one holder at a time, takeover after the TTL (on the database's clock),
release hands over at once, a deposed or unrenewed leader is fenced, and HA config
without a shared store and Terraform backend is refused."""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta

import pytest

from autoscaler.actuators.ansible import HostStatus
from autoscaler.fleet.store import Fenced, FleetStore, LeaseToken
from autoscaler.model.pool import PoolRef
from autoscaler.service.config.models import LeaderSettings, ServiceConfig
from autoscaler.service.control.leader import Leadership
from tests.builders import NOW
from tests.fleet.test_store import new
from tests.service.executor_rig import drain, launch, make_rig


class Mono:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def store(tmp_path):
    s = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    yield s
    s.close()


def pair(store, mono, ttl="10s"):
    a = Leadership(store, LeaderSettings(enabled=True, ttl=ttl, holder="a"), mono)
    b = Leadership(store, LeaderSettings(enabled=True, ttl=ttl, holder="b"), mono)
    return a, b


def test_only_one_instance_leads(store):
    a, b = pair(store, Mono())
    assert a.renew() and not b.renew()
    assert a.is_leader() and not b.is_leader()
    assert a.info().lease_holder == "a" and b.info().lease_holder == "a"
    assert a.token().epoch == 1 and b.token() is None


def test_the_other_takes_over_after_the_ttl_with_a_new_epoch(store):
    mono = Mono()
    a, b = pair(store, mono, ttl="2s")
    a.renew()
    first_epoch = a.epoch
    mono.t += 1.7
    assert not a.is_leader(), "a stops acting after 80% of the TTL without renewal"
    assert not b.renew(), "the lease has not expired on the database's clock yet"
    time.sleep(2.1)  # a crashed: the database's clock runs out its lease
    assert b.renew() and b.is_leader()
    assert b.epoch == first_epoch + 1
    assert not a.renew() and not a.is_leader()


def test_a_deposed_leader_that_believes_it_leads_is_fenced(store, tmp_path):
    """A paused VM's monotonic clock does not see the pause: ``a`` wakes up sure it still
    leads. The database says otherwise, for its writes and its side effects."""
    frozen, live = Mono(), Mono()
    a = Leadership(store, LeaderSettings(enabled=True, ttl="2s", holder="a"), frozen)
    b = Leadership(store, LeaderSettings(enabled=True, ttl="2s", holder="b"), live)
    fenced = FleetStore(store.url, fence=a.token)  # a's own store, own engine
    assert a.renew()
    new(fenced)  # the leader writes
    time.sleep(2.1)
    assert b.renew() and b.epoch == 2
    assert a.is_leader() and a.token().epoch == 1, "a's own view did not move"
    with pytest.raises(Fenced, match="held by b"):
        fenced.fence()
    with pytest.raises(Fenced, match="held by b"):
        new(fenced)
    assert [n.name for n in store.nodes()] == ["vision-train-1"]
    fenced.close()


def test_release_hands_over_at_once(store):
    a, b = pair(store, Mono())
    a.renew()
    a.release()
    assert not a.is_leader() and a.token() is None and b.renew()


def test_failed_renewals_stop_acting_at_the_margin(store, monkeypatch):
    mono = Mono()
    a, _ = pair(store, mono)
    store.set_fence(a.token)
    a.renew()
    monkeypatch.setattr(store, "try_lease", lambda *args: (_ for _ in ()).throw(OSError("db down")))
    mono.t += 5
    assert a.renew(), "still inside the safety margin"
    store.fence()
    mono.t += 4
    assert not a.renew() and not a.is_leader()
    with pytest.raises(Fenced, match="does not hold"):
        store.fence()  # no side effect starts
    with pytest.raises(Fenced):
        store.audit("x", "y", NOW)  # and nothing is written


def test_disabled_lease_always_leads(store):
    lead = Leadership(store, LeaderSettings())
    assert lead.renew() and lead.is_leader() and store.lease("gpu-autoscaler") is None
    assert LeaderSettings(enabled=True).ttl == timedelta(seconds=30)


PG = "postgresql+psycopg://gas@db.internal/gas"
S3 = {"kind": "s3", "bucket": "state"}


@pytest.mark.parametrize(("store_url", "backend", "why"), [
    ("sqlite:///fleet.db", S3, "needs a PostgreSQL store"),
    ("sqlite:///:memory:", S3, "needs a PostgreSQL store"),
    (PG, {"kind": "local"}, "needs a shared Terraform backend"),
    (PG, None, "needs a shared Terraform backend"),
])
def test_ha_without_a_shared_store_and_terraform_backend_is_refused(store_url, backend, why):
    doc = {"policies_dir": "p", "store": {"url": store_url}, "leader": {"enabled": True}}
    if backend is not None:
        doc["terraform"] = {"backend": backend}
    with pytest.raises(ValueError, match=why):
        ServiceConfig.model_validate(doc)
    doc["leader"] = {"enabled": False}
    ServiceConfig.model_validate(doc)  # a single instance may use anything


def test_ha_with_postgres_and_s3_state_is_accepted():
    cfg = ServiceConfig.model_validate({"policies_dir": "p", "store": {"url": PG},
                                        "terraform": {"backend": S3}, "leader": {"enabled": True}})
    assert cfg.leader.enabled


def test_a_deposed_executor_starts_no_apply_ansible_run_or_drain_step(tmp_path):
    """The state calls for a drain step, an Ansible retry and an apply; a deposed
    executor does none of them, the leader's does all three."""
    rig = make_rig(tmp_path)
    (ready,) = rig.ready_nodes(1)
    rig.slurm.scheduler.run(ready, "j1")  # a job keeps the drain going
    rig.submit(drain(ready))
    (booting,) = rig.submit(launch(1))
    rig.ansible.fail_once[booting] = (HostStatus.UNREACHABLE, "Gathering Facts", "no route")
    rig.advance()  # drain started (its progress saved), the bootstrap failed once
    rig.clock.tick(60)  # past the bootstrap backoff and the drain's retry-after
    rig.tf.mark_stale(PoolRef("vision", "gpu", "aws", "us-east-1"))
    assert rig.store.try_lease("gpu-autoscaler", "a", timedelta(seconds=30)) == 1
    rig.store.release_lease("gpu-autoscaler", "a")
    assert rig.store.try_lease("gpu-autoscaler", "b", timedelta(seconds=30)) == 2
    deposed = FleetStore(rig.store.url, fence=lambda: LeaseToken("gpu-autoscaler", "a", 1))
    seen = (len(rig.slurm.calls), len(rig.ansible.calls), len(rig.tf.calls))
    with contextlib.suppress(Fenced):
        rig.executor(deposed).advance()
    assert (len(rig.slurm.calls), len(rig.ansible.calls), len(rig.tf.calls)) == seen
    deposed.close()
    rig.executor().advance()  # unfenced: the same state does run all three
    assert len(rig.slurm.calls) > seen[0] and len(rig.ansible.calls) == seen[1] + 1
    assert any(call[0] == "apply" for call in rig.tf.calls[seen[2]:])
    rig.store.close()
