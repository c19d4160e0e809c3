"""Consolidation: a fragmented node whose jobs fit elsewhere is drained (opt-in)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from autoscaler.engine import Drain, Replace, decide
from autoscaler.model.node import PoolHistory
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, PoolObservation, RunningJob, SchedulerNode
from autoscaler.policy.models import Market
from tests.builders import NOW, fleet, make_node, make_policy, pending, snapshot, spot_refusal

KEY = "vision/gpu"
P38 = "p3.8xlarge"  # 4 GPUs


def on(total: int, *jobs: float, started: timedelta = timedelta(hours=2), util: float = 30.0) -> NodeObservation:
    return NodeObservation(
        metrics=GpuMetrics(util_mean=util, util_max_idle_window=util, util_max=util, gpus_reporting=total,
                           sample_age_s=5),
        scheduler=SchedulerNode(
            state="mixed" if sum(jobs) < total else "allocated", gpus_total=total, gpus_allocated=sum(jobs),
            jobs=[RunningJob(id=f"j{i}-{g}", gpus=g, started_at=NOW - started) for i, g in enumerate(jobs)]))


def policy(**scale_down):
    return make_policy(instance_types=[P38], scale_up={"gpu_utilization_above": 90},
                       scale_down={"consolidate_below": 50, "max_draining_percent": 50, **scale_down})


def consolidations(plan) -> list[Drain]:
    return [a for a in plan.actions if isinstance(a, Drain) and a.trigger == "consolidate"]


def run(pol, obs, history=None, pools=None):
    nodes = [make_node(n, instance_type=P38) for n in obs]
    return decide({pol.team: pol}, fleet(*nodes, history=history), snapshot(obs, pools=pools), NOW)


def test_fragmented_node_is_drained_when_its_jobs_fit_elsewhere():
    plan = run(policy(), {"a": on(4, 1, 1), "b": on(4, 1)})
    (drain,) = consolidations(plan)
    assert drain.node == "b"  # the newest of equal price goes first; a keeps 2 free for b's job
    assert "1 of 4 GPUs allocated (25% < 50%)" in drain.reason
    assert "fit on free GPUs of a" in drain.reason and "requeued after 2m" in drain.reason


def test_off_by_default():
    pol = make_policy(instance_types=[P38], scale_up={"gpu_utilization_above": 90})
    assert consolidations(run(pol, {"a": on(4, 1, 1), "b": on(4, 1)})) == []


def test_not_when_the_jobs_do_not_fit_on_other_nodes():
    assert consolidations(run(policy(), {"a": on(4, 1, 1, 1), "b": on(4, 1, 0.5)})) == []


def test_shares_count_as_whole_gpus_when_checking_room():
    # a's six half-GPU shares (3 GPUs' worth) may sit on all four GPUs: none is surely
    # free for b's whole-GPU job, although a has one GPU's worth of room.
    assert consolidations(run(policy(), {"a": on(4, *[0.5] * 6), "b": on(4, 1)})) == []


def test_recently_started_jobs_are_left_to_settle():
    obs = {"a": on(4, 1), "b": on(4, 1, started=timedelta(minutes=3))}
    (drain,) = consolidations(run(policy(), obs))
    assert drain.node == "a"


def test_a_job_started_before_its_node_was_created_is_not_known_to_have_settled():
    """The nodes are 2h old: a start 3h ago is no start (unknown), so b is not moved (a's
    job has just started: not moved either)."""
    fresh = on(4, 1, started=timedelta(minutes=3))
    assert consolidations(run(policy(), {"a": fresh, "b": on(4, 1, started=timedelta(hours=3))})) == []
    (drain,) = consolidations(run(policy(), {"a": fresh, "b": on(4, 1, started=timedelta(hours=2))}))
    assert drain.node == "b"
    # 90 s before the node, as a scheduler's whole seconds or its clock give it: believed
    # (SKEW, as the survey does), not unknown for ever.
    skewed = on(4, 1, started=timedelta(hours=2, seconds=90))
    (drain,) = consolidations(run(policy(), {"a": fresh, "b": skewed}))
    assert drain.node == "b"


def test_one_node_per_pool_per_tick():
    obs = {"a": on(4, 1), "b": on(4, 1), "c": on(4, 1), "d": on(4)}
    assert len(consolidations(run(policy(max_draining_percent=100), obs))) == 1


def test_not_while_jobs_are_pending_or_within_the_cooldown():
    obs = {"a": on(4, 1, 1), "b": on(4, 1)}
    assert consolidations(run(policy(), obs, pools={KEY: PoolObservation(pending=pending(4))})) == []
    history = {KEY: PoolHistory(last_scale_down_at=NOW - timedelta(minutes=1))}
    assert consolidations(run(policy(), obs, history=history)) == []


def test_not_when_the_rest_would_cross_the_scale_up_threshold():
    # 2 nodes at 60% mean: one node would have to carry 120% > 90%.
    assert consolidations(run(policy(), {"a": on(4, 1, util=60), "b": on(4, 1, util=60)})) == []


def test_not_when_scheduler_data_is_missing():
    pol = make_policy(instance_types=[P38], cluster={"kind": "slurm"},
                      scale_down={"consolidate_below": 50, "max_draining_percent": 50},
                      scale_up={"gpu_utilization_above": 90})
    obs = {"a": on(4, 1, 1), "b": on(4, 1)}
    pools = {KEY: PoolObservation(scheduler_missing="squeue timed out")}
    assert consolidations(run(pol, obs, pools=pools)) == []


def test_jobs_are_not_moved_onto_a_node_due_for_replacement():
    obs = {"a": on(4, 1, 1), "b": on(4, 1)}
    obs["a"] = dataclasses.replace(obs["a"], metrics=dataclasses.replace(obs["a"].metrics, xid_errors=1))
    assert consolidations(run(policy(), obs)) == []


def test_jobs_that_fit_nowhere_else_move_to_a_cheaper_type():
    pol = make_policy(instance_types=["p3.2xlarge", P38], scale_up={"gpu_utilization_above": 90},
                      scale_down={"consolidate_below": 50, "max_draining_percent": 50})
    obs = {"a": on(4, 1, 1, 1, 1), "b": on(4, 1)}  # a is full: b's job fits nowhere
    plan = run(pol, obs)
    (replace,) = [a for a in plan.actions if isinstance(a, Replace)]
    assert replace.node == "b" and replace.instance_type == "p3.2xlarge" and replace.trigger == "consolidate"
    assert "fit on one p3.2xlarge" in replace.reason and "instead of p3.8xlarge at $12.24/h" in replace.reason


def test_no_replacement_when_no_type_is_cheaper():
    obs = {"a": on(4, 1, 1, 1, 1), "b": on(4, 1)}  # the pool offers only p3.8xlarge
    plan = run(policy(), obs)
    assert not [a for a in plan.actions if isinstance(a, Replace)] and consolidations(plan) == []


def test_a_fallback_node_that_may_return_to_spot_is_not_replaced_by_on_demand():
    def plan_with(return_to_spot):
        pol = make_policy(instance_types=["p3.2xlarge", P38], scale_up={"gpu_utilization_above": 90},
                          scale_down={"consolidate_below": 50, "max_draining_percent": 50},
                          capacity={"spot_fallback": "on-demand", "return_to_spot": return_to_spot})
        obs = {"a": on(4, 1, 1, 1, 1), "b": on(4, 1)}
        nodes = [make_node("a", instance_type=P38), make_node("b", instance_type=P38, fallback_from_spot=True)]
        return decide({pol.team: pol}, fleet(*nodes), snapshot(obs), NOW)

    # its on-demand replacement would carry no fallback mark and stay on-demand for good
    assert not [a for a in plan_with({"after": "1h"}).actions if isinstance(a, Replace)]
    assert [a.node for a in plan_with(None).actions if isinstance(a, Replace)] == ["b"]


def test_while_spot_is_scarce_only_on_demand_nodes_are_consolidated():
    zones = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
    pol = make_policy(instance_types=[P38], zones=zones, scale_up={"gpu_utilization_above": 90},
                      scale_down={"consolidate_below": 50, "max_draining_percent": 50},
                      capacity={"spot_percent": 50, "spot_scarcity": {"zones": 3}})
    errors = [spot_refusal(zone, P38, ago=timedelta(minutes=5)) for zone in zones[:3]]
    obs = {"a": on(4, 1, 1), "b": on(4, 1)}

    def plan(b_market: Market):
        nodes = [make_node("a", instance_type=P38, market=Market.SPOT, zone="us-east-1a"),
                 make_node("b", instance_type=P38, market=b_market, zone="us-east-1b")]
        return decide({pol.team: pol}, fleet(*nodes), snapshot(obs, capacity_errors=errors), NOW)

    # b is spot: it could not be bought back during the outage, so its job stays there.
    assert consolidations(plan(Market.SPOT)) == []
    # b is on-demand: it can be, so it is consolidated as usual onto a's free GPUs.
    assert [d.node for d in consolidations(plan(Market.ON_DEMAND))] == ["b"]
