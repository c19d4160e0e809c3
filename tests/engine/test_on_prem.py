"""Hybrid burst: pending jobs fill the pool's on-prem nodes before any cloud launch."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from autoscaler.engine import Hold, Launch, decide
from autoscaler.model.snapshot import OnPremNode, PendingJob, PoolObservation
from tests.builders import NOW, fleet, make_policy, snapshot

KEY = "vision/gpu"
ON_PREM = [OnPremNode(name="gpu01", gpus=4, allocated=3, gpu_model="V100"),
           OnPremNode(name="gpu02", gpus=4, allocated=2, gpu_model="V100")]


def jobs(*gpus: float, waited: timedelta = timedelta(minutes=1), model: str | None = None
         ) -> list[PendingJob]:
    return [PendingJob(id=f"j{i}", gpus=g, submitted_at=NOW - waited, gpu_model=model)
            for i, g in enumerate(gpus)]


def plan_for(pending: list[PendingJob], on_prem: list[OnPremNode] | None = ON_PREM,
             **spec: object):
    policy = make_policy(cluster={"kind": "slurm", "partition": "gpu",
                                  "on_prem": {"nodes": "gpu[01-02]", **spec}})
    obs = PoolObservation(pending=pending, on_prem=on_prem)
    return decide({policy.team: policy}, fleet(), snapshot({}, {KEY: obs}), NOW)


def launched(plan) -> list[tuple[str, int]]:
    return [(a.instance_type, a.count) for a in plan.actions if isinstance(a, Launch)]


def holds(plan) -> str:
    return " | ".join(a.reason for a in plan.actions if isinstance(a, Hold))


def test_jobs_that_fit_on_prem_launch_nothing_and_the_decision_says_where_they_go() -> None:
    plan = plan_for(jobs(1, 2))  # 1 free on gpu01, 2 on gpu02
    assert launched(plan) == []
    assert "2 of 2 pending job part(s) fit on-prem gpu[01-02] (3 of 8 GPUs free): no cloud " \
        "node needed" in holds(plan)


def test_only_the_overflow_is_launched_and_its_reason_names_what_went_on_prem() -> None:
    plan = plan_for(jobs(2, 1, 1))  # 2 -> gpu02, 1 -> gpu01, the last 1 GPU finds no room
    assert launched(plan) == [("p3.2xlarge", 1)]
    [launch] = [a for a in plan.actions if isinstance(a, Launch)]
    assert ("vision/gpu: 2 of 3 pending job part(s) fit on-prem gpu[01-02] (3 of 8 GPUs free); "
            "3 pending job part(s) ask for 4 GPUs; 1 do not fit on-prem nor on free"
            in launch.reason), launch.reason
    assert launch.reason.endswith("launching 1 x p3.2xlarge on-demand ($3.060/h, $3.060/GPU-h)")


def test_a_job_that_fits_but_pends_past_start_within_is_bought_for() -> None:
    plan = plan_for(jobs(1, waited=timedelta(minutes=6)))  # start_within 5m by default
    assert launched(plan) == [("p3.2xlarge", 1)]
    assert launched(plan_for(jobs(1, waited=timedelta(minutes=6)), start_within="10m")) == []


def test_a_model_on_prem_lacks_or_a_cloud_type_constraint_skips_on_prem() -> None:
    assert launched(plan_for(jobs(1, model="V100"))) == []
    a100 = [n.model_copy(update={"gpu_model": "A100"}) for n in ON_PREM]
    assert launched(plan_for(jobs(1, model="V100"), a100)) == [("p3.2xlarge", 1)]
    typed = [PendingJob(id="j0", gpus=1, submitted_at=NOW, instance_types=["p3.2xlarge"])]
    assert launched(plan_for(typed)) == [("p3.2xlarge", 1)]


def test_burst_only_pool_waits_for_on_prem_then_bursts() -> None:
    young = plan_for(jobs(4, 4, waited=timedelta(minutes=3)), burst_after="10m")
    assert launched(young) == []
    assert "2 pending job part(s) wait for on-prem gpu[01-02] before bursting (burst_after " \
        "10m; the longest has waited 3m)" in holds(young)
    old = plan_for(jobs(4, 4, waited=timedelta(minutes=11)), burst_after="10m")
    assert launched(old) == [("p3.8xlarge", 2)]


def test_no_on_prem_reading_means_no_on_prem_room() -> None:
    assert launched(plan_for(jobs(1), on_prem=None)) == [("p3.2xlarge", 1)]
    assert launched(plan_for(jobs(1), on_prem=[])) == [("p3.2xlarge", 1)]


def test_on_prem_needs_one_of_partition_and_nodes_and_a_slurm_pool() -> None:
    with pytest.raises(ValidationError, match="exactly one of partition and nodes"):
        make_policy(cluster={"kind": "slurm", "on_prem": {"partition": "a", "nodes": "b"}})
    with pytest.raises(ValidationError, match="start_within"):
        make_policy(cluster={"kind": "slurm", "on_prem": {"nodes": "b", "start_within": "5s"}})
    with pytest.raises(ValidationError, match="allocated"):
        OnPremNode(name="x", gpus=2, allocated=3)
    with pytest.raises(ValidationError):
        OnPremNode(name="x", gpus=65)


def test_shares_spread_over_every_gpu_leave_no_whole_gpu_where_the_scheduler_says_so() -> None:
    """Four jobs of 0.3 GPU, one on each GPU of gpu01: 1.2 of 4 allocated. By the total that
    is 2 whole GPUs free; per device (the simulator reports it, as it does for cloud nodes)
    none is, so a 1-GPU job is bought for at once instead of pending until start_within.
    A half-GPU job still fits."""
    spread = [OnPremNode(name="gpu01", gpus=4, allocated=1.2, gpus_free=[0.7] * 4, gpu_model="V100"),
              OnPremNode(name="gpu02", gpus=4, allocated=4, gpu_model="V100")]
    assert launched(plan_for(jobs(1), spread)) == [("p3.2xlarge", 1)]
    assert launched(plan_for(jobs(0.5), spread)) == []
    by_total = [n.model_copy(update={"gpus_free": None}) for n in spread]
    assert launched(plan_for(jobs(1), by_total)) == []


def test_free_shares_must_be_one_per_gpu() -> None:
    with pytest.raises(ValidationError, match="3 GPUs' free shares for 4 GPUs"):
        OnPremNode(name="gpu01", gpus=4, allocated=1, gpus_free=[1, 1, 1])
    with pytest.raises(ValidationError):
        OnPremNode(name="gpu01", gpus=2, allocated=1, gpus_free=[1.5, 0])
