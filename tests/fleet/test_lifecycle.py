"""The transition table itself: reachability, terminal states, timeouts; the state sets
defined once; the one rule for a node's limit in its state."""

from __future__ import annotations

import ast
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from autoscaler.model import lifecycle
from autoscaler.model.lifecycle import (
    INITIAL,
    TERMINAL,
    TIMEOUTS,
    TRANSITIONS,
    IllegalTransitionError,
    NodeState,
    StateLimits,
    check_transition,
    state_limit,
)
from autoscaler.policy.models import Pool
from tests.builders import make_policy

S = NodeState
REPO = Path(__file__).resolve().parents[2]
LIFECYCLE = Path(lifecycle.__file__).resolve()
SET_NAMES = frozenset(k for k, v in vars(lifecycle).items() if isinstance(v, frozenset))
_SET_OPS = (ast.BitOr, ast.Sub, ast.BitAnd, ast.BitXor)


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


# -- every state set is defined in lifecycle.py, once ---------------------------------------
def _state_aliases(tree: ast.Module) -> set[str]:
    """Names that stand for NodeState in a module: ``S = NodeState``, ``import ... as S``."""
    names = {"NodeState"}
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            names |= {a.asname for a in stmt.names if a.name == "NodeState" and a.asname}
        elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) \
                and stmt.value.id == "NodeState":
            names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return names


def _is_state_set(value: ast.expr, aliases: set[str]) -> bool:
    """A set, frozenset, tuple or list of states, ``frozenset(S)``, a set operation with one
    of those or with a lifecycle set, or another name for a lifecycle set."""
    if isinstance(value, ast.Name):
        return value.id in SET_NAMES
    if isinstance(value, ast.BinOp) and isinstance(value.op, _SET_OPS):
        return _is_state_set(value.left, aliases) or _is_state_set(value.right, aliases)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
            and value.func.id in ("frozenset", "set", "tuple", "list"):
        return any(_is_state_set(a, aliases) or (isinstance(a, ast.Name) and a.id in aliases)
                   for a in value.args)
    if isinstance(value, ast.Set | ast.Tuple | ast.List):
        return any(isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name)
                   and e.value.id in aliases for e in value.elts)
    return False


def state_sets_defined(source: str) -> list[tuple[int, str]]:
    """(line, name) of every state set a module assigns at module or class level."""
    tree = ast.parse(source)
    aliases = _state_aliases(tree)
    bodies = [tree.body, *(c.body for c in tree.body if isinstance(c, ast.ClassDef))]
    found = []
    for stmt in (s for body in bodies for s in body):
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            continue
        if _is_state_set(value, aliases):
            found += [(stmt.lineno, ast.unparse(t)) for t in targets]
    return found


@pytest.mark.parametrize(("source", "names"), [
    ("S = NodeState\nA = frozenset({S.READY, S.LOST})", ["A"]),
    ("B: frozenset[NodeState] = frozenset({NodeState.READY})", ["B"]),
    ("from x import NodeState as N\nC = {N.READY}\nD = (N.LOST,)", ["C", "D"]),
    ("S = NodeState\nE = frozenset(S) - {S.LOST}", ["E"]),
    ("F = IN_FLIGHT | {NodeState.READY}\nG = FAILED | TERMINAL\nH = GONE", ["F", "G", "H"]),
    ("class K:\n    SEEN = frozenset({NodeState.READY})", ["SEEN"]),
    ("T = frozenset({'idle', 'mixed'})\nU = {NodeState.READY.value: 'ok'}\nS = NodeState", []),
])
def test_the_state_set_finder_sees_every_spelling(source, names):
    assert [name for _, name in state_sets_defined(source)] == names


def test_no_state_set_is_defined_outside_the_lifecycle_module():
    """One definition per set, so a name means the same thing everywhere: a module that
    needs a set imports it from model/lifecycle.py (or a new one is added there)."""
    found = [f"{path.relative_to(REPO)}:{line}: {name}"
             for path in sorted((REPO / "autoscaler").rglob("*.py")) if path.resolve() != LIFECYCLE
             for line, name in state_sets_defined(path.read_text())]
    assert found == [], "state sets belong in autoscaler/model/lifecycle.py:\n" + "\n".join(found)


def test_every_state_set_says_what_it_is_for():
    """A comment right above each set, or above the group of sets it belongs to."""
    source = LIFECYCLE.read_text()
    lines = source.splitlines()
    start_of = {a.end_lineno: a.lineno for a in ast.parse(source).body if isinstance(a, ast.Assign)}
    uncommented = []
    for line, name in state_sets_defined(source):
        above = line - 1
        while above in start_of:  # the assignment above shares the comment
            above = start_of[above] - 1
        if not lines[above - 1].lstrip().startswith("#"):
            uncommented.append(name)
    assert uncommented == []


# -- the one limit rule --------------------------------------------------------------------
LIMITS = StateLimits(
    bootstrap_retries=2, bootstrap_retry_backoff=timedelta(seconds=30),
    ready_wait_timeout=timedelta(minutes=10), drain_timeout=timedelta(minutes=20),
    checkpoint_grace=timedelta(minutes=1), drain_stuck_margin=timedelta(minutes=5),
    interruption_drain_deadline=timedelta(0), interruption_checkpoint_grace=timedelta(seconds=30))


def pool(**kw: object) -> Pool:
    return make_policy(**kw).pools[0]


MIN = timedelta(minutes=1)


@pytest.mark.parametrize(("state", "pool_", "limits", "expected"), [
    # Three runs of the pool's 30m bootstrap, two 30s backoffs, then the 10m ready wait.
    (S.BOOTSTRAPPING, pool(), LIMITS, 30 * MIN * 3 + MIN + 10 * MIN),
    (S.BOOTSTRAPPING, pool(bootstrap={"timeout": "10m"}), LIMITS, 10 * MIN * 3 + MIN + 10 * MIN),
    (S.BOOTSTRAPPING, pool(), replace(LIMITS, bootstrap_retries=0), 30 * MIN + 10 * MIN),
    (S.BOOTSTRAPPING, None, LIMITS, 30 * MIN),  # no policy: the table's
    # The pool's drain timeout and checkpoint grace, then the margin.
    (S.DRAINING, pool(), LIMITS, 30 * MIN + 2 * MIN + 5 * MIN),
    (S.DRAINING, pool(scale_down={"drain_timeout": "1h", "checkpoint_grace": "5m"}), LIMITS,
     60 * MIN + 5 * MIN + 5 * MIN),
    (S.DRAINING, None, LIMITS, 20 * MIN + MIN + 5 * MIN),  # no policy: the service's
    (S.INTERRUPTED, pool(), LIMITS, 2 * MIN),  # the table's 2m beats deadline 0 + grace 30s
    (S.INTERRUPTED, pool(), replace(LIMITS, interruption_drain_deadline=5 * MIN),
     5 * MIN + timedelta(seconds=30)),
    (S.REQUESTED, pool(), LIMITS, 15 * MIN),
    (S.PROVISIONING, pool(bootstrap={"timeout": "1m"}), LIMITS, 20 * MIN),
    (S.TERMINATING, None, LIMITS, 20 * MIN),
    (S.READY, pool(), LIMITS, None),
    (S.DRAINED, pool(), LIMITS, None),
    (S.TERMINATED, pool(), LIMITS, None),
])
def test_state_limit(state, pool_, limits, expected):
    assert state_limit(state, pool_, limits) == expected


def test_every_state_with_a_timeout_has_a_limit_and_no_other_state_has_one():
    for state in NodeState:
        assert (state_limit(state, pool(), LIMITS) is not None) == (state in TIMEOUTS)
