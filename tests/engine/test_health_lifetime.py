"""Health and lifetime: unhealthy and old nodes are replaced; long jobs reported."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from autoscaler.engine import Drain, EngineSettings, Replace, ReportJob, decide
from autoscaler.model.lifecycle import NodeState as S
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, RunningJob, SchedulerNode
from tests.builders import NOW, busy, fleet, make_node, make_policy, snapshot


def run(policy, nodes, obs, **snap):
    return decide({policy.team: policy}, fleet(*nodes), snapshot(obs, **snap), NOW)


def sick(**metrics) -> NodeObservation:
    base = busy()
    assert base.metrics is not None
    return dataclasses.replace(base, metrics=dataclasses.replace(base.metrics, **metrics))


@pytest.mark.parametrize(
    ("obs", "needle"),
    [
        (sick(xid_errors=3), "3 GPU(s) with an XID error in the last 5m"),
        (sick(temperature_max_c=95), "95°C > 87°C"),
        (dataclasses.replace(busy(), health_check_failed="2 of 4 GPUs visible"), "2 of 4 GPUs"),
    ],
)
def test_unhealthy_node_is_replaced(obs, needle):
    plan = run(make_policy(), [make_node("n1")], {"n1": obs})
    (rep,) = [a for a in plan.actions if isinstance(a, Replace)]
    assert rep.node == "n1" and rep.trigger == "unhealthy" and needle in rep.reason
    assert rep.instance_type == "p3.2xlarge"


def test_throttling_only_when_configured():
    obs = {"n1": sick(thermal_throttle=True)}
    assert not any(isinstance(a, Replace) for a in run(make_policy(), [make_node("n1")], obs).actions)
    policy = make_policy(health={"replace_on_thermal_throttle": True})
    assert any(isinstance(a, Replace) for a in run(policy, [make_node("n1")], obs).actions)


def test_unhealthy_is_acted_on_even_with_pool_data_missing():
    from autoscaler.model.snapshot import PoolObservation
    obs = {"n1": dataclasses.replace(busy(), health_check_failed="ECC errors")}
    plan = run(make_policy(), [make_node("n1")], obs,
               pools={"vision/gpu": PoolObservation(metrics_missing="timeout")})
    assert any(isinstance(a, Replace) for a in plan.actions)


def test_unhealthy_without_quota_for_a_replacement_is_drained():
    policy = make_policy(quota={"max_gpus": 1})
    obs = {"n1": sick(xid_errors=1)}
    plan = run(policy, [make_node("n1")], obs)
    (drain,) = [a for a in plan.actions if isinstance(a, Drain)]
    assert drain.trigger == "unhealthy" and "GPU cap 1" in drain.reason


def test_expired_nodes_replaced_oldest_first_within_budget():
    policy = make_policy(lifetime={"max_node_age": "24h"}, scale_down={"max_draining_percent": 10})
    nodes = [make_node("old", age=timedelta(hours=50)), make_node("older", age=timedelta(hours=60)),
             make_node("young", age=timedelta(hours=2))]
    plan = run(policy, nodes, {n.name: busy() for n in nodes})
    reps = [a for a in plan.actions if isinstance(a, Replace)]
    assert [r.node for r in reps] == ["older"]
    assert "2d12h old" in reps[0].reason and "max_node_age 1d" in reps[0].reason


def test_long_jobs_reported_and_optionally_signalled():
    policy = make_policy(lifetime={"max_job_runtime": "48h", "signal_long_jobs": True})
    obs = {"n1": NodeObservation(
        metrics=GpuMetrics(util_mean=90, util_max_idle_window=95, sample_age_s=3),
        scheduler=SchedulerNode(state="allocated", gpus_total=1, gpus_allocated=1, jobs=[
            RunningJob(id="long", gpus=1, started_at=NOW - timedelta(hours=50)),
            RunningJob(id="short", gpus=0, started_at=NOW - timedelta(hours=1)),
        ]))}
    # the node is older than its job (a job cannot start on a node not yet created)
    plan = run(policy, [make_node("n1", age=timedelta(hours=60))], obs)
    (rep,) = [a for a in plan.actions if isinstance(a, ReportJob)]
    assert rep.job == "long" and rep.signal and "2d2h" in rep.reason


def test_a_job_started_before_its_node_was_created_is_never_a_long_job() -> None:
    """A start before the node existed is unknown, not the node's age: the job's age is not
    known to be past max_job_runtime, so it is neither reported nor released."""
    policy = make_policy(lifetime={"max_job_runtime": "48h", "action": "release"})
    obs = {"n1": NodeObservation(
        metrics=GpuMetrics(util_mean=90, util_max_idle_window=95, sample_age_s=3),
        scheduler=SchedulerNode(state="allocated", gpus_total=1, gpus_allocated=1, jobs=[
            RunningJob(id="long", gpus=1, started_at=NOW - timedelta(hours=50))]))}
    assert not [a for a in run(policy, [make_node("n1", age=timedelta(hours=49))], obs).actions
                if isinstance(a, ReportJob)]
    for state in (S.READY, S.DRAINING):  # serving or draining, the same
        (rep,) = [a for a in run(policy, [make_node("n1", age=timedelta(hours=51), state=state)],
                                 obs).actions if isinstance(a, ReportJob)]
        assert rep.job == "long" and rep.release


def test_a_job_started_in_its_nodes_first_second_is_a_long_job() -> None:
    """Slurm's and the Kubernetes API's times are whole seconds from another clock: a job
    that started 0.4 s after its node was created reads as 0.6 s before it. Read as unknown,
    it was never released (a flaky Slurm test found it)."""
    policy = make_policy(lifetime={"max_job_runtime": "6s", "action": "release"})
    created = NOW - timedelta(seconds=9, milliseconds=400)
    obs = {"n1": NodeObservation(
        metrics=GpuMetrics(util_mean=90, util_max_idle_window=95, sample_age_s=3),
        scheduler=SchedulerNode(state="allocated", gpus_total=1, gpus_allocated=1, jobs=[
            RunningJob(id="7", gpus=1, started_at=NOW - timedelta(seconds=10))]))}
    node = make_node("n1", age=NOW - created)
    assert node.created_at > obs["n1"].scheduler.jobs[0].started_at  # type: ignore[union-attr]
    (rep,) = [a for a in run(policy, [node], obs).actions if isinstance(a, ReportJob)]
    assert rep.job == "7" and rep.release


def _long_job_plan(priority: str, settings: EngineSettings | None = None, **lifetime: str):
    policy = make_policy(priority=priority, lifetime={"max_job_runtime": "2h", **lifetime},
                         scale_down={"checkpoint_grace": "5m"})
    obs = {"n1": NodeObservation(
        metrics=GpuMetrics(util_mean=90, util_max_idle_window=95, sample_age_s=3),
        scheduler=SchedulerNode(state="allocated", gpus_total=1, gpus_allocated=1, jobs=[
            RunningJob(id="4242", gpus=1, started_at=NOW - timedelta(hours=2, minutes=5))]))}
    plan = decide({policy.team: policy}, fleet(make_node("n1", age=timedelta(hours=3))), snapshot(obs), NOW,
                  settings=settings)
    (rep,) = [a for a in plan.actions if isinstance(a, ReportJob)]
    return rep


HIGH_EXEMPT = EngineSettings(long_job_release_exempt=["high"])


@pytest.mark.parametrize(("priority", "lifetime", "settings", "release", "then"), [
    ("medium", {}, None, False, "past max_job_runtime 2h"),  # the default: action report
    ("medium", {"action": "report"}, None, False, "past max_job_runtime 2h"),
    ("medium", {"action": "release"}, None, True,
     "past max_job_runtime 2h: checkpoint signal USR1, requeue after 5m grace"),
    ("medium", {"action": "release"}, HIGH_EXEMPT, True, "requeue after 5m grace"),
    ("high", {"action": "release"}, HIGH_EXEMPT, False,
     "past max_job_runtime 2h: high priority is exempt from release, reported only"),
])
def test_long_jobs_released_unless_the_teams_priority_is_exempt(priority, lifetime, settings,
                                                                release, then):
    rep = _long_job_plan(priority, settings, **lifetime)
    assert rep.release is release and rep.job == "4242"
    assert rep.started_at == NOW - timedelta(hours=2, minutes=5)
    assert rep.reason.startswith("vision/gpu: job 4242 on n1 has run 2h5m, past") and rep.reason.endswith(then)


def test_lifetime_action_is_report_or_release():
    with pytest.raises(ValueError, match="action"):
        make_policy(lifetime={"max_job_runtime": "2h", "action": "kill"})
