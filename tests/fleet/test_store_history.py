"""The store as its history grows: terminated node rows are kept (a name is never handed out
twice), so the live-fleet read must not scan them; recorded plans are pruned, except the
newest ones and those with an action the executor may still act on; audit rows are pruned
by age."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event

from autoscaler.fleet import queries
from autoscaler.fleet.store import LIVE_STATES, Fenced, FleetStore, LeaseToken
from autoscaler.model.changes import Adopt
from autoscaler.model.lifecycle import TERMINAL, NodeState
from autoscaler.model.plan import Drain, Hold, Plan
from autoscaler.model.progress import NodeProgress
from tests.builders import NOW, make_node
from tests.fleet.writes import create_node

S = NodeState


@pytest.fixture
def store(tmp_path):
    s = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    yield s
    s.close()


def query_plans(store: FleetStore, read: Any) -> list[list[str]]:
    """SQLite's EXPLAIN QUERY PLAN of each SELECT ``read()`` sends to ``store``."""
    sent: list[tuple[str, Any]] = []

    def before(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            sent.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", before)
    try:
        read()
    finally:
        event.remove(store.engine, "before_cursor_execute", before)
    with store.engine.connect() as conn:
        return [[row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params)]
                for sql, params in sent]


def test_the_live_states_are_every_state_but_the_terminal_ones():
    assert set(LIVE_STATES) == {st.value for st in NodeState} - {st.value for st in TERMINAL}
    assert S.TERMINATED.value not in LIVE_STATES and S.LOST.value in LIVE_STATES


def test_the_live_fleet_is_read_from_the_state_index_not_by_scanning_every_row(store):
    """``state NOT IN (TERMINATED)`` cannot use ix_nodes_state on SQLite: the read scanned
    every row ever stored (109 ms at 1,000 live and 50,000 terminated nodes, 5 reads a tick)."""
    store.apply([Adopt(make_node(f"vision-gpu-{i}", state=state, instance_id=f"i-{i}"), "t")
                 for i, state in enumerate([S.READY, S.LOST, S.DRAINED, S.TERMINATED])], NOW)
    assert [n.name for n in store.nodes()] == ["vision-gpu-0", "vision-gpu-1", "vision-gpu-2"]
    for read in (store.nodes, store.fleet_view, lambda: store.nodes(pool="vision/gpu")):
        [node_read] = [p for p in query_plans(store, read) if any(" nodes" in s for s in p)]
        assert any("USING INDEX ix_nodes_state" in step or "ix_nodes_pool" in step
                   or "ix_nodes_team" in step for step in node_read), node_read
        assert not any(step.startswith("SCAN nodes") for step in node_read), node_read


def test_a_launch_s_nodes_and_a_node_s_replacement_are_selected_in_sql(store):
    nodes = [make_node(f"vision-gpu-{i}", state=S.TERMINATED if i < 8 else S.READY,
                       progress=NodeProgress(action=7 if i in (3, 9) else 100 + i, index=i))
             for i in range(10)]
    store.apply([Adopt(n, "t") for n in nodes], NOW)
    found = store.nodes(pool="vision/gpu", include_terminated=True, action=7)
    assert [(n.name, n.progress.index) for n in found] == [("vision-gpu-3", 3), ("vision-gpu-9", 9)]
    assert store.nodes(pool="infer/gpu", include_terminated=True, action=7) == []
    assert store.nodes(include_terminated=True, replaces="vision-gpu-1") == []
    new = create_node(store, now=NOW, replaces="vision-gpu-9")
    create_node(store, now=NOW, replaces="vision-gpu-90")
    assert [n.name for n in store.nodes(pool="vision/gpu", include_terminated=True,
                                        replaces="vision-gpu-9")] == [new.name]


def plan_at(minutes_ago: float, *drains: str) -> Plan:
    return Plan(decided_at=NOW - timedelta(minutes=minutes_ago), actions=[
        *[Drain(pool="vision/gpu", node=n, trigger="idle", reason="idle") for n in drains],
        Hold(pool="vision/gpu", what="scale-up", reason="cooldown")])


def test_old_plans_with_settled_actions_go_recent_and_open_ones_stay(store):
    week = timedelta(days=7)
    old = [store.record_plan(plan_at(8 * 24 * 60 + i, f"vision-gpu-{i}")) for i in range(6)]
    holds_only = store.record_plan(plan_at(8 * 24 * 60))
    dry = store.record_plan(plan_at(8 * 24 * 60, "vision-gpu-9"), dry_run=True)  # "skipped"
    for i, status in enumerate(["submitted", "failed", "submitted", "planned", "submitting",
                                "submitted"]):
        [row] = store.actions(old[i])
        store.set_action_status(row.id, status, NOW)
    recent = [store.record_plan(plan_at(60 - i, "vision-gpu-1")) for i in range(3)]

    assert store.prune_plans(NOW - week, keep_last=2) == 6
    kept = {a.plan_id for a in store.actions()}
    assert kept == {old[3], old[4], *recent}, "open actions (planned, submitting) stay"
    assert {a.status for a in store.actions() if a.plan_id in (old[3], old[4])} == {
        "planned", "submitting"}
    # The plan bodies went with their actions; a kept plan is whole.
    assert store.last_plan() is not None and store.last_plan()[0] == recent[-1]
    gone = [old[0], old[1], old[2], old[5], holds_only, dry]
    assert [queries.plan_by_id(store, i) for i in gone] == [None] * 6
    assert all(queries.plan_by_id(store, i) for i in (old[3], old[4], *recent))
    assert store.prune_plans(NOW - week, keep_last=2) == 0


def test_the_newest_plans_stay_whatever_their_age_and_a_prune_is_bounded(store):
    ids = [store.record_plan(plan_at(30 * 24 * 60 - i)) for i in range(10)]
    assert store.prune_plans(NOW, keep_last=3, limit=4) == 4  # the oldest four
    assert store.prune_plans(NOW, keep_last=3, limit=4) == 3
    assert store.prune_plans(NOW, keep_last=3, limit=4) == 0
    assert store.last_plan()[0] == ids[-1]
    assert [queries.plan_by_id(store, i) is not None for i in ids] == [False] * 7 + [True] * 3


def test_a_deposed_leader_prunes_nothing(store, tmp_path):
    for i in range(5):
        store.record_plan(plan_at(30 * 24 * 60 - i))
    token: dict[str, LeaseToken | None] = {"now": None}
    fenced = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}", fence=lambda: token["now"])
    token["now"] = LeaseToken("leader", "a", store.try_lease("leader", "a", timedelta(seconds=30)))
    store.release_lease("leader", "a")
    store.try_lease("leader", "b", timedelta(seconds=30))
    with pytest.raises(Fenced):
        fenced.prune_plans(NOW, keep_last=1)
    fenced.close()
    assert store.prune_plans(NOW, keep_last=1) == 4


def test_audit_rows_older_than_the_cut_go_a_bounded_batch_at_a_time(store):
    """The audit table had no retention: rows per interruption, health check, long job."""
    for days in (100, 95, 91, 89, 1):
        store.audit("interruption", f"{days} days ago", NOW - timedelta(days=days))
    assert store.prune_audit(NOW - timedelta(days=90), limit=2) == 2  # the oldest first
    assert [r.detail for r in store.audit_log()] == [
        "91 days ago", "89 days ago", "1 days ago"]
    assert store.prune_audit(NOW - timedelta(days=90), limit=2) == 1
    assert store.prune_audit(NOW - timedelta(days=90), limit=2) == 0
    assert [r.detail for r in store.audit_log()] == ["89 days ago", "1 days ago"]
