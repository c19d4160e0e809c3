"""A DRAINED node is terminated only while its pool's scheduler is read: with it missing,
that no job is left on the node cannot be confirmed (the reconciler may have forced it
DRAINED on a timeout while every drain step failed), so the Terminate waits, with a Hold
saying why (audit F4)."""

from __future__ import annotations

from autoscaler.engine import Hold, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Terminate
from autoscaler.model.snapshot import PoolObservation
from tests.builders import NOW, busy, fleet, make_node, make_policy, snapshot


def plan_of(kind: str = "slurm", **snap: object):
    policy = make_policy(cluster={"kind": kind})
    nodes = [make_node("n0"), make_node("gone-1", state=NodeState.DRAINED),
             make_node("gone-2", state=NodeState.DRAINED),
             make_node("boot", state=NodeState.BOOTSTRAP_FAILED, reason="no GPUs")]
    return decide({"vision": policy}, fleet(*nodes), snapshot({"n0": busy(util=50)}, **snap), NOW)


def terminated(plan) -> list[str]:
    return sorted(a.node for a in plan.actions if isinstance(a, Terminate))


def test_drained_nodes_wait_while_the_scheduler_is_missing() -> None:
    plan = plan_of(missing=["slurm"])
    assert terminated(plan) == ["boot"]  # a failed bootstrap never ran jobs: cleaned up
    [hold] = [a for a in plan.actions if isinstance(a, Hold) and "drained" in a.reason]
    assert hold.reason == (
        "vision/gpu: 2 drained node(s) kept (gone-1, gone-2): slurm could not be read, so that "
        "no job is left on them cannot be confirmed; terminated once the scheduler is read again")


def test_the_pools_own_scheduler_data_missing_holds_them_too() -> None:
    plan = plan_of(pools={"vision/gpu": PoolObservation(scheduler_missing="sinfo timed out")})
    assert terminated(plan) == ["boot"]
    assert any(isinstance(a, Hold) and "scheduler data missing: sinfo timed out" in a.reason
               for a in plan.actions)


def test_drained_nodes_are_terminated_with_the_scheduler_read_or_without_one() -> None:
    assert terminated(plan_of()) == ["boot", "gone-1", "gone-2"]
    # Another source missing (Prometheus) does not make the drain unconfirmed.
    assert terminated(plan_of(missing=["prometheus"])) == ["boot", "gone-1", "gone-2"]
    # A pool without a scheduler has nothing to confirm with.
    assert terminated(plan_of("none", missing=["slurm"])) == ["boot", "gone-1", "gone-2"]
