"""Leader lease: one holder at a time, takeover after the TTL, release hands over at once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from autoscaler.fleet.store import FleetStore
from autoscaler.service.config import LeaderSettings
from autoscaler.service.leader import Leadership
from tests.service.service_fakes import Clock


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


def pair(store, clock, mono, ttl="10s"):
    a = Leadership(store, LeaderSettings(enabled=True, ttl=ttl, holder="a"), clock, mono)
    b = Leadership(store, LeaderSettings(enabled=True, ttl=ttl, holder="b"), clock, mono)
    return a, b


def test_only_one_instance_leads(store):
    clock, mono = Clock(), Mono()
    a, b = pair(store, clock, mono)
    assert a.renew() and not b.renew()
    assert a.is_leader() and not b.is_leader()
    assert a.info().lease_holder == "a" and b.info().lease_holder == "a"


def test_the_other_takes_over_after_the_ttl_with_a_new_epoch(store):
    clock, mono = Clock(), Mono()
    a, b = pair(store, clock, mono)
    a.renew()
    first_epoch = a.epoch
    clock.advance(seconds=9)
    mono.t += 9
    assert not b.renew(), "the lease has not expired yet"
    # a stopped renewing (crashed); its own view ends before the lease does
    assert not a.is_leader(), "a stops acting after 80% of the TTL without renewal"
    clock.advance(seconds=2)
    mono.t += 2
    assert b.renew() and b.is_leader()
    assert b.epoch == first_epoch + 1
    assert not a.renew() and not a.is_leader()


def test_release_hands_over_at_once(store):
    clock, mono = Clock(), Mono()
    a, b = pair(store, clock, mono)
    a.renew()
    a.release()
    assert not a.is_leader() and b.renew()


def test_a_store_failure_keeps_leading_only_until_the_margin(store, monkeypatch):
    clock, mono = Clock(), Mono()
    a, _ = pair(store, clock, mono)
    a.renew()
    monkeypatch.setattr(store, "try_lease", lambda *args: (_ for _ in ()).throw(OSError("db down")))
    mono.t += 5
    assert a.renew(), "still inside the safety margin"
    mono.t += 4
    assert not a.renew() and not a.is_leader()


def test_disabled_lease_always_leads(store):
    lead = Leadership(store, LeaderSettings(), Clock())
    assert lead.renew() and lead.is_leader() and store.lease("gpu-autoscaler") is None
    assert LeaderSettings(enabled=True).ttl == timedelta(seconds=30)
