"""Scale-down: idle, ordering, floors, budgets, cooldowns, missing data freezes it."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from autoscaler.engine import Drain, Hold, Launch, Replace, Terminate, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import PoolHistory
from autoscaler.model.snapshot import NodeObservation, PoolObservation, SpotScore
from autoscaler.policy.models import Market
from tests.builders import NOW, busy, fleet, idle, make_node, make_policy, snapshot, spot_refusal

KEY = "vision/gpu"


def drains(plan) -> list[str]:
    return [a.node for a in plan.actions if isinstance(a, Drain)]


def run(policy, nodes, obs, history=None, **snap):
    return decide({policy.team: policy}, fleet(*nodes, history=history), snapshot(obs, **snap), NOW)


def test_idle_node_is_drained_with_reason():
    plan = run(make_policy(), [make_node("n1"), make_node("n2")], {"n1": idle(2), "n2": busy(70)})
    assert drains(plan) == ["n1"]
    (drain,) = [a for a in plan.actions if isinstance(a, Drain)]
    assert drain.trigger == "idle"
    assert "2% < 10%" in drain.reason and "15m" in drain.reason


def test_node_with_jobs_or_recent_boot_is_not_idle():
    nodes = [make_node("n1", ready_for=timedelta(minutes=5)), make_node("n2")]
    obs = {"n1": idle(), "n2": idle()}
    obs["n2"] = dataclasses.replace(obs["n2"], scheduler=busy().scheduler)
    assert drains(run(make_policy(), nodes, obs)) == []


def test_most_expensive_per_gpu_first():
    policy = make_policy(scale_down={"max_draining_percent": 34}, instance_types=["p3.2xlarge", "g4dn.xlarge"])
    nodes = [make_node("cheap", instance_type="g4dn.xlarge"), make_node("dear"), make_node("x")]
    plan = run(policy, nodes, {"cheap": idle(), "dear": idle(), "x": busy()})
    assert drains(plan) == ["dear"]


def test_on_demand_base_nodes_go_last():
    policy = make_policy(capacity={"on_demand_base": 1, "spot_percent": 100},
                         scale_down={"max_draining_percent": 50})
    nodes = [make_node("od", market=Market.ON_DEMAND), make_node("spot", market=Market.SPOT)]
    assert drains(run(policy, nodes, {"od": idle(), "spot": idle()})) == ["spot"]


def test_never_below_min_nodes_or_schedule_floor():
    nodes = [make_node(f"n{i}") for i in range(3)]
    obs = {f"n{i}": idle() for i in range(3)}
    plan = run(make_policy(min_nodes=3), nodes, obs)
    assert drains(plan) == []
    assert any(isinstance(a, Hold) and "floor" in a.reason for a in plan.actions)
    sched = make_policy(schedule=[{"cron": "0 8 * * *", "min_nodes": 3, "duration": "10h"}])
    assert drains(run(sched, nodes, obs)) == []  # NOW is 12:00 UTC, inside 08:00-18:00


def test_max_draining_percent_limits_concurrent_drains():
    policy = make_policy(scale_down={"max_draining_percent": 20})
    nodes = [make_node(f"n{i}") for i in range(10)]
    plan = run(policy, nodes, {f"n{i}": idle() for i in range(10)})
    assert len(drains(plan)) == 2
    [hold] = [a.reason for a in plan.actions if isinstance(a, Hold)]
    assert hold.endswith("8 idle node(s) kept: max_draining_percent 20 of 10 node(s) lets 2 "
                         "leave at once, 0 already draining, 2 more this tick"), hold
    nodes[0] = make_node("n0", state=NodeState.DRAINING, drain_trigger="idle")
    plan = run(policy, nodes, {f"n{i}": idle() for i in range(10)})
    assert len(drains(plan)) == 1
    assert [a.reason.split(": ", 1)[1] for a in plan.actions if isinstance(a, Hold)] == [
        "8 idle node(s) kept: max_draining_percent 20 of 10 node(s) lets 2 leave at once, "
        "1 already draining, 1 more this tick"]


def test_scale_down_cooldown_after_scale_up():
    history = {KEY: PoolHistory(last_scale_up_at=NOW - timedelta(minutes=3))}
    plan = run(make_policy(), [make_node("n1")], {"n1": idle()}, history=history)
    assert drains(plan) == []
    assert any(isinstance(a, Hold) and "cooldown" in a.reason for a in plan.actions)


def test_missing_pool_metrics_freeze_scale_down():
    plan = run(make_policy(), [make_node("n1")], {"n1": idle()},
               pools={KEY: PoolObservation(metrics_missing="Prometheus timed out")})
    assert drains(plan) == []
    (hold,) = [a for a in plan.actions if isinstance(a, Hold)]
    assert "frozen" in hold.reason and "Prometheus timed out" in hold.reason


def test_prometheus_missing_globally_freezes_every_pool():
    plan = run(make_policy(), [make_node("n1")], {"n1": idle()}, missing=["prometheus"])
    assert drains(plan) == []


def test_stale_node_is_not_a_candidate():
    obs = {"n1": dataclasses.replace(idle(), metrics_missing="no sample for 300s")}
    assert drains(run(make_policy(), [make_node("n1")], obs)) == []


def test_no_metrics_means_not_idle():
    assert drains(run(make_policy(), [make_node("n1")], {"n1": NodeObservation()})) == []


def test_slurm_pool_needs_scheduler_evidence():
    policy = make_policy(cluster={"kind": "slurm"})
    obs = {"n1": dataclasses.replace(idle(), scheduler=None)}
    assert drains(run(policy, [make_node("n1")], obs)) == []


def test_pending_demand_blocks_idle_scale_down():
    from tests.builders import pending
    plan = run(make_policy(), [make_node("n1")], {"n1": idle()},
               pools={KEY: PoolObservation(pending=pending(1))})
    assert drains(plan) == []


def test_drained_nodes_are_terminated_and_failed_nodes_cleaned_up():
    nodes = [make_node("d", state=NodeState.DRAINED, drain_trigger="idle"),
             make_node("f", state=NodeState.PROVISION_FAILED, reason="InsufficientInstanceCapacity")]
    plan = run(make_policy(), nodes, {})
    terms = {a.node: a.reason for a in plan.actions if isinstance(a, Terminate)}
    assert set(terms) == {"d", "f"}
    assert "InsufficientInstanceCapacity" in terms["f"]


def test_over_max_sheds_in_flight_then_idle():
    policy = make_policy(max_nodes=2, scale_down={"max_draining_percent": 100})
    nodes = [make_node("a"), make_node("b"), make_node("c"), make_node("new", state=NodeState.REQUESTED)]
    plan = run(policy, nodes, {"a": busy(), "b": idle(), "c": busy()})
    assert {a.node for a in plan.actions if isinstance(a, Terminate)} == {"new"}
    assert drains(plan) == ["b"]
    assert not any(isinstance(a, Launch) for a in plan.actions)


def test_the_last_idle_node_goes_when_min_nodes_is_zero():
    plan = run(make_policy(), [make_node("n1")], {"n1": idle(3)})
    assert drains(plan) == ["n1"]


def test_idle_node_is_kept_when_the_rest_would_cross_the_scale_up_threshold():
    plan = run(make_policy(), [make_node("n1"), make_node("n2")], {"n1": idle(2), "n2": busy(95)})
    assert drains(plan) == []
    [hold] = [a.reason for a in plan.actions if isinstance(a, Hold)]
    # n2 at 95% alone needs 2 nodes to average under 80%: the numbers, not only the rule
    assert hold.endswith("1 idle node(s) kept: the busy nodes' load needs 2 node(s) to average "
                         "under the scale-up threshold (80%), 2 left"), hold


def test_idle_spot_nodes_and_their_consolidation_wait_while_spot_is_refused_in_enough_zones():
    zones = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
    policy = make_policy(zones=zones, scale_down={"consolidate_below": 50}, capacity={
        "spot_percent": 100, "spot_scarcity": {"zones": 3, "within": "30m"}})
    nodes = [make_node("n1", market=Market.SPOT, zone="us-east-1a"),
             make_node("n2", market=Market.SPOT, zone="us-east-1b")]
    obs = {"n1": idle(2), "n2": busy(70)}
    # Three zones refused spot within 30 minutes, by either type (one of them twice): held,
    # and the reason names each zone's newest refusal and the rule.
    errors = [spot_refusal("us-east-1a", ago=timedelta(minutes=25)),
              spot_refusal("us-east-1b", ago=timedelta(minutes=2)),
              spot_refusal("us-east-1c", "p3.8xlarge", ago=timedelta(minutes=12)),
              spot_refusal("us-east-1c", ago=timedelta(minutes=14))]
    plan = run(policy, nodes, obs, capacity_errors=errors)
    assert drains(plan) == []
    (hold,) = [a for a in plan.actions if isinstance(a, Hold) and a.what == "scale-down"]
    assert hold.reason == (
        f"{KEY}: 1 idle spot node(s) kept and spot nodes are not consolidated: spot refused "
        "in 3 of 4 zone(s) within 30m (us-east-1b at 11:58:00, us-east-1c at 11:48:00, "
        "us-east-1a at 11:35:00; capacity.spot_scarcity from 3): a spot node removed now may "
        "not come back before the outage ends")
    # An idle on-demand node (a fallback's) is not kept: on-demand can be bought back.
    with_od = [*nodes, make_node("od", zone="us-east-1c")]
    assert drains(run(policy, with_od, {**obs, "od": idle(1)}, capacity_errors=errors)) == ["od"]
    # Not enough zones: a refusal past the window, one on-demand, one in another region, one
    # of a type outside the pool: the idle node goes as usual.
    stale = [errors[1], errors[2], spot_refusal("us-east-1a", ago=timedelta(minutes=31)),
             errors[0].model_copy(update={"market": Market.ON_DEMAND}),
             spot_refusal("us-east-1d", region="us-west-2"),
             spot_refusal("us-east-1d", "p3.16xlarge")]
    assert drains(run(policy, nodes, obs, capacity_errors=stale)) == ["n1"]
    # Off by default, and with keep_idle false: the same refusals hold nothing.
    plain = make_policy(zones=zones, capacity={"spot_percent": 100})
    assert drains(run(plain, nodes, obs, capacity_errors=errors)) == ["n1"]
    lets_go = make_policy(zones=zones, capacity={"spot_percent": 100, "spot_scarcity": {
        "zones": 3, "keep_idle": False}})
    assert drains(run(lets_go, nodes, obs, capacity_errors=errors)) == ["n1"]
    # No idle node: the Hold is consolidation's alone.
    (hold,) = [a for a in run(policy, nodes, {"n1": busy(30), "n2": busy(70)},
                              capacity_errors=errors).actions if isinstance(a, Hold)]
    assert hold.reason.startswith(
        f"{KEY}: spot nodes are not consolidated: spot refused in 3 of 4 zone(s)")


def test_zones_scored_low_for_spot_count_as_scarce_with_the_refused_ones():
    zones = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
    policy = make_policy(zones=zones, capacity={
        "spot_percent": 100, "spot_scarcity": {"zones": 3, "within": "30m"}})
    types = list(policy.pools[0].instance_types)

    def score(zone: str, value: int) -> SpotScore:
        return SpotScore(cloud="aws", region="us-east-1", zone=zone, instance_types=types, score=value)

    nodes = [make_node("n1", market=Market.SPOT, zone="us-east-1a")]
    obs = {"n1": idle(2)}
    # One refusal and two zones scored low: three of four, held; the reason names both kinds.
    plan = run(policy, nodes, obs, capacity_errors=[spot_refusal("us-east-1a", ago=timedelta(minutes=5))],
               spot_scores=[score("us-east-1b", 2), score("us-east-1c", 3), score("us-east-1d", 8)])
    assert drains(plan) == []
    (hold,) = [a for a in plan.actions if isinstance(a, Hold) and a.what == "scale-down"]
    assert ("spot refused in 1 of 4 zone(s) within 30m (us-east-1a at 11:55:00; scored low: "
            "us-east-1b 2/10, us-east-1c 3/10; capacity.spot_scarcity from 3)") in hold.reason
    # Scores alone can hold too; a score above the low third is no evidence.
    low = [score(z, 1) for z in zones[:3]]
    (hold,) = [a for a in run(policy, nodes, obs, spot_scores=low).actions if isinstance(a, Hold)]
    assert "spot placement scored low in 3 of 4 zone(s) (us-east-1a 1/10, us-east-1b 1/10" in hold.reason
    fine = [score(z, 4) for z in zones]
    assert drains(run(policy, nodes, obs, spot_scores=fine)) == ["n1"]


def test_a_pool_with_no_scale_down_to_hold_gets_no_hold_and_replacements_go_on():
    policy = make_policy(zones=["us-east-1a", "us-east-1b"], lifetime={"max_node_age": "24h"},
                         capacity={"spot_percent": 100, "spot_scarcity": {"zones": 2}})
    nodes = [make_node("old", market=Market.SPOT, zone="us-east-1a", age=timedelta(hours=30)),
             make_node("n2", market=Market.SPOT, zone="us-east-1b")]
    errors = [spot_refusal(zone, ago=timedelta(minutes=5)) for zone in ("us-east-1a", "us-east-1b")]
    plan = run(policy, nodes, {"old": busy(70), "n2": busy(70)}, capacity_errors=errors)
    # No idle node and no consolidation: nothing to hold, so no Hold; max_node_age still
    # replaces, since a replacement removes no capacity.
    [replace] = plan.actions
    assert isinstance(replace, Replace) and (replace.node, replace.trigger) == ("old", "expired")
