"""Broken nodes found on absence-shaped evidence (the scheduler calls them unusable or does
not list them, or they are silent) are replaced within their pool's scale-down budget
(max_draining_percent), longest broken first, the rest held with the numbers; positive
fault counters are not held back by it (audit F1: a whole pool of 10 missing from the
scheduler's listing was 10 Replace in one tick, under the fleet-wide 45%)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from autoscaler.engine import Hold, Replace, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Action, Drain
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, SchedulerNode
from tests.builders import NOW, busy, fleet, make_node, make_policy, make_pool_dict, snapshot

P38 = "p3.8xlarge"


def absent_from_scheduler(minutes: float = 11) -> NodeObservation:
    """What signals/reader.py ``_with_absent`` writes for a READY node its scheduler did not list."""
    return dataclasses.replace(busy(gpus=4), scheduler=SchedulerNode(
        state="unknown", ready=False, gpus_total=0, gpus_allocated=0,
        unusable="slurm does not list it", unusable_since=NOW - timedelta(minutes=minutes)))


def silent(age_s: float = 600) -> NodeObservation:
    return NodeObservation(metrics=GpuMetrics(sample_age_s=age_s, gpus_reporting=4),
                           metrics_missing="no sample", metrics_silent=True,
                           scheduler=busy(gpus=4).scheduler)


def xid() -> NodeObservation:
    base = busy(gpus=4)
    assert base.metrics is not None
    return dataclasses.replace(base, metrics=dataclasses.replace(base.metrics, xid_errors=2))


def three_pools(pool_a: dict[str, NodeObservation], *, draining: int = 0, **pool_kw: object):
    """Pools a, b, c of 10 busy p3.8xlarge nodes each (a0..a9, ...); ``pool_a`` overrides
    pool a's observations; ``draining`` more DRAINING nodes in pool a."""
    pools = [make_pool_dict(name=p, instance_types=[P38], max_nodes=100, **pool_kw) for p in "abc"]
    nodes, obs = [], {}
    for p in "abc":
        for i in range(10):
            name = f"{p}{i}"
            nodes.append(make_node(name, pool=p, instance_type=P38))
            obs[name] = pool_a.get(name, busy(gpus=4))
    nodes += [make_node(f"a-draining{i}", pool="a", instance_type=P38, state=NodeState.DRAINING)
              for i in range(draining)]
    return decide({"vision": make_policy(pools=pools)}, fleet(*nodes), snapshot(obs), NOW)


def removals(actions: list[Action], pool: str = "vision/a") -> list[str]:
    return sorted(a.node for a in actions if isinstance(a, (Replace, Drain)) and a.pool == pool)


def budget_hold(actions: list[Action], pool: str = "vision/a") -> str:
    [hold] = [a.reason for a in actions if isinstance(a, Hold) and a.pool == pool
              and "broken node(s) replaced this tick" in a.reason]
    return hold


def test_a_pool_absent_from_its_scheduler_is_replaced_within_its_budget() -> None:
    plan = three_pools({f"a{i}": absent_from_scheduler() for i in range(10)})
    assert removals(plan.actions) == ["a0", "a1"]  # 20% of 10
    assert not removals(plan.actions, "vision/b") and not removals(plan.actions, "vision/c")
    hold = budget_hold(plan.actions)
    assert hold.startswith("vision/a: 2 of 10 broken node(s) replaced this tick, 8 kept "
                           "(a2, a3, a4, a5, a6 ...): max_draining_percent 20 of 10 node(s) "
                           "lets 2 leave at once, 0 already draining")
    assert "longest broken first" in hold
    # Counted for /status and the broken_nodes_waiting gauge; not the fleet-wide hold.
    assert (plan.pools["vision/a"].broken_waiting, plan.pools["vision/a"].broken_held) == (8, 0)
    assert plan.pools["vision/b"].broken_waiting == 0


def test_a_silent_pool_is_replaced_within_its_budget() -> None:
    plan = three_pools({f"a{i}": silent() for i in range(10)})
    assert removals(plan.actions) == ["a0", "a1"]
    assert "2 of 10 broken node(s) replaced this tick, 8 kept" in budget_hold(plan.actions)


def test_the_longest_broken_go_first() -> None:
    said = {f"a{i}": absent_from_scheduler(minutes=11 + i) for i in range(6)}
    said["a7"] = silent(age_s=3600)  # silent for an hour: the longest of all
    plan = three_pools(said)
    assert removals(plan.actions) == ["a5", "a7"]
    assert "kept (a0, a1, a2, a3, a4)" in budget_hold(plan.actions)


def test_nodes_already_draining_spend_the_budget() -> None:
    plan = three_pools({f"a{i}": absent_from_scheduler() for i in range(10)}, draining=2)
    assert removals(plan.actions) == []
    assert ("0 of 10 broken node(s) replaced this tick, 10 kept (a0, a1, a2, a3, a4 ...): "
            "max_draining_percent 20 of 12 node(s) lets 2 leave at once, 2 already draining"
            ) in budget_hold(plan.actions)


def test_a_larger_budget_lets_more_go() -> None:
    plan = three_pools({f"a{i}": absent_from_scheduler() for i in range(10)},
                       scale_down={"max_draining_percent": 50})
    assert removals(plan.actions) == [f"a{i}" for i in range(5)]


def test_fault_counters_are_not_held_back_but_spend_the_budget_first() -> None:
    said = {f"a{i}": xid() for i in range(3)} | {f"a{i}": absent_from_scheduler() for i in range(3, 6)}
    plan = three_pools(said)
    assert removals(plan.actions) == ["a0", "a1", "a2"]  # all three XID, over the 2 of 20%
    hold = budget_hold(plan.actions)
    assert "0 of 3 broken node(s) replaced this tick, 3 kept (a3, a4, a5)" in hold
    assert "3 with fault counters first" in hold


def test_within_the_budget_nothing_is_held() -> None:
    plan = three_pools({"a0": absent_from_scheduler(), "a1": silent()})
    assert removals(plan.actions) == ["a0", "a1"]
    assert not [a for a in plan.actions if isinstance(a, Hold) and "broken" in a.reason]
    assert plan.pools["vision/a"].broken_waiting == 0
