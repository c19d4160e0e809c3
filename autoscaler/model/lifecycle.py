"""The node lifecycle: one enum, one transition table, one timeout table.

Every state change in the product goes through :func:`check_transition`; nothing else
decides which moves are legal. Timeouts are data too, so the reconciler reads them from
here instead of keeping timers of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum


class NodeState(StrEnum):
    REQUESTED = "REQUESTED"
    PROVISIONING = "PROVISIONING"
    BOOTSTRAPPING = "BOOTSTRAPPING"
    READY = "READY"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    PROVISION_FAILED = "PROVISION_FAILED"
    BOOTSTRAP_FAILED = "BOOTSTRAP_FAILED"
    INTERRUPTED = "INTERRUPTED"
    LOST = "LOST"


S = NodeState

TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    # REQUESTED -> TERMINATING: cancelled before or during its first apply; the apply that
    # removes it from the pool's map cleans up anything half-created.
    S.REQUESTED: frozenset({S.PROVISIONING, S.PROVISION_FAILED, S.TERMINATING, S.LOST}),
    S.PROVISIONING: frozenset({S.BOOTSTRAPPING, S.PROVISION_FAILED, S.TERMINATING, S.LOST}),
    S.BOOTSTRAPPING: frozenset({S.READY, S.BOOTSTRAP_FAILED, S.INTERRUPTED, S.TERMINATING, S.LOST}),
    S.READY: frozenset({S.DRAINING, S.INTERRUPTED, S.LOST}),
    S.DRAINING: frozenset({S.DRAINED, S.READY, S.INTERRUPTED, S.LOST}),
    S.DRAINED: frozenset({S.TERMINATING, S.READY, S.INTERRUPTED, S.LOST}),
    S.TERMINATING: frozenset({S.TERMINATED, S.LOST}),
    S.PROVISION_FAILED: frozenset({S.TERMINATING, S.LOST}),
    S.BOOTSTRAP_FAILED: frozenset({S.BOOTSTRAPPING, S.TERMINATING, S.LOST}),
    S.INTERRUPTED: frozenset({S.TERMINATING, S.LOST}),
    S.LOST: frozenset({S.TERMINATED}),
    S.TERMINATED: frozenset(),
}

INITIAL = S.REQUESTED
TERMINAL = frozenset({S.TERMINATED})
# States whose node may be doing (or about to do) useful work for the pool.
IN_FLIGHT = frozenset({S.REQUESTED, S.PROVISIONING, S.BOOTSTRAPPING})
SERVING = frozenset({S.READY})
LEAVING = frozenset({S.DRAINING, S.DRAINED, S.TERMINATING, S.INTERRUPTED, S.LOST})
FAILED = frozenset({S.PROVISION_FAILED, S.BOOTSTRAP_FAILED})
# States in which the cloud may hold (and bill) an instance for the node.
BILLABLE = frozenset(TRANSITIONS) - {S.TERMINATED, S.LOST}


class IllegalTransitionError(Exception):
    def __init__(self, node: str, current: NodeState, target: NodeState):
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none (terminal state)"
        super().__init__(
            f"node {node}: {current} -> {target} is not a legal transition (from {current}: {allowed})"
        )
        self.node, self.current, self.target = node, current, target


def check_transition(node: str, current: NodeState, target: NodeState) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalTransitionError(node, current, target)


@dataclass(frozen=True)
class Timeout:
    """A node that stays in ``state`` longer than the limit moves to ``then``.

    ``policy_field`` names a pool setting that overrides ``after`` (dotted path).
    """

    state: NodeState
    after: timedelta
    then: NodeState
    why: str
    policy_field: str | None = None


TIMEOUTS: dict[NodeState, Timeout] = {
    t.state: t
    for t in (
        Timeout(S.REQUESTED, timedelta(minutes=15), S.PROVISION_FAILED,
                "terraform apply did not start"),
        Timeout(S.PROVISIONING, timedelta(minutes=20), S.PROVISION_FAILED,
                "instance did not come up"),
        Timeout(S.BOOTSTRAPPING, timedelta(minutes=30), S.BOOTSTRAP_FAILED,
                "bootstrap did not finish", "bootstrap.timeout"),
        # The reconciler adds scale_down.checkpoint_grace (and a margin) to this, so the
        # checkpoint signal the drainer sends at drain_timeout gets its grace period.
        Timeout(S.DRAINING, timedelta(minutes=30), S.DRAINED,
                "jobs were signalled to checkpoint and requeued at the drain timeout",
                "scale_down.drain_timeout"),
        Timeout(S.INTERRUPTED, timedelta(minutes=2), S.TERMINATING,
                "spot interruption deadline reached"),
        Timeout(S.TERMINATING, timedelta(minutes=20), S.LOST,
                "destroy did not confirm; the reconciler checks the cloud"),
    )
}
