"""Pending demand given by shape (``PendingShape``, what the simulator reports) is planned
exactly as the same jobs listed one by one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from autoscaler.engine import Hold, Launch, decide
from autoscaler.engine.binpack import shapes_of
from autoscaler.model.snapshot import DecisionInput, PendingJob, PendingShape, PoolObservation
from tests.builders import NOW, fleet, idle, make_node, make_policy, snapshot


def _jobs() -> list[PendingJob]:
    """Every shape field varies; ids out of order; one job waits for something else."""
    at = NOW - timedelta(minutes=20)
    return [
        PendingJob(id="q7", gpus=1, submitted_at=at),
        PendingJob(id="a2", gpus=1, submitted_at=at + timedelta(minutes=5)),
        PendingJob(id="m1", gpus=0.5, submitted_at=at),
        PendingJob(id="b0", gpus=0.25),
        PendingJob(id="z9", gpus=1, priority=100),
        PendingJob(id="c3", gpus=1, gpu_model="V100"),
        PendingJob(id="d4", gpus=1, gpu_model="T4"),
        PendingJob(id="e5", gpus=1, zones=["us-east-1b"]),
        PendingJob(id="f6", gpus=1, instance_types=["p3.8xlarge"]),
        PendingJob(id="mn", gpus=4, nodes=2),
        PendingJob(id="g8", gpus=4),
        PendingJob(id="dep", gpus=1, reason="Dependency"),
    ]


def _plan(obs: PoolObservation) -> str:
    policy = make_policy(instance_types=["p3.2xlarge", "p3.8xlarge", "g4dn.xlarge"], max_nodes=6,
                         zones=["us-east-1a", "us-east-1b"])
    node = make_node("free-1", zone="us-east-1a")
    plan = decide({"vision": policy}, fleet(node), snapshot({"free-1": idle()}, {"vision/gpu": obs}), NOW)
    return plan.model_dump_json()


def test_shapes_plan_like_the_listed_jobs() -> None:
    jobs = _jobs()
    listed = _plan(PoolObservation(pending=jobs))
    # The case exercises the packer: launches for some jobs, holds for others.
    assert '"kind":"launch"' in listed and "not placed" in listed, listed
    assert _plan(PoolObservation(pending_shapes=shapes_of(jobs))) == listed
    # Half listed, half by shape: the engine reads both.
    assert _plan(PoolObservation(pending=jobs[::2], pending_shapes=shapes_of(jobs[1::2]))) == listed


def test_a_backlog_of_one_shape_is_counted_and_its_reasons_name_the_first_ids() -> None:
    ids = [f"j{i:05d}" for i in range(5000)]
    shape = PendingShape(gpus=1, ids=ids, submitted_at=[None] * len(ids))
    policy = make_policy(instance_types=["p3.2xlarge"], max_nodes=3)
    plan = decide({"vision": policy}, fleet(), snapshot({}, {"vision/gpu": PoolObservation(
        pending_shapes=[shape])}), NOW)
    assert sum(a.count for a in plan.actions if isinstance(a, Launch)) == 3
    held = [a.reason for a in plan.actions if isinstance(a, Hold) and "not placed" in a.reason]
    assert held == ["vision/gpu: 4997 pending job(s) not placed: j00003 (1 GPUs): pool is at max_nodes (3); "
                    "j00004 (1 GPUs): pool is at max_nodes (3); j00005 (1 GPUs): pool is at max_nodes (3)"]


def test_a_shape_is_checked_and_survives_the_snapshot_file() -> None:
    with pytest.raises(ValidationError, match="sorted"):
        PendingShape(gpus=1, ids=["b", "a"], submitted_at=[None, None])
    with pytest.raises(ValidationError, match="one entry per id"):
        PendingShape(gpus=1, ids=["a", "b"], submitted_at=[None])
    with pytest.raises(ValidationError):
        PendingShape(gpus=1, ids=[], submitted_at=[])
    shapes = shapes_of(_jobs())
    recorded = DecisionInput(now=NOW, snapshot=snapshot({}, {"vision/gpu": PoolObservation(
        pending_shapes=shapes)}))
    again = DecisionInput.model_validate_json(recorded.model_dump_json())
    assert again.snapshot.pools["vision/gpu"].pending_shapes == shapes
