"""One interpreter of a Plan (fleet/intents.py): stable action keys, typed intents, and
the cooldown decision the store and the simulator both record from. Fed the same plan
sequence, the service (executor + store) and the simulator's engine strategy keep the
same cooldown history."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from autoscaler.catalog import default_catalog
from autoscaler.fleet.intents import NewNode, Refused, StartDrain, action_keys, interpret
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import PoolHistory
from autoscaler.model.plan import Action, CancelDrain, Hold, Plan, Replace
from autoscaler.policy.models import Market
from autoscaler.sim.observe import to_datetime
from autoscaler.sim.strategies.engine import EngineStrategy
from tests.service.executor_rig import Rig, drain, launch
from tests.sim.conftest import replay_for

S = NodeState
POOL = "vision/gpu"


def test_keys_are_stable_and_tell_equal_actions_apart() -> None:
    a, b = launch(2), launch(2)
    keyed = action_keys([a, Hold(pool=POOL, what="scale-up", reason="x"), b, drain("n1")])
    assert [k for _, k in keyed] == [
        "launch:vision/gpu:2 x p3.2xlarge on-demand p3.2xlarge on-demand - pending",
        "launch:vision/gpu:2 x p3.2xlarge on-demand p3.2xlarge on-demand - pending#2",
        "drain:vision/gpu:n1 idle"]
    assert [k for _, k in action_keys([a, b, drain("n1")])] == [k for _, k in keyed]


def test_intents_and_the_cooldown_decision() -> None:
    plan = Plan(decided_at=datetime(2026, 1, 1), actions=[
        launch(2, replaces=["old"], trigger="interruption"), launch(1),
        Replace(pool=POOL, node="n1", instance_type="p3.2xlarge", market=Market.SPOT,
                trigger="consolidate", reason="cheaper"),
        drain("n2"), drain("n3", trigger="unhealthy")])
    intents = interpret(plan)
    news = [i for i in intents if isinstance(i, NewNode)]
    assert [(n.slot, n.replaces, n.cooldown) for n in news] == [
        (0, "old", None), (1, None, None), (0, None, "up"), (0, "n1", None)]
    drains = [i for i in intents if isinstance(i, StartDrain)]
    assert [(d.node, d.replaced, d.cooldown) for d in drains] == [
        ("n1", True, None), ("n2", False, "down"), ("n3", False, None)]
    refused = interpret(Plan(decided_at=plan.decided_at, actions=[drain("ghost")]), {})
    assert isinstance(refused[0], Refused) and "no node named ghost" in refused[0].why


Step = Callable[[list[str]], list[Action]]  # node names (launch order) -> the plan's actions
SEQUENCE: list[Step] = [
    lambda n: [launch(2)],
    lambda n: [Replace(pool=POOL, node=n[0], instance_type="p3.2xlarge", market=Market.ON_DEMAND,
                       trigger="unhealthy", reason="xid errors")],
    lambda n: [launch(1, trigger="interruption")],
    lambda n: [drain(n[1])],
    lambda n: [drain(n[0], trigger="unhealthy")],  # already draining: refused on both sides
    lambda n: [launch(1, trigger="utilization")],
    lambda n: [CancelDrain(pool=POOL, node=n[1], reason="demand is back")],
]


def offsets(history: PoolHistory, start: datetime) -> tuple[float | None, float | None]:
    def off(at: datetime | None) -> float | None:
        return None if at is None else (at - start).total_seconds()
    return off(history.last_scale_up_at), off(history.last_scale_down_at)


def test_service_and_simulator_keep_the_same_cooldown_history(rig: Rig) -> None:
    policy = rig.policies["vision"]
    ours = EngineStrategy(policy, policy.pools[0], default_catalog())
    replay = replay_for([], strategy=ours, pool=policy.pools[0])
    start = rig.clock()
    service_names: list[str] = []
    service, simulated = [], []
    for i, step in enumerate(SEQUENCE):
        t = 60.0 * i
        rig.clock.now = start + timedelta(seconds=t)
        service_names += rig.submit(*step(service_names))
        rig.advance()
        for name in service_names:
            rig.slurm.scheduler.join(name)
        rig.advance()
        service.append(offsets(rig.store.fleet_view().history.get(POOL, PoolHistory()), start))

        sim_names = sorted(replay.cluster.nodes)
        ours.apply(replay, Plan(decided_at=to_datetime(t), actions=step(sim_names)), t)
        for node in replay.cluster.nodes.values():
            if node.state is S.PROVISIONING:
                replay.cluster.move(node, S.BOOTSTRAPPING, t)
            if node.state is S.BOOTSTRAPPING:
                replay.cluster.move(node, S.READY, t)
        simulated.append(offsets(ours.history, to_datetime(0)))
    assert service == simulated
    assert service[-1] == (300.0, 180.0)  # utilization launch, idle drain; nothing else counted


def test_the_fallback_marker_reaches_the_node_in_the_store_and_in_the_simulator(rig: Rig) -> None:
    """Launch.fallback_from_spot -> intent -> the node the engine sees next tick, on both
    sides; a replacement's ``replaces`` and its launch trigger too."""
    fallback = launch(1).model_copy(update={"fallback_from_spot": True})
    [intent] = interpret(Plan(decided_at=rig.clock(), actions=[fallback]))
    assert isinstance(intent, NewNode) and intent.fallback_from_spot and intent.trigger == "pending"
    [name] = rig.submit(fallback)
    seen = rig.store.fleet_view().nodes[0]
    assert (seen.name, seen.fallback_from_spot, seen.launched_for) == (name, True, "pending")
    [back] = rig.submit(launch(1, market=Market.SPOT, replaces=[name], trigger="return-to-spot"))
    node = rig.store.get(back)
    assert node is not None and (node.replaces, node.launched_for, node.fallback_from_spot) == (
        name, "return-to-spot", False)

    policy = rig.policies["vision"]
    ours = EngineStrategy(policy, policy.pools[0], default_catalog())
    replay = replay_for([], strategy=ours, pool=policy.pools[0])
    ours.apply(replay, Plan(decided_at=to_datetime(0), actions=[fallback]), 0.0)
    [sim_name] = replay.cluster.nodes
    ours.apply(replay, Plan(decided_at=to_datetime(0), actions=[
        launch(1, market=Market.SPOT, replaces=[sim_name], trigger="return-to-spot")]), 0.0)
    fleet, _ = ours.observe(replay, 0.0)
    views = {n.name: n for n in fleet.nodes}
    assert views[sim_name].fallback_from_spot and views[sim_name].launched_for == "pending"
    [spot] = [n for n in views.values() if n.name != sim_name]
    assert (spot.replaces, spot.launched_for, spot.fallback_from_spot) == (
        sim_name, "return-to-spot", False)
