"""What a node can report, by its catalog type (model/bounds.py): the table of checks."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.model.bounds import (
    MAX_AGE,
    SKEW,
    NodeBounds,
    Times,
    checked,
    metrics_problem,
    pending_problem,
    scheduler_problem,
)
from autoscaler.model.snapshot import (
    GpuMetrics,
    NodeObservation,
    PendingJob,
    PendingShape,
    RunningJob,
    SchedulerNode,
)
from autoscaler.signals.readings import key_by_name_prefix
from tests.builders import NOW, make_node, make_policy

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


# -- times a scheduler gives (Times): believed within [now - 1 year, now + 5 min] ----------

EPOCH_1 = datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)  # Slurm reason_changed_at / start_time 1
Y9000 = datetime(9000, 1, 1, tzinfo=UTC)
Y9999 = datetime(9999, 12, 31, 23, tzinfo=UTC)  # Slurm start_time 253402297200


@pytest.mark.parametrize(("at", "believed"), [
    (NOW - timedelta(minutes=1), NOW - timedelta(minutes=1)),
    (NOW - MAX_AGE, NOW - MAX_AGE),
    (NOW + SKEW, NOW + SKEW),
    (NOW - MAX_AGE - timedelta(seconds=1), None),
    (NOW + SKEW + timedelta(seconds=1), None),
    (EPOCH_1, None), (datetime(1970, 1, 1, tzinfo=UTC), None), (Y9000, None), (Y9999, None),
    (datetime(2026, 11, 30, 11, 0), datetime(2026, 11, 30, 11, 0, tzinfo=UTC)),  # naive: UTC
    (datetime(1970, 1, 1), None),
    (None, None),
])
def test_a_time_is_believed_within_a_year_back_and_five_minutes_ahead(
        at: datetime | None, believed: datetime | None) -> None:
    assert Times(NOW, {}, {}).believe(at) == believed


def down_since(at: datetime | None) -> SchedulerNode:
    return SchedulerNode(state="down", ready=False, gpus_total=1, unusable="DOWN by slurm: Not responding",
                         unusable_since=at)


@pytest.mark.parametrize("at", [EPOCH_1, Y9000])
def test_an_unusable_since_not_believed_counts_from_the_tick_first_seen_so(at: datetime) -> None:
    """1970 would replace a node that just went down, 9000 would never replace it: the grace
    counts from the first tick this reader saw it, and keeps counting from there."""
    first = Times(NOW, {}, {})
    sched, why = first.scheduler("n1", down_since(at))
    assert sched.unusable_since == NOW and first.since_seen == {"n1": NOW}
    assert why == (f"unusable_since {at.isoformat()} (counted from {NOW.isoformat()})",)
    assert sched.unusable == (f"DOWN by slurm: Not responding (its time {at.isoformat()} not "
                              f"believed; first seen so at {NOW.isoformat()})")
    later = Times(NOW + timedelta(minutes=11), first.since_seen, {})
    assert later.scheduler("n1", down_since(at))[0].unusable_since == NOW
    assert later.since_seen == {"n1": NOW}
    usable_again = Times(NOW + timedelta(minutes=12), later.since_seen, {})
    usable_again.scheduler("n1", SchedulerNode(gpus_total=1))
    assert usable_again.since_seen == {}  # down again later: counted afresh


def test_a_believable_scheduler_view_is_kept_as_it_is() -> None:
    sched = SchedulerNode(gpus_total=1, gpus_allocated=1, unusable="DOWN", unusable_since=NOW,
                          jobs=[RunningJob(id="7", gpus=1, started_at=NOW - timedelta(hours=1),
                                           ends_at=datetime(9999, 1, 1, tzinfo=UTC))])
    times = Times(NOW, {}, {})
    assert times.scheduler("n1", sched) == (sched, ()) and times.scheduler("n1", sched)[0] is sched
    assert times.since_seen == {}


@pytest.mark.parametrize("said", ["DOWN", "NOT_RESPONDING", "NotReady: no Ready condition posted",
                                  "DOWN by slurm: " + "x" * 400], ids=["down", "idle*", "no-condition", "long"])
def test_an_unusable_node_without_a_time_counts_from_the_tick_first_seen_so(said: str) -> None:
    """A Slurm DOWN without a reason, an ``idle*``, a NotReady without lastTransitionTime:
    ordinary output, not a time refused (nothing to log), but not "unusable forever
    without replacing" either: a lower bound, which ``unusable`` names for the reason."""
    def down() -> SchedulerNode:
        return SchedulerNode(state="down", ready=False, gpus_total=1, unusable=said[:300])

    first = Times(NOW, {}, {})
    sched, why = first.scheduler("n1", down())
    note = f" (no time given; first seen so at {NOW.isoformat()})"
    assert why == () and sched.unusable_since == NOW and first.since_seen == {"n1": NOW}
    assert sched.unusable is not None and sched.unusable.endswith(note) and len(sched.unusable) <= 300
    assert sched.unusable == said[:300 - len(note)] + note
    later = Times(NOW + timedelta(minutes=11), first.since_seen, {})
    assert later.scheduler("n1", down())[0].unusable_since == NOW and later.since_seen == {"n1": NOW}
    restarted = Times(NOW + timedelta(minutes=11), {}, {})  # a new reader: later, never sooner
    assert restarted.scheduler("n1", down())[0].unusable_since == NOW + timedelta(minutes=11)
    usable_again = Times(NOW + timedelta(minutes=12), later.since_seen, {})
    usable_again.scheduler("n1", SchedulerNode(gpus_total=1))
    assert usable_again.since_seen == {}  # down again later: counted afresh
    said_now = Times(NOW + timedelta(minutes=13), later.since_seen, {})  # the scheduler's time wins
    dated = SchedulerNode(state="down", gpus_total=1, unusable="DOWN", unusable_since=NOW + timedelta(minutes=1))
    assert said_now.scheduler("n1", dated) == (dated, ()) and said_now.since_seen == {}


@pytest.mark.parametrize("at", [EPOCH_1, Y9999])
def test_a_job_start_not_believed_is_unknown(at: datetime) -> None:
    """Unknown, so never past max_job_runtime: not 20787 days old."""
    sched = SchedulerNode(gpus_total=1, gpus_allocated=1, jobs=[
        RunningJob(id="7", gpus=1, started_at=at), RunningJob(id="8", gpus=0, started_at=NOW)])
    kept, why = Times(NOW, {}, {}).scheduler("n1", sched)
    assert [j.started_at for j in kept.jobs] == [None, NOW]
    assert why == (f"started_at {at.isoformat()} of job 7 (unknown)",)


def test_naive_job_times_are_utc() -> None:
    naive = datetime(2026, 11, 30, 11, 0)
    sched = SchedulerNode(gpus_total=1, jobs=[RunningJob(id="7", started_at=naive,
                                                         ends_at=naive + timedelta(days=3))])
    (job,) = Times(NOW, {}, {}).scheduler("n1", sched)[0].jobs
    assert job.started_at == naive.replace(tzinfo=UTC) and job.ends_at == (naive + timedelta(days=3)).replace(tzinfo=UTC)


@pytest.mark.parametrize("at", [Y9000, EPOCH_1, None])
def test_a_submit_time_not_believed_or_not_given_counts_from_the_tick_first_seen(at: datetime | None) -> None:
    """Year 9000 never bursts, 1970 bursts at once past burst_after; from the first tick
    seen pending, the job waits as long as it provably has."""
    job = PendingJob(id="42", gpus=1, submitted_at=at)
    first = Times(NOW, {}, {})
    assert first.pending(job).submitted_at == NOW and first.pending_refused == 1
    later = Times(NOW + timedelta(hours=1), {}, first.pending_seen)
    assert later.pending(job).submitted_at == NOW and later.pending_seen == {"42": NOW}


def test_a_shapes_submit_times_are_made_plausible_job_by_job() -> None:
    shape = PendingShape(gpus=1, ids=["a", "b", "c"], submitted_at=[
        NOW - timedelta(minutes=3), None, datetime(2026, 11, 30, 11, 0)])
    first = Times(NOW, {}, {})
    assert first.shape(shape).submitted_at == [
        NOW - timedelta(minutes=3), NOW, datetime(2026, 11, 30, 11, 0, tzinfo=UTC)]
    assert first.pending_seen == {"b": NOW} and first.pending_refused == 1
    later = Times(NOW + timedelta(hours=1), {}, first.pending_seen)
    assert later.shape(shape).submitted_at[1] == NOW
    fine = PendingShape(gpus=1, ids=["a"], submitted_at=[NOW])
    assert later.shape(fine) is fine


def test_a_believable_submit_time_is_kept_and_a_naive_one_is_utc() -> None:
    times = Times(NOW, {}, {})
    job = PendingJob(id="1", gpus=1, submitted_at=NOW - timedelta(minutes=1))
    assert times.pending(job) is job
    naive = PendingJob(id="2", gpus=1, submitted_at=datetime(2026, 11, 30, 11, 0))
    assert times.pending(naive).submitted_at == datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
    assert times.pending_seen == {} and times.pending_refused == 0
