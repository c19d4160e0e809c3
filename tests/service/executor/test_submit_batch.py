"""Drains and terminations of one plan submitted together: a bounded number of statements
whatever their number, each node's own reason in its transition, a node that moved
meanwhile failing only its own action, and a resubmission after a crash moving nothing
twice."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from autoscaler.model.changes import Adopt, Move, NodeChange
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Action, Plan
from autoscaler.model.progress import LaunchSpec, NodeProgress, ProgressUpdate
from autoscaler.policy.models import Market
from tests.builders import make_node
from tests.fleet.statements import counted
from tests.fleet.writes import create_node, patch, transition
from tests.service.executor_rig import Rig, drain, launch, terminate

S = NodeState


def adopted(rig: Rig, first: int, count: int, state: NodeState = S.READY) -> list[str]:
    """``count`` nodes of vision/gpu in ``state``, written as they are (no launch)."""
    nodes = [make_node(f"vision-gpu-{i}", state=state, instance_id=f"i-{i}")
             for i in range(first, first + count)]
    rig.store.apply([Adopt(n, "test fleet") for n in nodes], rig.clock())
    return [n.name for n in nodes]


def recorded(rig: Rig, actions: Sequence[Action]) -> tuple[Plan, int]:
    plan = Plan(decided_at=rig.clock(), actions=list(actions))
    return plan, rig.store.record_plan(plan)


@pytest.mark.parametrize("state, action, to", [(S.READY, drain, S.DRAINING),
                                               (S.DRAINED, terminate, S.TERMINATING)])
def test_many_drains_or_terminations_are_as_few_statements_as_two(rig: Rig, state, action,
                                                                   to) -> None:
    few, many = adopted(rig, 1, 2, state), adopted(rig, 3, 60, state)
    sent = {}
    for size, names in (("few", few), ("many", many)):
        plan, plan_id = recorded(rig, [action(n) for n in names])
        executor = rig.executor()
        with counted(rig.store) as statements:
            executor.submit(plan, plan_id)
        sent[size] = len(statements)
        assert [r.status for r in rig.store.actions(plan_id)] == ["submitted"] * len(names)
    assert sent["many"] <= sent["few"], sent
    for name in few + many:  # every node moved, with its own action's reason
        last = rig.store.transitions(name)[-1]
        assert (last.from_state, last.to_state) == (state.value, to.value)
        assert last.reason == action(name).reason
    if to is S.DRAINING:  # an idle drain restarts the pool's scale-down cooldown
        assert rig.node(many[0]).drain_trigger == "idle"
        assert rig.node(many[0]).progress.drain.reason == drain(many[0]).reason
        assert rig.store.fleet_view().history["vision/gpu"].last_scale_down_at == rig.clock()


def test_a_node_that_moved_meanwhile_fails_its_action_and_the_others_are_drained(
        rig: Rig) -> None:
    names = adopted(rig, 1, 5)
    noticed = names[2]
    real = rig.store.apply

    def spot_notice_first(changes: Sequence[NodeChange], now):  # between read and write
        if len(changes) > 1 and rig.state(noticed) is S.READY:
            real([Move(noticed, S.INTERRUPTED, "spot notice")], now)
        return real(changes, now)

    rig.store.apply = spot_notice_first  # type: ignore[method-assign]
    plan, plan_id = recorded(rig, [drain(n) for n in names])
    rig.executor().submit(plan, plan_id)
    rows = {r.node: r for r in rig.store.actions(plan_id)}
    assert rows[noticed].status == "failed" and "changed state" in rows[noticed].detail
    assert rig.state(noticed) is S.INTERRUPTED
    others = [n for n in names if n != noticed]
    assert [rows[n].status for n in others] == ["submitted"] * 4
    assert [rig.state(n) for n in others] == [S.DRAINING] * 4


def test_wrong_states_fail_their_own_actions_with_the_reason(rig: Rig) -> None:
    ready, drained = adopted(rig, 1, 2), adopted(rig, 3, 1, S.DRAINED)
    gone = adopted(rig, 4, 1, S.TERMINATED)
    plan, plan_id = recorded(rig, [drain(ready[0]), terminate(ready[1]), drain(drained[0]),
                                   terminate(gone[0]), drain("vision-gpu-99")])
    rig.executor().submit(plan, plan_id)
    rows = rig.store.actions(plan_id)
    assert [r.status for r in rows] == ["submitted", "failed", "failed", "submitted", "failed"]
    assert "drain it before terminating" in rows[1].detail
    assert "is DRAINED, not READY" in rows[2].detail and "no node named" in rows[4].detail
    assert [rig.state(n) for n in (*ready, *drained, *gone)] == [
        S.DRAINING, S.READY, S.DRAINED, S.TERMINATED]


def test_a_crash_before_the_outcomes_are_written_moves_nothing_twice(rig: Rig) -> None:
    names = adopted(rig, 1, 4)
    plan, plan_id = recorded(rig, [drain(n) for n in names])
    real = rig.store.set_action_statuses

    def crash_at_the_outcomes(statuses, now):
        if any(status == "submitted" for status, _ in statuses.values()):
            raise RuntimeError("killed")
        real(statuses, now)

    rig.store.set_action_statuses = crash_at_the_outcomes  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="killed"):
        rig.executor().submit(plan, plan_id)
    assert {r.status for r in rig.store.actions(plan_id)} == {"submitting"}
    assert [rig.state(n) for n in names] == [S.DRAINING] * 4
    rig.store.set_action_statuses = real  # type: ignore[method-assign]

    rig.executor().submit(plan, plan_id)  # the restarted service resubmits the plan
    assert {r.status for r in rig.store.actions(plan_id)} == {"submitted"}
    for name in names:
        assert [t.to_state for t in rig.store.transitions(name)] == ["READY", "DRAINING"]


def history(rig: Rig, count: int, **progress: int | None) -> None:
    """``count`` TERMINATED nodes of vision/gpu, each created by a launch long gone (the
    store keeps their rows: a name is never handed out twice)."""
    nodes = [make_node(f"vision-gpu-{i}", state=S.TERMINATED, instance_id=f"i-{i}",
                       progress=NodeProgress(action=900 + i, index=0, **progress))
             for i in range(100, 100 + count)]
    rig.store.apply([Adopt(n, "churned") for n in nodes], rig.clock())


def rows_read(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many nodes each ``store.nodes`` read returns, from now on."""
    sizes: list[int] = []
    real = rig.store.nodes

    def spy(*args, **kwargs):
        found = real(*args, **kwargs)
        sizes.append(len(found))
        return found

    monkeypatch.setattr(rig.store, "nodes", spy)
    return sizes


def test_a_resumed_launch_reads_its_own_nodes_not_the_pool_s_history(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding which slots a crash left done was a read of every node the pool ever had,
    in Python, once per resumed launch (161 ms at 2,550 rows): the read now selects the
    action's own nodes in SQL, terminated ones included."""
    history(rig, 30)
    plan, plan_id = recorded(rig, [launch(3)])
    [row] = rig.store.actions(plan_id)
    rig.store.set_action_status(row.id, "submitting", rig.clock())  # a crash after slot 1
    first = create_node(rig.store, now=rig.clock(), reason="first slot",
                        progress=NodeProgress(action=row.id, index=0))
    transition(rig.store, first.name, S.PROVISION_FAILED, rig.clock(), "no capacity")
    sizes = rows_read(rig, monkeypatch)
    created = rig.executor().submit(plan, plan_id)
    assert len(created) == 2 and first.name not in created  # a failed slot is still done
    assert {rig.node(n).progress.index for n in created} == {1, 2}
    assert sizes == [1], "only the action's own node is read"


def test_a_promised_replacement_is_found_without_reading_the_pool_s_history(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    history(rig, 30)
    [old, other] = [n.name for n in (
        create_node(rig.store, now=rig.clock(), reason="old"),
        create_node(rig.store, now=rig.clock(), reason="other"))]
    promised = LaunchSpec(pool="vision/gpu", instance_type="p3.2xlarge",
                          market=Market.ON_DEMAND, reason="replaces a reclaimed node")
    for name in (old, other):  # both promised a replacement; a crash left only old's made
        patch(rig.store, name, rig.clock(), replacement_requested=True,
              progress=ProgressUpdate(replacement=promised))
    made = create_node(rig.store, now=rig.clock(), reason="made", replaces=old)
    sizes = rows_read(rig, monkeypatch)
    created = rig.executor().repair().created
    assert len(created) == 1 and rig.store.meta(created[0])["replaces"] == other
    assert rig.store.meta(made.name)["replaces"] == old
    assert max(sizes) <= 3, f"a read returned {max(sizes)} nodes: the pool's history"
    assert rig.node(old).progress.replacement is None
