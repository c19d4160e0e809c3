"""Properties of decide() over random fleets, policies and snapshots (hypothesis)."""

from __future__ import annotations

import dataclasses
import os
import random
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.engine import CancelDrain, Drain, EngineSettings, Launch, Plan, Replace, Terminate, decide
from autoscaler.engine.context import PoolContext, build_contexts
from autoscaler.engine.pricing import Prices
from autoscaler.model.lifecycle import BILLABLE, IN_FLIGHT, TRANSITIONS, NodeState
from autoscaler.model.node import FleetView, Node, PoolHistory
from autoscaler.model.snapshot import (
    GpuMetrics,
    NodeObservation,
    PendingJob,
    PoolObservation,
    RunningJob,
    SchedulerNode,
    Snapshot,
)
from autoscaler.policy.models import Market, TeamPolicy
from tests.builders import NOW

TYPES = ["p3.2xlarge", "p3.8xlarge", "g4dn.xlarge", "g4dn.12xlarge"]
VOLUNTARY = {"idle", "consolidate", "over-quota", "preempted", "over-max", "pool-removed"}
STATES = [s for s in NodeState if s is not NodeState.TERMINATED]


@st.composite
def pools(draw, idx: int) -> dict:
    lo = draw(st.integers(0, 3))
    hi = draw(st.integers(max(lo, 1), 8))
    return {
        "name": f"p{idx}", "cloud": "aws", "region": "us-east-1",
        "instance_types": draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True)),
        "min_nodes": lo, "max_nodes": hi,
        "capacity": {"on_demand_base": draw(st.integers(0, hi)), "spot_percent": draw(st.sampled_from([0, 50, 100])),
                     "spot_fallback": draw(st.sampled_from(["on-demand", "none"]))},
        "scale_up": {"max_step": draw(st.integers(1, 4)), "cooldown": "3m"},
        "scale_down": {"max_draining_percent": draw(st.sampled_from([0, 20, 50, 100])), "cooldown": "5m",
                       "idle_for": "10m", "consolidate_below": draw(st.sampled_from([None, 50, 100]))},
        "schedule": draw(st.sampled_from([[], [{"cron": "0 8 * * *", "min_nodes": lo + 1 if lo < hi else lo,
                                                 "duration": "8h"}]])),
        "lifetime": draw(st.sampled_from([{}, {"max_node_age": "24h"}])),
    }


@st.composite
def teams(draw) -> dict[str, TeamPolicy]:
    out = {}
    for t in range(draw(st.integers(1, 3))):
        quota = draw(st.sampled_from([{}, {"max_gpus": draw(st.integers(0, 24))},
                                      {"max_hourly_usd": draw(st.floats(0, 60))}]))
        out[f"t{t}"] = TeamPolicy.model_validate({
            "team": f"t{t}", "priority": draw(st.sampled_from(["high", "medium", "low"])), "quota": quota,
            "pools": [draw(pools(i)) for i in range(draw(st.integers(1, 2)))],
        })
    return out


@st.composite
def worlds(draw):
    policies = draw(teams())
    nodes, obs = [], {}
    seq = 0
    for policy in policies.values():
        for pool in policy.pools:
            for _ in range(draw(st.integers(0, 6))):
                seq += 1
                name = f"{policy.team}-{pool.name}-{seq}"
                state = draw(st.sampled_from(STATES + [NodeState.READY] * 6))
                age = timedelta(minutes=draw(st.integers(1, 3000)))
                nodes.append(Node(
                    name=name, team=policy.team, pool=pool.name, cloud="aws", region="us-east-1",
                    instance_type=draw(st.sampled_from(pool.instance_types)),
                    market=draw(st.sampled_from(list(Market))), state=state,
                    state_since=NOW - age / 2, created_at=NOW - age,
                    ready_at=None if state in IN_FLIGHT else NOW - age / 2,
                    drain_trigger=draw(st.sampled_from([None, "idle", "unhealthy"])),
                    replacement_requested=draw(st.booleans()),
                ))
                if draw(st.booleans()):
                    util = draw(st.floats(0, 100))
                    jobs = draw(st.integers(0, 2))
                    obs[name] = NodeObservation(
                        metrics=GpuMetrics(util_mean=util, util_max_idle_window=min(100, util + draw(st.floats(0, 20))),
                                           xid_errors=draw(st.sampled_from([0, 0, 0, 1])), sample_age_s=5),
                        metrics_missing=draw(st.sampled_from([None, None, None, "stale"])),
                        scheduler=SchedulerNode(state="mixed", gpus_total=1, gpus_allocated=min(jobs, 1),
                                                jobs=[RunningJob(id=f"{name}-j{i}", gpus=0.5,
                                                                 started_at=NOW - age / 4)
                                                      for i in range(jobs)]),
                    )
    pool_obs = {}
    for policy in policies.values():
        for pool in policy.pools:
            key = f"{policy.team}/{pool.name}"
            pool_obs[key] = PoolObservation(
                pending=[PendingJob(id=f"{key}-{i}", gpus=draw(st.sampled_from([0.25, 0.5, 1, 2, 4])))
                         for i in range(draw(st.integers(0, 5)))],
                metrics_missing=draw(st.sampled_from([None, None, "Prometheus timed out"])),
            )
    history = {}
    for policy in policies.values():
        for pool in policy.pools:
            if draw(st.booleans()):
                history[f"{policy.team}/{pool.name}"] = PoolHistory(
                    last_scale_up_at=NOW - timedelta(minutes=draw(st.integers(0, 60))))
    snap = Snapshot(taken_at=NOW, nodes=obs, pools=pool_obs,
                    missing=draw(st.sampled_from([[], [], ["prometheus"]])))
    limits = EngineSettings(max_gpus=draw(st.sampled_from([None, 10, 40])))
    return policies, FleetView(nodes=nodes, history=history), snap, limits


def contexts(policies, fleet, snap) -> dict[str, PoolContext]:
    ctxs, _ = build_contexts(policies, fleet, snap, NOW, Prices(_catalog(), snap, NOW))
    return {c.key: c for c in ctxs}


def _catalog():
    from autoscaler.catalog import default_catalog
    return default_catalog()


settings.register_profile("default", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
PROPS = settings()


@PROPS
@given(worlds())
def test_launches_respect_max_nodes_and_quotas(world):
    policies, fleet, snap, limits = world
    plan = decide(policies, fleet, snap, NOW, settings=limits)
    ctxs = contexts(policies, fleet, snap)
    prices = Prices(_catalog(), snap, NOW)
    for key, ctx in ctxs.items():
        new = sum(a.count for a in plan.actions if isinstance(a, Launch) and a.pool == key)
        if new:
            assert len(ctx.active) + new <= ctx.pool.max_nodes
    for team, policy in policies.items():
        new_actions = [a for a in plan.actions if isinstance(a, Launch) and a.pool.startswith(team + "/")]
        reps = [a for a in plan.actions if isinstance(a, Replace) and a.pool.startswith(team + "/")]
        if not new_actions and not reps:
            continue
        held = [n for c in ctxs.values() if c.team == team for n in c.billable()]
        # node_cost, as the quota counts: a stopped warm node offers no GPU, bills its volume
        gpus = sum(prices.node_cost(n)[0] for n in held) + sum(a.count * a.gpus_per_node for a in new_actions)
        usd = sum(prices.node_hourly(n) for n in held) + sum(a.count * a.hourly_usd for a in new_actions)
        for r in reps:
            node = next(n for n in held if n.name == r.node)
            gpus += prices.node_gpus(node)
            usd += prices.node_hourly(node)
        if policy.quota.max_gpus is not None:
            assert gpus <= policy.quota.max_gpus
        if policy.quota.max_hourly_usd is not None:
            assert usd <= policy.quota.max_hourly_usd + 1e-6


def test_a_stopped_warm_node_holds_no_gpu_of_the_quota():
    """The case hypothesis found (CI, 2026-12-05): a quota of 5 GPUs, a TERMINATING 4-GPU
    node and a WARM (stopped) one of 4. The stopped one offers no GPU, so the pool's floor
    of 1 launches a 1-GPU node: 4 + 0 + 1 <= 5."""
    from tests.builders import make_node, make_policy

    policy = make_policy(team="t0", quota={"max_gpus": 5}, min_nodes=1, max_nodes=1,
                         instance_types=["p3.8xlarge", "p3.2xlarge"], capacity={"spot_percent": 0})
    nodes = [make_node("t0-gpu-1", "t0", instance_type="p3.8xlarge", state=NodeState.TERMINATING),
             make_node("t0-gpu-2", "t0", instance_type="p3.8xlarge", state=NodeState.WARM)]
    snap = Snapshot(taken_at=NOW, pools={"t0/gpu": PoolObservation()})
    plan = decide({"t0": policy}, FleetView(nodes=nodes), snap, NOW)
    [launch] = [a for a in plan.actions if isinstance(a, Launch)]
    assert (launch.instance_type, launch.count) == ("p3.2xlarge", 1)
    prices = Prices(_catalog(), snap, NOW)
    assert [prices.node_cost(n)[0] for n in nodes] == [4, 0]


@PROPS
@given(worlds())
def test_never_drains_below_floor_nor_without_data(world):
    policies, fleet, snap, limits = world
    plan = decide(policies, fleet, snap, NOW, settings=limits)
    for key, ctx in contexts(policies, fleet, snap).items():
        voluntary = [a for a in plan.actions if isinstance(a, Drain) and a.pool == key and a.trigger in VOLUNTARY]
        if ctx.data_missing:
            assert voluntary == []
        if voluntary:
            assert len(ctx.active) - len(voluntary) >= min(ctx.floor, len(ctx.active))


@PROPS
@given(worlds(), st.randoms(use_true_random=False))
def test_same_input_same_plan_whatever_the_order(world, rnd: random.Random):
    policies, fleet, snap, limits = world
    first = decide(policies, fleet, snap, NOW, settings=limits)
    nodes = list(fleet.nodes)
    rnd.shuffle(nodes)
    shuffled = dict(rnd.sample(sorted(policies.items()), len(policies)))
    again = decide(shuffled, FleetView(nodes=nodes, history=fleet.history), snap, NOW, settings=limits)
    assert first.model_dump() == again.model_dump()


@PROPS
@given(worlds())
def test_actions_name_only_known_nodes_in_legal_states(world):
    policies, fleet, snap, limits = world
    plan = decide(policies, fleet, snap, NOW, settings=limits)
    by_name = {n.name: n for n in fleet.nodes}
    touched = []
    for a in plan.actions:
        node = getattr(a, "node", None)
        if node is None or a.kind == "hold":
            continue
        assert node in by_name
        state = by_name[node].state
        if isinstance(a, Drain | Replace):
            assert NodeState.DRAINING in TRANSITIONS[state] or state is NodeState.REQUESTED
        if isinstance(a, CancelDrain):
            assert state in (NodeState.DRAINING, NodeState.DRAINED)
        if isinstance(a, Terminate):
            assert NodeState.TERMINATING in TRANSITIONS[state]
        if not isinstance(a, CancelDrain) and a.kind != "report_job":
            touched.append(node)
    dupes = {n for n in touched if touched.count(n) > 1}
    assert not dupes, [(a.kind, a.reason) for a in plan.actions if getattr(a, "node", None) in dupes]
    for a in plan.actions:
        if isinstance(a, Launch):
            for name in a.replaces:
                assert by_name[name].state in BILLABLE


def apply_effect(fleet: FleetView, plan: Plan) -> FleetView:
    """What the executor would write to the store right after the plan."""
    nodes = {n.name: n for n in fleet.nodes}
    history = dict(fleet.history)
    for a in plan.actions:
        if isinstance(a, Launch | Replace):
            team, pool = a.pool.split("/")
            count = a.count if isinstance(a, Launch) else 1
            for i in range(count):
                name = f"new-{a.pool}-{len(nodes)}-{i}"
                nodes[name] = Node(name=name, team=team, pool=pool, cloud="aws", region="us-east-1",
                                   zone=a.zone, instance_type=a.instance_type, market=a.market,
                                   state=NodeState.REQUESTED, state_since=NOW, created_at=NOW)
            if isinstance(a, Launch):
                for r in a.replaces:
                    nodes[r] = dataclasses.replace(nodes[r], replacement_requested=True)
            history[a.pool] = PoolHistory(last_scale_up_at=NOW,
                                          last_scale_down_at=history.get(a.pool, PoolHistory()).last_scale_down_at)
        if isinstance(a, Drain | Replace):
            trigger = a.trigger
            node = nodes[a.node]
            new_state = NodeState.TERMINATING if node.state is NodeState.REQUESTED else NodeState.DRAINING
            nodes[a.node] = dataclasses.replace(node, state=new_state, drain_trigger=trigger,
                                                replacement_requested=isinstance(a, Replace))
            history[a.pool] = PoolHistory(last_scale_up_at=history.get(a.pool, PoolHistory()).last_scale_up_at,
                                          last_scale_down_at=NOW)
        if isinstance(a, CancelDrain):
            nodes[a.node] = dataclasses.replace(nodes[a.node], state=NodeState.READY, drain_trigger=None)
        if isinstance(a, Terminate):
            nodes[a.node] = dataclasses.replace(nodes[a.node], state=NodeState.TERMINATING)
    return FleetView(nodes=list(nodes.values()), history=history)


@PROPS
@given(worlds())
def test_deciding_again_within_the_cooldown_does_not_reverse(world):
    policies, fleet, snap, limits = world
    first = decide(policies, fleet, snap, NOW, settings=limits)
    later = NOW + timedelta(seconds=30)
    second = decide(policies, apply_effect(fleet, first), snap.model_copy(update={"taken_at": later}), later,
                    settings=limits)
    drained = {a.node for a in first.actions if isinstance(a, Drain)}
    undrained = {a.node for a in first.actions if isinstance(a, CancelDrain)}
    grown = {a.pool for a in first.actions if isinstance(a, Launch)}
    # Shedding nodes above max_nodes corrects the size to the policy; a later launch then
    # only refills what another rule (an unhealthy node) took, so it is not a reversal.
    shrunk = {a.pool for a in first.actions
              if isinstance(a, Drain) and a.trigger in VOLUNTARY - {"over-max", "pool-removed"}}
    for a in second.actions:
        if isinstance(a, CancelDrain):
            assert a.node not in drained, a.reason
        if isinstance(a, Drain):
            assert a.node not in undrained, a.reason
            if a.trigger in VOLUNTARY - {"over-max", "pool-removed"}:
                assert a.pool not in grown, a.reason
        if isinstance(a, Launch) and a.trigger in ("utilization", "pending"):
            assert a.pool not in shrunk, (a.reason, [b.reason for b in first.actions if b.pool == a.pool])
