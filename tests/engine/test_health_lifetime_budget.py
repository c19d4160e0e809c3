"""``lifetime.action: release`` has a budget: per pool and tick, at most the pool's
max_draining_percent of its nodes (at least 1) of its jobs past max_job_runtime are
released, the longest running first; the rest are reported without release, the reason
saying why (audit F5: 40 jobs past the limit were released in one tick)."""

from __future__ import annotations

from datetime import timedelta

from autoscaler.engine import ReportJob, decide
from autoscaler.engine.settings import EngineSettings
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, RunningJob, SchedulerNode
from tests.builders import NOW, fleet, make_node, make_policy, snapshot


def long_running(job: str, hours: float) -> NodeObservation:
    return NodeObservation(
        metrics=GpuMetrics(util_mean=95, util_max_idle_window=98, util_max=95, gpus_reporting=1,
                           sample_age_s=5),
        scheduler=SchedulerNode(state="allocated", gpus_total=1, gpus_allocated=1, jobs=[
            RunningJob(id=job, gpus=1, started_at=NOW - timedelta(hours=hours))]))


def reports(count: int, hours: dict[int, float] | None = None, *, action: str = "release",
            settings: EngineSettings | None = None, **pool_kw: object) -> list[ReportJob]:
    """``count`` nodes n0.. each running job j<i>, 25 h old unless ``hours`` says otherwise."""
    policy = make_policy(max_nodes=100, lifetime={"max_job_runtime": "24h", "action": action},
                         **pool_kw)
    nodes = [make_node(f"n{i}", age=timedelta(days=3)) for i in range(count)]
    obs = {f"n{i}": long_running(f"j{i}", (hours or {}).get(i, 25)) for i in range(count)}
    plan = decide({"vision": policy}, fleet(*nodes), snapshot(obs), NOW, settings=settings)
    return [a for a in plan.actions if isinstance(a, ReportJob)]


def test_forty_jobs_past_the_limit_release_only_the_pools_budget() -> None:
    got = reports(40)
    assert len(got) == 40  # every one still reported
    released = [r for r in got if r.release]
    assert len(released) == 8  # max_draining_percent 20 of 40 nodes
    held = [r for r in got if not r.release]
    assert held[0].reason.endswith(
        "past max_job_runtime 1d: reported, its release waits: 8 of 40 job(s) past it "
        "released this tick, longest running first (at most max_draining_percent 20 of the "
        "pool's 40 node(s), at least 1, per tick)")
    assert all("checkpoint signal USR1, requeue after 2m grace" in r.reason for r in released)


def test_the_longest_running_are_released_first() -> None:
    got = reports(10, {3: 30, 7: 27, 5: 26})  # 10 nodes at 20%: 2 releases
    assert sorted(r.job for r in got if r.release) == ["j3", "j7"]


def test_at_least_one_and_the_pools_percent_otherwise() -> None:
    assert [r.job for r in reports(3) if r.release] == ["j0"]  # 20% of 3 is 0: still 1
    assert len([r for r in reports(10, scale_down={"max_draining_percent": 50}) if r.release]) == 5


def test_within_the_budget_every_job_is_released_and_report_only_is_untouched() -> None:
    got = reports(5, {1: 1, 2: 1, 3: 1, 4: 1})  # only j0 past the limit: within 1 of 5
    assert [(r.job, r.release) for r in got] == [("j0", True)]
    assert "release waits" not in got[0].reason
    got = reports(20, action="report")
    assert len(got) == 20 and not any(r.release for r in got)
    assert not any("release waits" in r.reason for r in got)
