"""The node lifecycle: one enum, one transition table, the named state sets, one timeout
table and the one rule for a node's limit in its state.

Every state change in the product goes through :func:`check_transition`; nothing else
decides which moves are legal. Every named set of states is defined here, once, so a name
means the same thing in every module (tests/fleet/test_lifecycle.py fails on a set defined
anywhere else). Timeouts are data too: the reconciler acts on :func:`state_limit` and the
``state_timeout_ratio`` metric divides by it, so an alert on that ratio means what the
reconciler does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from autoscaler.policy.models import Pool


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
    # The warm pool (policy warm_pool): a bootstrapped node whose instance is being
    # stopped, stopped (only its volume billed), and being started for a launch.
    STOPPING = "STOPPING"
    WARM = "WARM"
    STARTING = "STARTING"


S = NodeState

TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    # REQUESTED -> TERMINATING: cancelled before or during its first apply; the apply that
    # removes it from the pool's map cleans up anything half-created.
    S.REQUESTED: frozenset({S.PROVISIONING, S.PROVISION_FAILED, S.TERMINATING, S.LOST}),
    S.PROVISIONING: frozenset({S.BOOTSTRAPPING, S.PROVISION_FAILED, S.TERMINATING, S.LOST}),
    # BOOTSTRAPPING -> STOPPING: a warm-pool node ran all but the start part; it is stopped,
    # not joined.
    S.BOOTSTRAPPING: frozenset({S.READY, S.BOOTSTRAP_FAILED, S.INTERRUPTED, S.TERMINATING, S.LOST,
                                S.STOPPING}),
    S.READY: frozenset({S.DRAINING, S.INTERRUPTED, S.LOST}),
    S.DRAINING: frozenset({S.DRAINED, S.READY, S.INTERRUPTED, S.LOST}),
    S.DRAINED: frozenset({S.TERMINATING, S.READY, S.INTERRUPTED, S.LOST}),
    S.TERMINATING: frozenset({S.TERMINATED, S.LOST}),
    S.PROVISION_FAILED: frozenset({S.TERMINATING, S.LOST}),
    S.BOOTSTRAP_FAILED: frozenset({S.BOOTSTRAPPING, S.TERMINATING, S.LOST}),
    S.INTERRUPTED: frozenset({S.TERMINATING, S.LOST}),
    S.LOST: frozenset({S.TERMINATED}),
    S.STOPPING: frozenset({S.WARM, S.PROVISION_FAILED, S.TERMINATING, S.LOST}),
    S.WARM: frozenset({S.STARTING, S.TERMINATING, S.LOST}),
    # STARTING -> WARM: the start was refused (no capacity); the instance stays stopped.
    S.STARTING: frozenset({S.BOOTSTRAPPING, S.WARM, S.PROVISION_FAILED, S.TERMINATING, S.LOST}),
    S.TERMINATED: frozenset(),
}

INITIAL = S.REQUESTED

# -- the named state sets: one meaning per name ---------------------------------------------
# No exits: the node's history is complete.
TERMINAL = frozenset({S.TERMINATED})
# Launched and on its way to serving: the engine counts these toward the pool's size. (A
# warm-pool node on its way to being stopped is not: the service hands decide() the fleet
# without the warm pool, service/control/warm.py.)
IN_FLIGHT = frozenset({S.REQUESTED, S.PROVISIONING, S.BOOTSTRAPPING, S.STARTING})
# The warm pool's own states: stopping, stopped. Never capacity.
WARM_POOL = frozenset({S.STOPPING, S.WARM})
# Takes jobs.
SERVING = frozenset({S.READY})
# Serving or on its way: what the simulator's baseline strategies count as a pool's nodes.
ACTIVE = IN_FLIGHT | SERVING
# On its way out of the pool, by choice (drain, terminate) or not (interrupted, lost): a
# capacity request does not count on it.
LEAVING = frozenset({S.DRAINING, S.DRAINED, S.TERMINATING, S.INTERRUPTED, S.LOST})
# The launch or the bootstrap failed; the engine terminates the node.
FAILED = frozenset({S.PROVISION_FAILED, S.BOOTSTRAP_FAILED})
# How a launch ended, for the launch back-off: it served, or it failed.
LAUNCH_OUTCOMES = frozenset({S.READY}) | FAILED
# Will not serve again: failed, interrupted, lost or terminated. A capacity request counts
# its node in one of these as failed (DRAINING and TERMINATING are its own rollback).
FAILED_OR_ENDED = FAILED | TERMINAL | {S.LOST, S.INTERRUPTED}
# Out of service without anything left to wait for: drained, or failed. A pool whose policy
# was removed has these terminated at once.
OUT_OF_SERVICE = FAILED | {S.DRAINED}
# The cloud may hold (and bill) an instance for the node.
BILLABLE = frozenset(TRANSITIONS) - {S.TERMINATED, S.LOST}
# What the simulator bills: its launches fail only for lack of capacity, so its
# PROVISION_FAILED nodes never had an instance.
SIM_BILLABLE = BILLABLE - {S.PROVISION_FAILED}
# The node's instance should exist: its key is in the pool's Terraform map. PROVISION_FAILED
# is left out on purpose: dropping it from the map destroys whatever half-created instance it
# left behind.
INSTANCE_STATES = frozenset({
    S.REQUESTED, S.PROVISIONING, S.BOOTSTRAPPING, S.READY, S.DRAINING, S.DRAINED,
    S.INTERRUPTED, S.BOOTSTRAP_FAILED, S.STOPPING, S.WARM, S.STARTING,
})
# The apply that creates the instance has not settled: an instance may exist that the store
# has no id for yet (the reconciler does not call a tagged instance of these unknown).
INSTANCE_PENDING = frozenset({S.REQUESTED, S.PROVISIONING})
# Its key has left the pool's map: the next apply destroys (or forgets) its instance, then
# the node is TERMINATED.
REMOVING = frozenset({S.TERMINATING, S.LOST})
# The instance is to be stopped or started by the next apply (aws_ec2_instance_state).
POWER_PENDING = frozenset({S.STOPPING, S.STARTING})
# The pool needs an apply for these: their instance is still to be created, removed,
# stopped or started.
WAITING = INSTANCE_PENDING | REMOVING | POWER_PENDING
# Terminating, lost or terminated: a Terminate of it is a no-op, and the reconciler no
# longer looks for its instance in the cloud.
GONE = REMOVING | TERMINAL
# An instance of these that goes missing from the cloud is explained (it is going, or a spot
# notice said it would), so it does not count against the cloud's answer.
EXPLAINED = GONE | {S.INTERRUPTED}
# The cloud created the instance and has not taken it back: spot capacity existed when it
# launched (engine/return_to_spot.py).
GRANTED = frozenset({S.BOOTSTRAPPING, S.READY, S.DRAINING, S.DRAINED, S.BOOTSTRAP_FAILED})
# An instance the cloud lists as stopped belongs to one of these (the reconciler does not
# call a stopped instance of any other node healthy).
STOPPED_OK = frozenset({S.STOPPING, S.WARM, S.STARTING})
# What each action of a plan may start from (fleet/intents.py refuses the rest).
DRAINABLE = SERVING
CANCELLABLE = frozenset({S.DRAINING, S.DRAINED})
REPLACEABLE = frozenset({S.READY, S.DRAINING, S.DRAINED, S.INTERRUPTED})
TERMINABLE = IN_FLIGHT | FAILED | WARM_POOL | {S.DRAINED, S.INTERRUPTED}
# A warm node a launch may start.
STARTABLE = frozenset({S.WARM})
# Nodes that run the DCGM exporter and are read every tick (bootstrapped, not yet gone).
METERED = frozenset({S.READY, S.DRAINING, S.DRAINED})
# The simulator reports metrics and scheduler state for these (a bootstrapping node has not
# joined the scheduler yet).
REPORTING = frozenset({S.READY, S.DRAINING, S.DRAINED, S.INTERRUPTED})
# A spot notice interrupts a node in these (it has an instance doing, or about to do, work).
INTERRUPTIBLE = frozenset({S.READY, S.DRAINING, S.DRAINED, S.BOOTSTRAPPING})
# A spot notice changes nothing for these: already interrupted, leaving or failed.
SETTLED = FAILED | GONE | {S.INTERRUPTED}


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
    """A node that stays in ``state`` longer than its limit moves to ``then``.

    ``after`` is the limit unless :func:`state_limit` stretches it (see there).
    """

    state: NodeState
    after: timedelta
    then: NodeState
    why: str


TIMEOUTS: dict[NodeState, Timeout] = {
    t.state: t
    for t in (
        Timeout(S.REQUESTED, timedelta(minutes=15), S.PROVISION_FAILED,
                "terraform apply did not start"),
        Timeout(S.PROVISIONING, timedelta(minutes=20), S.PROVISION_FAILED,
                "instance did not come up"),
        Timeout(S.BOOTSTRAPPING, timedelta(minutes=30), S.BOOTSTRAP_FAILED,
                "bootstrap did not finish"),
        # state_limit never uses this ``after``: a drain's limit is always a pool's (or the
        # service's) drain timeout plus grace and margin.
        Timeout(S.DRAINING, timedelta(minutes=30), S.DRAINED,
                "forced only once its jobs were signalled (or its scheduler lists it empty); "
                "otherwise kept DRAINING and reported drain-stuck"),
        Timeout(S.INTERRUPTED, timedelta(minutes=2), S.TERMINATING,
                "spot interruption deadline reached"),
        Timeout(S.TERMINATING, timedelta(minutes=20), S.LOST,
                "destroy did not confirm; the reconciler checks the cloud"),
        Timeout(S.STOPPING, timedelta(minutes=20), S.PROVISION_FAILED,
                "the instance did not stop"),
        Timeout(S.STARTING, timedelta(minutes=20), S.PROVISION_FAILED,
                "the instance did not start"),
    )
}


@dataclass(frozen=True)
class StateLimits:
    """The service's settings that stretch the timeout table (``ExecutorSettings.state_limits``
    builds it): the executor itself retries and waits this long, so a limit shorter than
    that would fail nodes the executor is still working on."""

    bootstrap_retries: int  # Ansible runs after the first that fails
    bootstrap_retry_backoff: timedelta
    ready_wait_timeout: timedelta  # after a bootstrap went through, for the scheduler to see it
    drain_timeout: timedelta  # for a node whose pool has no policy any more
    checkpoint_grace: timedelta  # likewise
    drain_stuck_margin: timedelta  # past drain timeout + grace before a drain counts as stuck
    interruption_drain_deadline: timedelta
    interruption_checkpoint_grace: timedelta


def state_limit(state: NodeState, pool: Pool | None, limits: StateLimits) -> timedelta | None:
    """How long a node may stay in ``state`` before the reconciler moves it on (None: no
    timeout). ``pool`` is the node's pool, None when its policy is gone.

    ============== ===========================================================================
    BOOTSTRAPPING  every run the executor may make, with its backoffs, then the ready wait:
                   ``bootstrap.timeout * (retries + 1) + backoff * retries + ready_wait``
                   (no pool: the table's)
    DRAINING       ``scale_down.drain_timeout + scale_down.checkpoint_grace`` of the pool (no
                   pool: the service's), plus ``drain_stuck_margin``: the drainer signals
                   the jobs at the drain timeout and they get their grace
    INTERRUPTED    the table's, or the interruption drain deadline plus its grace if longer
    any other      the table's ``after``
    ============== ===========================================================================
    """
    timeout = TIMEOUTS.get(state)
    if timeout is None:
        return None
    if state is S.BOOTSTRAPPING and pool is not None:
        runs = limits.bootstrap_retries + 1
        return (pool.bootstrap.timeout * runs + limits.bootstrap_retry_backoff * (runs - 1)
                + limits.ready_wait_timeout)
    if state is S.DRAINING:
        drain = pool.scale_down.drain_timeout if pool is not None else limits.drain_timeout
        grace = pool.scale_down.checkpoint_grace if pool is not None else limits.checkpoint_grace
        return drain + grace + limits.drain_stuck_margin
    if state is S.INTERRUPTED:
        return max(timeout.after,
                   limits.interruption_drain_deadline + limits.interruption_checkpoint_grace)
    return timeout.after
