"""The SQLAlchemy store: names, transitions before side effects, plans, leases."""

from __future__ import annotations

from datetime import timedelta

import pytest

from autoscaler.engine import decide
from autoscaler.fleet.lifecycle import IllegalTransitionError, NodeState
from autoscaler.fleet.store import ConcurrentUpdateError, FleetStore
from autoscaler.policy.models import Market
from tests.builders import NOW, make_policy, snapshot


@pytest.fixture
def store(tmp_path):
    s = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    yield s
    s.close()


def new(store, pool="train"):
    return store.create_node(team="vision", pool=pool, cloud="aws", region="us-east-1", zone="us-east-1a",
                             instance_type="p3.2xlarge", market=Market.SPOT, now=NOW, reason="3 jobs pending")


def test_names_are_sequential_per_pool_and_valid_hostnames(store):
    names = [new(store).name, new(store).name, new(store, "infer").name]
    assert names == ["vision-train-1", "vision-train-2", "vision-infer-1"]
    assert store.fleet_view().history["vision/train"].last_scale_up_at == NOW


def test_pools_whose_names_read_alike_never_get_the_same_node_name(store):
    def create(team, pool):
        return store.create_node(team=team, pool=pool, cloud="aws", region="us-east-1", zone=None,
                                 instance_type="p3.2xlarge", market=Market.SPOT, now=NOW, reason="r").name

    # a-b/c and a/b-c both read "a-b-c-<n>": the second pool skips the name already held.
    names = [create("a-b", "c"), create("a", "b-c"), create("a", "b-c"), create("a-b", "c")]
    assert names == ["a-b-c-1", "a-b-c-2", "a-b-c-3", "a-b-c-4"]
    assert {n.name: (n.team, n.pool) for n in store.fleet_view().nodes} == {
        "a-b-c-1": ("a-b", "c"), "a-b-c-2": ("a", "b-c"), "a-b-c-3": ("a", "b-c"),
        "a-b-c-4": ("a-b", "c")}


def test_transitions_are_recorded_with_reasons_and_checked(store):
    node = new(store)
    store.transition(node.name, NodeState.PROVISIONING, NOW, "terraform apply", instance_id="i-1")
    later = NOW + timedelta(minutes=5)
    ready = store.transition(node.name, NodeState.BOOTSTRAPPING, later, "ansible")
    ready = store.transition(node.name, NodeState.READY, later, "joined slurm")
    assert ready.ready_at == later and ready.instance_id == "i-1"
    with pytest.raises(IllegalTransitionError):
        store.transition(node.name, NodeState.TERMINATED, later, "no")
    rows = store.transitions(node.name)
    assert [(r.from_state, r.to_state) for r in rows] == [
        (None, "REQUESTED"), ("REQUESTED", "PROVISIONING"), ("PROVISIONING", "BOOTSTRAPPING"),
        ("BOOTSTRAPPING", "READY")]
    assert rows[1].reason == "terraform apply"
    store.transition(node.name, NodeState.DRAINING, later, "idle", drain_trigger="idle")
    assert store.fleet_view().history["vision/train"].last_scale_down_at == later


def test_two_stores_on_one_database_see_each_other(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    a, b = FleetStore(url), FleetStore(url)
    node = new(a)
    assert b.get(node.name).state is NodeState.REQUESTED
    b.transition(node.name, NodeState.PROVISIONING, NOW, "b applies")
    assert a.get(node.name).state is NodeState.PROVISIONING
    a.close()
    b.close()


def test_concurrent_update_is_detected(store, monkeypatch):
    node = new(store)
    real = store.session

    # Simulate another writer moving the node between our read and our conditional write.
    def racing_session():
        store.session = real
        other = FleetStore(store.url)
        other.transition(node.name, NodeState.PROVISIONING, NOW, "other writer")
        other.close()
        return real()

    monkeypatch.setattr(store, "session", racing_session)
    with pytest.raises((ConcurrentUpdateError, IllegalTransitionError)):
        store.transition(node.name, NodeState.PROVISIONING, NOW, "us")


def test_plans_and_actions_are_stored(store):
    policy = make_policy(min_nodes=1)
    plan = decide({"vision": policy}, store.fleet_view(), snapshot(), NOW)
    plan_id = store.record_plan(plan)
    pid, again = store.last_plan()
    assert pid == plan_id and again == plan
    (row,) = store.actions(plan_id)
    assert row.kind == "launch" and row.status == "planned" and "min_nodes is 1" in row.reason
    store.set_action_status(row.id, "done", NOW)
    assert store.actions(plan_id, status="done")


def test_lease_is_exclusive_until_it_expires(store):
    ttl = timedelta(seconds=15)
    assert store.try_lease("leader", "a", ttl, NOW) == 1
    assert store.try_lease("leader", "b", ttl, NOW + timedelta(seconds=5)) is None
    assert store.try_lease("leader", "a", ttl, NOW + timedelta(seconds=10)) == 1
    assert store.try_lease("leader", "b", ttl, NOW + timedelta(seconds=26)) == 2
    store.release_lease("leader", "b", NOW + timedelta(seconds=27))
    assert store.try_lease("leader", "a", ttl, NOW + timedelta(seconds=28)) == 3


def test_audit_log(store):
    store.audit("policy-error", "vision.yaml:3:1: bad", NOW, pool="vision/train")
    (row,) = store.audit_log()
    assert row.event == "policy-error" and row.pool == "vision/train"
