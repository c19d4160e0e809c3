"""The transition table itself: reachability, terminal states, timeouts."""

from __future__ import annotations

import pytest

from autoscaler.model.lifecycle import (
    INITIAL,
    TERMINAL,
    TIMEOUTS,
    TRANSITIONS,
    IllegalTransitionError,
    NodeState,
    check_transition,
)


def test_every_state_is_reachable_from_the_initial_state():
    seen, todo = {INITIAL}, [INITIAL]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(NodeState)


def test_terminal_states_have_no_exits_and_everything_else_can_end():
    for state in TERMINAL:
        assert TRANSITIONS[state] == frozenset()
    for state in set(NodeState) - TERMINAL:
        assert NodeState.LOST in TRANSITIONS[state] or state is NodeState.LOST
        seen, todo = {state}, [state]
        while todo:
            for nxt in TRANSITIONS[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert NodeState.TERMINATED in seen


@pytest.mark.parametrize(("a", "b"), [(NodeState.READY, NodeState.TERMINATED), (NodeState.TERMINATED, NodeState.READY),
                                      (NodeState.REQUESTED, NodeState.READY)])
def test_illegal_transitions_raise_a_clear_error(a, b):
    with pytest.raises(IllegalTransitionError, match=f"{a} -> {b} is not a legal transition"):
        check_transition("n1", a, b)


def test_timeouts_move_along_legal_edges():
    for timeout in TIMEOUTS.values():
        assert timeout.then in TRANSITIONS[timeout.state]
        assert timeout.after.total_seconds() > 0
