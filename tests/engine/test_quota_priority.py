"""Team quotas, global caps by priority, preemption of lower tiers, interruptions."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from autoscaler.engine import Drain, EngineSettings, Hold, Launch, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import PoolHistory
from autoscaler.model.snapshot import PoolObservation
from autoscaler.policy.models import Market
from tests.builders import NOW, busy, fleet, idle, make_node, make_policy, pending, snapshot


def launched(plan, pool=None) -> int:
    return sum(a.count for a in plan.actions if isinstance(a, Launch) and (pool is None or a.pool == pool))


def test_team_gpu_quota_caps_launches():
    policy = make_policy(quota={"max_gpus": 3}, instance_types=["p3.2xlarge"])
    plan = decide({"vision": policy}, fleet(make_node("n1")),
                  snapshot({"n1": busy()}, {"vision/gpu": PoolObservation(pending=pending(1, 1, 1, 1))}), NOW)
    assert launched(plan) == 2
    assert any(isinstance(a, Hold) and "team vision GPU cap 3" in a.reason for a in plan.actions)


def test_team_dollar_quota_caps_launches():
    policy = make_policy(quota={"max_hourly_usd": 7}, instance_types=["p3.2xlarge"])
    plan = decide({"vision": policy}, fleet(),
                  snapshot({}, {"vision/gpu": PoolObservation(pending=pending(1, 1, 1))}), NOW)
    assert launched(plan) == 2  # 2 x 3.06 = 6.12 <= 7 < 9.18


def test_global_cap_served_by_priority():
    high = make_policy("high", "high", pools=[{"name": "gpu", "cloud": "aws", "region": "us-east-1",
                                               "instance_types": ["p3.2xlarge"], "max_nodes": 10}])
    low = make_policy("low", "low", pools=[{"name": "gpu", "cloud": "aws", "region": "us-east-1",
                                             "instance_types": ["p3.2xlarge"], "max_nodes": 10}])
    snap = snapshot({}, {"high/gpu": PoolObservation(pending=pending(1, 1, 1)),
                         "low/gpu": PoolObservation(pending=pending(1, 1, 1))})
    plan = decide({"low": low, "high": high}, fleet(), snap, NOW, settings=EngineSettings(max_gpus=4))
    assert launched(plan, "high/gpu") == 3 and launched(plan, "low/gpu") == 1


def test_higher_priority_reclaims_low_priority_spot_first():
    high = make_policy("high", "high", instance_types=["p3.2xlarge"])
    low = make_policy("low", "low", instance_types=["p3.2xlarge"],
                      scale_down={"max_draining_percent": 100})
    nodes = [make_node("low-od", team="low", market=Market.ON_DEMAND),
             make_node("low-spot", team="low", market=Market.SPOT)]
    obs = {"low-od": busy(), "low-spot": busy()}
    snap = snapshot(obs, {"high/gpu": PoolObservation(pending=pending(1))})
    settings = EngineSettings(max_gpus=2)
    plan = decide({"high": high, "low": low}, fleet(*nodes), snap, NOW, settings=settings)
    preempted = [a for a in plan.actions if isinstance(a, Drain) and a.trigger == "preempted"]
    assert [a.node for a in preempted] == ["low-spot"]
    assert "reclaimed for high/gpu" in preempted[0].reason
    # Idle capacity is reclaimed before busy capacity. (The idle rule keeps it here: the
    # two busy nodes alone would average above the scale-up threshold.)
    nodes.append(make_node("low-idle", team="low", market=Market.SPOT))
    obs["low-idle"] = idle()
    snap = snapshot(obs, {"high/gpu": PoolObservation(pending=pending(1))})
    plan = decide({"high": high, "low": low}, fleet(*nodes), snap, NOW,
                  settings=EngineSettings(max_gpus=3))
    assert [(a.node, a.trigger) for a in plan.actions if isinstance(a, Drain)] == [
        ("low-idle", "preempted")]
    # When the idle rule drains it anyway, that drain makes the room: nothing is preempted.
    obs.update({"low-od": busy(50), "low-spot": busy(50)})
    snap = snapshot(obs, {"high/gpu": PoolObservation(pending=pending(1))})
    plan = decide({"high": high, "low": low}, fleet(*nodes), snap, NOW,
                  settings=EngineSettings(max_gpus=3))
    assert [(a.node, a.trigger) for a in plan.actions if isinstance(a, Drain)] == [("low-idle", "idle")]


def test_preemption_counts_capacity_already_draining():
    high = make_policy("high", "high", instance_types=["p3.2xlarge"])
    low = make_policy("low", "low", instance_types=["p3.2xlarge"])
    nodes = [make_node("a", team="low", market=Market.SPOT),
             make_node("b", team="low", state=NodeState.DRAINING, drain_trigger="preempted")]
    snap = snapshot({"a": busy()}, {"high/gpu": PoolObservation(pending=pending(1))})
    plan = decide({"high": high, "low": low}, fleet(*nodes), snap, NOW, settings=EngineSettings(max_gpus=2))
    assert not any(isinstance(a, Drain) for a in plan.actions)


def test_a_pool_that_just_grew_is_not_preempted_within_its_cooldown():
    high = make_policy("high", "high", instance_types=["p3.2xlarge"])
    low = make_policy("low", "low", instance_types=["p3.2xlarge"])
    nodes = [make_node("a", team="low", market=Market.SPOT)]
    snap = snapshot({"a": busy()}, {"high/gpu": PoolObservation(pending=pending(1))})
    grew = {"low/gpu": PoolHistory(last_scale_up_at=NOW - timedelta(seconds=30))}
    plan = decide({"high": high, "low": low}, fleet(*nodes, history=grew), snap, NOW,
                  settings=EngineSettings(max_gpus=1))
    assert not any(isinstance(a, Drain) for a in plan.actions)  # no flip-flop within a tick
    later = {"low/gpu": PoolHistory(last_scale_up_at=NOW - timedelta(hours=1))}
    plan = decide({"high": high, "low": low}, fleet(*nodes, history=later), snap, NOW,
                  settings=EngineSettings(max_gpus=1))
    assert [(a.node, a.trigger) for a in plan.actions if isinstance(a, Drain)] == [("a", "preempted")]


def test_lowered_quota_sheds_most_expensive_first():
    policy = make_policy(quota={"max_gpus": 1}, scale_down={"max_draining_percent": 100})
    nodes = [make_node("a", market=Market.SPOT), make_node("b", market=Market.ON_DEMAND)]
    plan = decide({"vision": policy}, fleet(*nodes), snapshot({"a": busy(), "b": busy()}), NOW)
    over = [a for a in plan.actions if isinstance(a, Drain) and a.trigger == "over-quota"]
    assert [a.node for a in over] == ["b"]
    assert "holds 2 GPUs" in over[0].reason and "quota 1 GPUs" in over[0].reason


def test_idle_drains_count_towards_a_lowered_quota():
    policy = make_policy(quota={"max_gpus": 1}, scale_down={"max_draining_percent": 100})
    nodes = [make_node("a"), make_node("b")]
    plan = decide({"vision": policy}, fleet(*nodes), snapshot({"a": busy(60), "b": idle()}), NOW)
    assert [(a.node, a.trigger) for a in plan.actions if isinstance(a, Drain)] == [("b", "idle")]


def test_interrupted_busy_spot_node_gets_a_replacement_once():
    policy = make_policy(capacity={"spot_percent": 100, "on_interruption": "on-demand"})
    node = make_node("s1", market=Market.SPOT, state=NodeState.INTERRUPTED)
    plan = decide({"vision": policy}, fleet(node), snapshot({"s1": busy()}), NOW)
    (launch,) = [a for a in plan.actions if isinstance(a, Launch)]
    assert launch.trigger == "interruption" and launch.replaces == ["s1"]
    assert launch.market is Market.ON_DEMAND
    done = dataclasses.replace(node, replacement_requested=True)
    plan = decide({"vision": policy}, fleet(done), snapshot({"s1": busy()}), NOW)
    assert launched(plan) == 0


def test_removed_pool_is_kept_unless_configured():
    node = make_node("x", team="gone", pool="old")
    plan = decide({}, fleet(node), snapshot({"x": idle()}), NOW)
    assert not plan.changes()
    assert any(isinstance(a, Hold) and "drain_removed_pools" in a.reason for a in plan.actions)
    others = {"vision": make_policy()}  # with no policy at all, nothing drains (test_isolation)
    plan = decide(others, fleet(node), snapshot({"x": idle()}), NOW,
                  settings=EngineSettings(drain_removed_pools=True))
    assert [a.node for a in plan.actions if isinstance(a, Drain)] == ["x"]


def test_interrupted_nodes_jobs_are_packed_not_replaced_node_for_node():
    policy = make_policy(capacity={"spot_percent": 100})
    nodes = [make_node(f"s{i}", market=Market.SPOT, state=NodeState.INTERRUPTED, instance_type="p3.8xlarge")
             for i in (1, 2)] + [make_node("free", market=Market.SPOT)]
    obs = {"s1": busy(30, gpus=4, jobs=1), "s2": busy(30, gpus=4, jobs=1), "free": idle()}
    for name in ("s1", "s2"):  # one 1-GPU job on each 4-GPU node
        sched = dataclasses.replace(obs[name].scheduler, jobs=[dataclasses.replace(obs[name].scheduler.jobs[0], gpus=1)])
        obs[name] = dataclasses.replace(obs[name], scheduler=sched)
    plan = decide({"vision": policy}, fleet(*nodes), snapshot(obs), NOW)
    stand_ins = [a for a in plan.actions if isinstance(a, Launch)]
    # One job goes to the free GPU of a serving node, the other to one 1-GPU stand-in.
    assert [(a.instance_type, a.count) for a in stand_ins] == [("p3.2xlarge", 1)]
    assert stand_ins[0].trigger == "interruption" and len(stand_ins[0].replaces) == 1


def test_room_kept_for_an_interrupted_nodes_jobs_is_not_free_for_pending_jobs():
    """Until the reclaim requeues them, an interrupted node's jobs still count on their
    stand-in: a pending job that took its room would lose it to them (they are older)."""
    policy = make_policy(capacity={"spot_percent": 100})
    hit = make_node("s1", market=Market.SPOT, state=NodeState.INTERRUPTED, replacement_requested=True)
    stand_in = make_node("s2", market=Market.SPOT, state=NodeState.BOOTSTRAPPING, ready_for=None,
                         replaces="s1", launched_for="interruption")
    pools = {"vision/gpu": PoolObservation(pending=pending(1.0))}
    plan = decide({"vision": policy}, fleet(hit, stand_in), snapshot({"s1": busy()}, pools), NOW)
    (launch,) = [a for a in plan.actions if isinstance(a, Launch)]
    assert launch.trigger == "pending" and launch.count == 1
    # Once the reclaim took s1 and its job is pending, s2 serves it: nothing more is launched.
    plan = decide({"vision": policy}, fleet(stand_in), snapshot({}, pools), NOW)
    assert launched(plan) == 0
