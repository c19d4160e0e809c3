"""The forecast floor (Snapshot.forecasts): launches ahead, never removes, limits apply."""

from __future__ import annotations

from datetime import timedelta

from autoscaler.engine import Drain, Launch, decide
from autoscaler.model.snapshot import ForecastFloor
from tests.builders import NOW, busy, fleet, idle, make_node, make_policy, snapshot

KEY = "vision/gpu"
WHY = "forecast p80 for Mon 08:00-08:10 is 5 GPUs (ridge model, MAPE 7% over 14 d; 4m ahead)"


def run(policy, nodes=(), obs=None, gpus=5.0):
    snap = snapshot(obs or {}, forecasts={KEY: ForecastFloor(gpus=gpus, reason=WHY)})
    return decide({policy.team: policy}, fleet(*nodes), snap, NOW)


def launches(plan) -> list[Launch]:
    return [a for a in plan.actions if isinstance(a, Launch)]


def test_forecast_above_the_pool_launches_with_its_reason_and_price():
    nodes = [make_node("n1", instance_type="p3.8xlarge")]
    plan = run(make_policy(), nodes, {"n1": busy(50, gpus=4)})
    (launch,) = launches(plan)
    assert (launch.instance_type, launch.count, launch.trigger) == ("p3.2xlarge", 1, "floor")
    assert launch.reason == f"{KEY}: {WHY}: 2 node(s); pool has 1; launching 1 x " + \
        launch.reason.split("launching 1 x ")[1]
    assert launch.hourly_usd > 0
    assert plan.pools[KEY].floor == 2


def test_forecast_the_pool_already_holds_launches_nothing():
    nodes = [make_node("n1", instance_type="p3.8xlarge"), make_node("n2")]
    plan = run(make_policy(), nodes, {"n1": busy(50, gpus=4), "n2": busy(50)})
    assert launches(plan) == []


def test_forecast_keeps_idle_nodes_it_needs_and_drains_the_rest():
    old = timedelta(hours=3)
    nodes = [make_node(f"n{i}", ready_for=old, state_since=NOW - old) for i in range(4)]
    plan = run(make_policy(), nodes, {f"n{i}": idle() for i in range(4)}, gpus=3)
    drains = [a for a in plan.actions if isinstance(a, Drain)]
    assert len(drains) == 1  # 4 idle 1-GPU nodes, forecast 3 GPUs: only one may go
    assert launches(plan) == []


def test_zero_forecast_never_removes_more_than_without_it():
    old = timedelta(hours=3)
    nodes = [make_node("n0", ready_for=old, state_since=NOW - old)]
    with_zero = run(make_policy(min_nodes=1), nodes, {"n0": idle()}, gpus=0)
    assert not [a for a in with_zero.actions if isinstance(a, Drain)]


def test_max_nodes_and_quota_still_apply():
    plan = run(make_policy(max_nodes=2), gpus=10)
    assert sum(a.count for a in launches(plan)) == 2
    plan = run(make_policy(quota={"max_gpus": 3}), gpus=10)
    assert sum(a.count * a.gpus_per_node for a in launches(plan)) == 3


def test_higher_of_schedule_and_forecast_wins():
    sched = [{"cron": "0 0 * * *", "min_nodes": 8, "duration": "24h"}]
    plan = run(make_policy(schedule=sched, scale_up={"max_step": 10}), gpus=3)
    assert sum(a.count for a in launches(plan)) == 8
    assert "schedule" in launches(plan)[0].reason
    plan = run(make_policy(schedule=[{**sched[0], "min_nodes": 1}]), gpus=3)
    assert sum(a.count for a in launches(plan)) == 3
    assert "forecast p80" in launches(plan)[0].reason
