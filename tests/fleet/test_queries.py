"""The store's typed reads (fleet/queries.py) on SQLite: each answers its question with
frozen records, never ORM rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from autoscaler.engine import decide
from autoscaler.fleet import queries
from autoscaler.fleet import store as store_module
from autoscaler.fleet.store import FleetStore
from autoscaler.fleet.tables import NodeRow
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.progress import NodeProgress
from autoscaler.policy.models import Market
from tests.builders import NOW, make_policy, snapshot
from tests.fleet.statements import counted
from tests.fleet.writes import create_node, transition

S = NodeState
MINUTE = timedelta(minutes=1)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FleetStore]:
    s = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    yield s
    s.close()


def new(store: FleetStore, pool: str = "gpu", *, at=NOW, policy: str | None = None,
        zone: str | None = "us-east-1a") -> str:
    return create_node(store, pool=pool, zone=zone, market=Market.SPOT, now=at, cooldown="up",
                       reason="3 jobs pending", progress=NodeProgress(policy=policy)).name


def walk(store: FleetStore, name: str, *steps: tuple[NodeState, timedelta], reason: str = "step") -> None:
    for state, after in steps:
        transition(store, name, state, NOW + after, reason)


def test_next_sequence_number_per_pool(store: FleetStore) -> None:
    assert queries.next_seq_by_pool(store) == {}
    new(store), new(store), new(store, "infer")
    assert queries.next_seq_by_pool(store) == {"vision/gpu": 3, "vision/infer": 2}


def test_transitions_after_an_id_the_newest_id_and_the_recent_ones(store: FleetStore) -> None:
    assert queries.last_transition_id(store) == 0 and queries.transitions_after(store, 0) == []
    name = new(store)
    first = queries.last_transition_id(store)
    walk(store, name, (S.PROVISIONING, MINUTE), (S.BOOTSTRAPPING, 2 * MINUTE))
    later = queries.transitions_after(store, first)
    assert [(t.from_state, t.to_state, t.at) for t in later] == [
        (S.REQUESTED, S.PROVISIONING, NOW + MINUTE), (S.PROVISIONING, S.BOOTSTRAPPING, NOW + 2 * MINUTE)]
    assert queries.last_transition_id(store) == later[-1].id
    created = queries.transitions_after(store, 0)[0]
    assert created.from_state is None and created.reason == "3 jobs pending"
    assert queries.recent_transitions(store, 2) == later  # the newest, oldest first
    with pytest.raises(dataclasses.FrozenInstanceError):
        created.reason = "x"  # type: ignore[misc]


def test_when_nodes_entered_a_state_before_a_transition(store: FleetStore) -> None:
    name, other = new(store), new(store)
    walk(store, name, (S.PROVISIONING, MINUTE), (S.BOOTSTRAPPING, 2 * MINUTE), (S.READY, 3 * MINUTE),
         (S.DRAINING, 10 * MINUTE), (S.READY, 11 * MINUTE), (S.DRAINING, 20 * MINUTE),
         (S.DRAINED, 22 * MINUTE))
    drained = queries.transitions_after(store, 0)[-1]
    found = queries.entries(store, [name, other, "nobody"], S.DRAINING, before_id=drained.id)
    assert [at for _, at in found[name]] == [NOW + 10 * MINUTE, NOW + 20 * MINUTE]
    assert set(found) == {name}  # a node that never drained, or unknown, has no entry
    second = found[name][1][0]
    assert [at for _, at in queries.entries(store, [name], S.DRAINING, before_id=second)[name]] == [
        NOW + 10 * MINUTE]


def test_entries_and_nodes_by_name_take_one_query_per_part_of_names(
        store: FleetStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tick's many nodes are read in one query (one per NAMES_PER_QUERY of them), in name
    order, whatever their state; names the store does not hold are left out."""
    names = [new(store) for _ in range(5)]
    walk(store, names[0], (S.PROVISIONING, MINUTE), (S.PROVISION_FAILED, MINUTE),
         (S.TERMINATING, MINUTE), (S.TERMINATED, MINUTE))
    for size in (500, 2):
        monkeypatch.setattr(store_module, "NAMES_PER_QUERY", size)
        monkeypatch.setattr(queries, "NAMES_PER_QUERY", size)
        with counted(store) as sent:
            found = store.nodes(names=[*reversed(names), "nobody"], include_terminated=True)
            starts = queries.entries(store, names, S.REQUESTED, before_id=10**6)
        assert [n.name for n in found] == sorted(names)
        assert set(starts) == set(names)
        assert len(sent) == (2 if size == 500 else 3 + 3)
    assert [n.name for n in store.nodes(names=names)] == sorted(names[1:])  # live ones only
    assert store.nodes(names=[]) == []


def test_the_latest_plan_with_its_id_and_dry_run_flag(store: FleetStore) -> None:
    assert queries.latest_plan(store) is None
    policy = make_policy(min_nodes=1)
    plan = decide({"vision": policy}, store.fleet_view(), snapshot(), NOW)
    store.record_plan(plan)
    dry = store.record_plan(plan, dry_run=True)
    latest = queries.latest_plan(store)
    assert latest is not None and (latest.id, latest.dry_run, latest.plan) == (dry, True, plan)


def test_a_plan_by_its_id_and_none_for_one_not_kept(store: FleetStore) -> None:
    plan = decide({"vision": make_policy(min_nodes=1)}, store.fleet_view(), snapshot(), NOW)
    first = store.record_plan(plan)
    store.record_plan(plan.model_copy(update={"actions": []}), dry_run=True)
    found = queries.plan_by_id(store, first)
    assert found is not None and (found.id, found.dry_run, found.plan) == (first, False, plan)
    assert queries.plan_by_id(store, first + 99) is None


def test_launch_outcomes_since_a_time_with_where_and_under_which_policy(store: FleetStore) -> None:
    old = new(store, policy="p-old")
    walk(store, old, (S.PROVISIONING, MINUTE), (S.PROVISION_FAILED, 2 * MINUTE), reason="quota")
    ready = new(store, policy="p1", zone=None)
    walk(store, ready, (S.PROVISIONING, 5 * MINUTE), (S.BOOTSTRAPPING, 6 * MINUTE),
         (S.READY, 7 * MINUTE), (S.DRAINING, 8 * MINUTE))
    failed = new(store)
    walk(store, failed, (S.PROVISIONING, 5 * MINUTE), (S.BOOTSTRAPPING, 6 * MINUTE),
         (S.BOOTSTRAP_FAILED, 9 * MINUTE), reason="failed at task 'x'")
    with store.session() as s:  # as another version might have written it: not a fingerprint
        row = s.get(NodeRow, failed)
        row.meta = {**row.meta, "policy": 7}  # type: ignore[union-attr]
    found = queries.launch_outcomes(store, since=NOW + 3 * MINUTE)
    assert [(o.state, o.at, o.policy, o.zone) for o in found] == [
        (S.READY, NOW + 7 * MINUTE, "p1", None), (S.BOOTSTRAP_FAILED, NOW + 9 * MINUTE, None, "us-east-1a")]
    assert (found[1].team, found[1].pool, found[1].cloud, found[1].region, found[1].instance_type,
            found[1].market, found[1].reason) == ("vision", "gpu", "aws", "us-east-1", "p3.2xlarge",
                                                  Market.SPOT, "failed at task 'x'")
    assert [o.state for o in queries.launch_outcomes(store, since=NOW)] == [
        S.PROVISION_FAILED, S.READY, S.BOOTSTRAP_FAILED]


def test_launch_outcomes_come_in_the_order_they_were_written(store: FleetStore) -> None:
    """After a backward step of the wall clock a later move is stamped earlier: the order
    is the writes', so the back-off sees a READY after the failure it follows."""
    failed = new(store)
    walk(store, failed, (S.PROVISIONING, 60 * MINUTE), (S.PROVISION_FAILED, 61 * MINUTE))
    ready = new(store)  # written after the clock stepped back an hour
    walk(store, ready, (S.PROVISIONING, MINUTE), (S.BOOTSTRAPPING, 2 * MINUTE), (S.READY, 3 * MINUTE))
    assert [(o.state, o.at) for o in queries.launch_outcomes(store, since=NOW)] == [
        (S.PROVISION_FAILED, NOW + 61 * MINUTE), (S.READY, NOW + 3 * MINUTE)]


def test_boot_times_of_a_pools_newest_ready_nodes(store: FleetStore) -> None:
    for i, boot in enumerate((4, 6, 9)):
        name = new(store, at=NOW + i * MINUTE)
        walk(store, name, (S.PROVISIONING, i * MINUTE), (S.BOOTSTRAPPING, i * MINUTE),
             (S.READY, (i + boot) * MINUTE))
    walk(store, new(store, at=NOW + 5 * MINUTE), (S.PROVISIONING, 5 * MINUTE))  # not ready yet
    walk(store, new(store, "infer"), (S.PROVISIONING, MINUTE), (S.BOOTSTRAPPING, MINUTE),
         (S.READY, 2 * MINUTE))
    boots = queries.recent_boots(store, "vision/gpu", limit=2)
    assert [b.seconds for b in boots] == [540.0, 360.0]  # newest launch first
    assert boots[0].created_at == NOW + 2 * MINUTE
    assert [b.seconds for b in queries.recent_boots(store, "vision/infer", limit=20)] == [120.0]
    assert queries.recent_boots(store, "vision/none", limit=20) == []
