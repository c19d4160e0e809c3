"""What a node can report, by its catalog type (model/bounds.py): the table of checks."""

from __future__ import annotations

import math
from typing import Any

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.model.bounds import NodeBounds, checked, metrics_problem, pending_problem, scheduler_problem
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, PendingJob, RunningJob, SchedulerNode
from autoscaler.signals.readings import key_by_name_prefix
from tests.builders import make_node, make_policy

CATALOG = default_catalog()
POOLS = {"vision/gpu": make_policy(instance_types=["p3.2xlarge", "p3.8xlarge"], max_nodes=3).pools[0]}
BOUNDS = NodeBounds(CATALOG, {"vision-gpu-1": make_node("vision-gpu-1", instance_type="g4dn.xlarge")},
                    POOLS, key_by_name_prefix(POOLS))
ONE = BOUNDS.of("vision-gpu-1")


def test_a_nodes_bound_is_its_type_else_its_pools_largest_else_the_catalogs() -> None:
    assert (ONE.gpus, ONE.why) == (1, "g4dn.xlarge has 1 GPU(s)")
    assert BOUNDS.of("vision-gpu-9").gpus == 4  # by name: the pool's largest type
    assert BOUNDS.of("elsewhere").gpus == max(t.gpus for t in CATALOG.types())


@pytest.mark.parametrize(("sched", "why"), [
    (SchedulerNode(gpus_total=1, gpus_allocated=1), None),
    (SchedulerNode(gpus_total=1, gpus_allocated=2 / 3 + 1 / 3), None),  # shares add up
    (SchedulerNode(gpus_total=1e9), "the scheduler reports GPUs=1e+09; g4dn.xlarge has 1 GPU(s)"),
    (SchedulerNode(gpus_total=math.nan), "GPUs=nan (not a number)"),
    (SchedulerNode(gpus_total=math.inf), "GPUs=inf"),
    (SchedulerNode(gpus_total=-1), "GPUs=-1"),
    (SchedulerNode(gpus_total=1, gpus_allocated=math.nan), "allocated GPUs=nan"),
    (SchedulerNode(gpus_total=1, jobs=[RunningJob(id="j", gpus=1000)]), "GPUs of job j=1000"),
    (SchedulerNode(gpus_total=1, gpus_free=[1.0, 1.0]), "2 GPUs by device"),
])
def test_scheduler_numbers(sched: SchedulerNode, why: str | None) -> None:
    got = scheduler_problem(sched, ONE)
    assert (got is None) if why is None else (why in str(got))


def metrics(**kw: Any) -> GpuMetrics:
    return GpuMetrics(**{"util_mean": 50, "util_max": 60, "util_max_idle_window": 60,
                         "gpus_reporting": 1, "sample_age_s": 3, **kw})


@pytest.mark.parametrize(("m", "why"), [
    (metrics(), None),
    (metrics(util_mean=100.0000000001), None),
    (metrics(util_mean=500), "util_mean=500: outside 0..100"),
    (metrics(util_max=-1), "util_max=-1: outside 0..100"),
    (metrics(util_max_idle_window=math.nan), "util_max_idle_window=nan (not a number)"),
    (metrics(temperature_max_c=1e6), "temperature_max_c=1e+06: outside -50..200"),
    (metrics(power_w=math.inf), "power_w=inf"),
    (metrics(xid_errors=-3), "xid_errors=-3"),
    (metrics(gpus_reporting=8), "8 GPUs reporting"),  # 1 GPU: 7 MIG instances at most
])
def test_metric_numbers(m: GpuMetrics, why: str | None) -> None:
    got = metrics_problem(m, ONE)
    assert (got is None) if why is None else (why in str(got))


def test_checked_keeps_what_is_believable_and_says_why_for_the_rest() -> None:
    obs = NodeObservation(metrics=metrics(util_mean=500), scheduler=SchedulerNode(gpus_total=1),
                          health_check_failed="nvidia-smi failed")
    kept, why = checked(obs, ONE)
    assert kept.metrics is None and kept.scheduler == obs.scheduler
    assert kept.metrics_missing == why[0] and kept.health_check_failed == "nvidia-smi failed"
    assert checked(NodeObservation(scheduler=SchedulerNode(gpus_total=1)), ONE) == (
        NodeObservation(scheduler=SchedulerNode(gpus_total=1)), [])


def test_pending_jobs_no_node_of_the_pool_could_hold() -> None:
    pool = POOLS["vision/gpu"]
    assert pending_problem(PendingJob(id="a", gpus=4, nodes=3), pool) is None
    assert pending_problem(PendingJob(id="b", gpus=math.inf), pool) == (
        "asks inf GPUs per node: not a number of GPUs")
    assert pending_problem(PendingJob(id="c", gpus=1, nodes=10**9), pool) == (
        "asks 1000000000 nodes; the pool has at most 3 (max_nodes)")
