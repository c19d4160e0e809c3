"""The SQLAlchemy store: names, transitions before side effects, plans, leases."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest

from autoscaler.engine import decide
from autoscaler.fleet.store import ConcurrentUpdateError, Fenced, FleetStore, LeaseToken
from autoscaler.model.changes import Adopt, Create, Move, NodeFields, Patch
from autoscaler.model.lifecycle import IllegalTransitionError, NodeState
from autoscaler.model.plan import Drain, Hold, Plan
from autoscaler.model.progress import LaunchSpec, NodeProgress
from autoscaler.policy.models import Market
from tests.builders import NOW, make_policy, snapshot
from tests.fleet.statements import counted
from tests.fleet.writes import create_node, patch, transition


@pytest.fixture
def store(tmp_path):
    s = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    yield s
    s.close()


def new(store, pool="train"):
    return create_node(store, team="vision", pool=pool, zone="us-east-1a", market=Market.SPOT,
                       now=NOW, reason="3 jobs pending", cooldown="up")


def test_names_are_sequential_per_pool_and_valid_hostnames(store):
    names = [new(store).name, new(store).name, new(store, "infer").name]
    assert names == ["vision-train-1", "vision-train-2", "vision-infer-1"]
    assert store.fleet_view().history["vision/train"].last_scale_up_at == NOW


def test_pools_whose_names_read_alike_never_get_the_same_node_name(store):
    def create(team, pool):
        return create_node(store, team=team, pool=pool, market=Market.SPOT, now=NOW, reason="r").name

    # a-b/c and a/b-c both read "a-b-c-<n>": the second pool skips the name already held.
    names = [create("a-b", "c"), create("a", "b-c"), create("a", "b-c"), create("a-b", "c")]
    assert names == ["a-b-c-1", "a-b-c-2", "a-b-c-3", "a-b-c-4"]
    assert {n.name: (n.team, n.pool) for n in store.fleet_view().nodes} == {
        "a-b-c-1": ("a-b", "c"), "a-b-c-2": ("a", "b-c"), "a-b-c-3": ("a", "b-c"),
        "a-b-c-4": ("a-b", "c")}


def launch_of(team, pool, reason="r"):
    spec = LaunchSpec(pool=f"{team}/{pool}", instance_type="p3.2xlarge", market=Market.SPOT,
                      reason=reason, cooldown="up")
    return Create(team, pool, "aws", "us-east-1", spec, NodeProgress())


def test_a_batch_of_creates_is_a_few_statements_whatever_its_size(store):
    """A launch's nodes are one write: the pool's counter locked once, the names checked
    in one query, nodes and transitions inserted together (not a round of statements per
    node)."""
    new(store)  # vision-train-1 exists
    with counted(store) as small:
        store.apply([launch_of("vision", "train") for _ in range(2)], NOW)
    with counted(store) as big:
        made = store.apply([launch_of("vision", "train", f"r{i}") for i in range(120)]
                           + [launch_of("vision", "infer")], NOW)
    assert len(big) <= len(small) + 4  # the second pool: its counter and its names
    assert [n.name for n in made[:3]] == ["vision-train-4", "vision-train-5", "vision-train-6"]
    assert made[-1].name == "vision-infer-1" and made[119].name == "vision-train-123"
    assert [n.reason for n in made[:2]] == ["r0", "r1"]  # in the order given
    assert all(n.state is NodeState.REQUESTED for n in made)
    assert len(store.transitions("vision-train-100")) == 1
    assert store.fleet_view().history["vision/train"].last_scale_up_at == NOW
    assert new(store).name == "vision-train-124"


def test_one_batch_never_gives_two_pools_whose_names_read_alike_the_same_name(store):
    create_node(store, team="a", pool="b-c", market=Market.SPOT, now=NOW)  # a-b-c-1 held
    made = store.apply([launch_of("a-b", "c"), launch_of("a", "b-c"), launch_of("a-b", "c")],
                       NOW)
    # Counters are locked in pool order (a/b-c first: no two writers deadlock on them).
    assert [n.name for n in made] == ["a-b-c-3", "a-b-c-2", "a-b-c-4"]
    assert [(n.team, n.pool) for n in made] == [("a-b", "c"), ("a", "b-c"), ("a-b", "c")]


def test_transitions_are_recorded_with_reasons_and_checked(store):
    node = new(store)
    transition(store, node.name, NodeState.PROVISIONING, NOW, "terraform apply", instance_id="i-1")
    later = NOW + timedelta(minutes=5)
    ready = transition(store, node.name, NodeState.BOOTSTRAPPING, later, "ansible")
    ready = transition(store, node.name, NodeState.READY, later, "joined slurm")
    assert ready.ready_at == later and ready.instance_id == "i-1"
    with pytest.raises(IllegalTransitionError):
        transition(store, node.name, NodeState.TERMINATED, later, "no")
    rows = store.transitions(node.name)
    assert [(r.from_state, r.to_state) for r in rows] == [
        (None, "REQUESTED"), ("REQUESTED", "PROVISIONING"), ("PROVISIONING", "BOOTSTRAPPING"),
        ("BOOTSTRAPPING", "READY")]
    assert rows[1].reason == "terraform apply"
    transition(store, node.name, NodeState.DRAINING, later, "idle", drain_trigger="idle",
               cooldown="down")
    assert store.fleet_view().history["vision/train"].last_scale_down_at == later


def test_two_stores_on_one_database_see_each_other(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    a, b = FleetStore(url), FleetStore(url)
    node = new(a)
    assert b.get(node.name).state is NodeState.REQUESTED
    transition(b, node.name, NodeState.PROVISIONING, NOW, "b applies")
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
        transition(other, node.name, NodeState.PROVISIONING, NOW, "other writer")
        other.close()
        return real()

    monkeypatch.setattr(store, "session", racing_session)
    with pytest.raises((ConcurrentUpdateError, IllegalTransitionError)):
        transition(store, node.name, NodeState.PROVISIONING, NOW, "us")


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


def test_a_plans_actions_are_recorded_in_one_statement_in_order(store):
    """Drains and terminations come one action per node: a statement each grew with the
    fleet's churn (benchmarks/bench_surfaces.py)."""
    for size in (2, 30):
        plan = Plan(decided_at=NOW, actions=[
            Drain(pool="vision/gpu", node=f"vision-gpu-{i}", trigger="idle", reason=f"idle {i}")
            for i in range(size)] + [Hold(pool="vision/gpu", what="scale-up", reason="cooldown")])
        with counted(store) as sent:
            plan_id = store.record_plan(plan)
        assert len([s for s in sent if s.lstrip().upper().startswith("INSERT")]) == 2
        rows = store.actions(plan_id)
        assert [r.node for r in rows] == [f"vision-gpu-{i}" for i in range(size)]
        assert rows == sorted(rows, key=lambda r: r.id)
        assert {r.status for r in rows} == {"planned"} and rows[0].body["trigger"] == "idle"


def test_lease_is_exclusive_until_it_expires_on_the_database_clock(store):
    ttl = timedelta(seconds=0.4)
    assert store.try_lease("leader", "a", ttl) == 1
    assert store.try_lease("leader", "b", ttl) is None
    assert store.try_lease("leader", "a", ttl) == 1, "a renewal keeps the epoch"
    time.sleep(0.5)  # no caller's clock is involved: the database's says it ran out
    assert store.try_lease("leader", "b", ttl) == 2
    store.release_lease("leader", "b")
    assert store.try_lease("leader", "a", ttl) == 3
    time.sleep(0.5)
    assert store.try_lease("leader", "a", ttl) == 4, "the same holder after expiry: a new term"


def fenced_store(tmp_path, holder="a"):
    """A second store on the same file, fenced by ``holder``'s current lease."""
    token: dict[str, LeaseToken | None] = {"now": None}
    other = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}", fence=lambda: token["now"])
    return other, token


def contents(store):
    return (store.nodes(include_terminated=True), store.last_plan(),
            [(r.id, r.event) for r in store.audit_log()],
            [(r.id, r.status) for r in store.actions()])


WRITES = {
    "apply(Create)": lambda st, _: new(st),
    "apply(Move)": lambda st, n: transition(st, n, NodeState.PROVISIONING, NOW, "apply"),
    "apply(Patch)": lambda st, n: patch(st, n, NOW, address="10.0.0.9"),
    "apply(Adopt)": lambda st, n: st.apply([Adopt(dataclasses.replace(st.get(n), name="x-y-1"),
                                                  "adopted")], NOW),
    "record_plan": lambda st, _: st.record_plan(decide({}, st.fleet_view(), snapshot(), NOW)),
    "set_action_status": lambda st, _: st.set_action_status(1, "done", NOW),
    "audit": lambda st, _: st.audit("x", "y", NOW),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_every_write_of_a_deposed_leader_is_refused(store, tmp_path, write):
    node = new(store).name
    ttl = timedelta(seconds=30)
    fenced, token = fenced_store(tmp_path)
    with pytest.raises(Fenced, match="does not hold"):
        WRITES[write](fenced, node)  # never led
    token["now"] = LeaseToken("leader", "a", store.try_lease("leader", "a", ttl))
    WRITES[write](fenced, node)  # the leader writes
    store.release_lease("leader", "a")
    assert store.try_lease("leader", "b", ttl) == 2
    before = contents(store)
    with pytest.raises(Fenced, match=r"held by b \(epoch 2\); a \(epoch 1\) was deposed"):
        WRITES[write](fenced, node)
    with pytest.raises(Fenced):
        fenced.fence()  # and no side effect may start
    assert contents(store) == before
    fenced.close()


def test_a_fenced_write_is_refused_once_the_lease_expired_even_if_nobody_took_it(store, tmp_path):
    fenced, token = fenced_store(tmp_path)
    token["now"] = LeaseToken("leader", "a", store.try_lease("leader", "a", timedelta(seconds=0.3)))
    fenced.fence()
    time.sleep(0.4)
    with pytest.raises(Fenced, match="expired"):
        new(fenced)
    assert store.nodes() == []
    fenced.close()


def test_an_unfenced_store_writes_and_acts_freely(store):
    store.fence()  # single instance: no lease, nothing to check
    assert new(store).name == "vision-train-1"


def test_audit_log(store):
    store.audit("policy-error", "vision.yaml:3:1: bad", NOW, pool="vision/train")
    (row,) = store.audit_log()
    assert row.event == "policy-error" and row.pool == "vision/train"


def test_a_batch_of_moves_is_a_few_statements_whatever_its_size(store):
    """Moves of distinct nodes are one compare-and-set UPDATE, their transitions one
    INSERT, the rows read back in one query (a drain of 100 nodes is not 400 statements)."""
    made = store.apply([launch_of("vision", "train") for _ in range(122)], NOW)
    names = [n.name for n in made]

    def moves(part):
        return [Move(n, NodeState.TERMINATING, f"cancelled {n}") for n in part]

    with counted(store) as small:
        store.apply(moves(names[:2]), NOW)
    with counted(store) as big:
        moved = store.apply(moves(names[2:]), NOW)
    assert len(big) <= len(small)
    assert [n.name for n in moved] == names[2:]  # in the order given
    assert {n.state for n in moved} == {NodeState.TERMINATING}
    assert store.transitions(names[50])[-1].reason == f"cancelled {names[50]}"


def test_moves_and_patches_of_one_node_in_one_batch_apply_in_order(store):
    name = new(store).name
    out = store.apply([Move(name, NodeState.PROVISIONING, "apply"),
                       Patch(name, NodeFields(instance_id="i-9")),
                       Move(name, NodeState.BOOTSTRAPPING, "created", NodeFields(address="10.0.0.9"))],
                      NOW)
    assert [n.state for n in out] == [NodeState.PROVISIONING, NodeState.PROVISIONING,
                                      NodeState.BOOTSTRAPPING]
    assert out[-1].instance_id == "i-9" and out[-1].address == "10.0.0.9"
    assert [t.to_state for t in store.transitions(name)] == ["REQUESTED", "PROVISIONING",
                                                             "BOOTSTRAPPING"]
    with pytest.raises(IllegalTransitionError):  # all or none: the first move is undone too
        store.apply([Move(name, NodeState.READY, "joined"), Move(name, NodeState.READY, "again")],
                    NOW)
    assert store.get(name).state is NodeState.BOOTSTRAPPING
