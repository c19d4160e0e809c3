"""engine/warm_plan.py on real decide() plans: launches start stopped warm nodes first, the
rest is held while they start, stale/old/surplus warm nodes are retired and the pool is
refilled; warm nodes are never capacity (service/control/warm.py keeps them out of decide)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from autoscaler.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.engine.pricing import Prices
from autoscaler.engine.warm_plan import WarmInputs, with_warm_pools
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import FleetView, Node
from autoscaler.model.plan import Hold, Launch, Plan, StartWarm, Terminate
from autoscaler.model.progress import NodeProgress, WarmProgress
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import Market
from autoscaler.service.control import warm as service_warm
from tests.builders import NOW, make_node, make_policy

S = NodeState
CATALOG = default_catalog()


def policies(size: int = 2, most: int = 4, **kw: object) -> dict[str, object]:
    return {"vision": make_policy(warm_pool={"size": size, "max": most},
                                  instance_types=["g4dn.xlarge"],
                                  capacity={"spot_percent": 0}, **kw)}


def warm_node(name: str, state: S = S.WARM, image: str = "h1", hours: float = 2) -> Node:
    return make_node(name, state=state, instance_type="g4dn.xlarge", market=Market.ON_DEMAND,
                     age=timedelta(hours=hours), ready_for=None,
                     progress=NodeProgress(warm=WarmProgress(image=image)))


def run(pols: dict, nodes: list[Node], pending_gpus: int = 0, images: dict | None = None) -> Plan:
    fleet = FleetView(nodes=nodes)
    engine_fleet, warm = service_warm.split(fleet)
    jobs = [{"id": f"j{i}", "gpus": 1} for i in range(pending_gpus)]
    snapshot = Snapshot.model_validate({"taken_at": NOW, "pools": {"vision/gpu": {"pending": jobs}}})
    plan = decide(pols, engine_fleet, snapshot, NOW, catalog=CATALOG)  # type: ignore[arg-type]
    prices = Prices(CATALOG, snapshot, NOW)
    return service_warm.apply(plan, pols, engine_fleet, warm, prices, {},  # type: ignore[arg-type]
                              lambda _: images if images is not None else {"vision/gpu": "h1"}, NOW)


def kinds(plan: Plan) -> list[tuple[str, str]]:
    return [(a.kind, getattr(a, "node", None) or str(getattr(a, "count", ""))) for a in plan.actions]


def test_an_empty_warm_pool_is_filled_and_its_nodes_are_not_capacity():
    plan = run(policies(size=2), [])
    [fill] = [a for a in plan.actions if isinstance(a, Launch)]
    assert (fill.trigger, fill.count, fill.instance_type, fill.image) == ("warm-pool", 2, "g4dn.xlarge", "h1")
    assert "warm target 2 (warm_pool.size), max 4" in fill.reason and "2 launched to refill" in fill.reason
    # Two warm nodes bootstrapping and two stopped: no refill, no launch for capacity.
    nodes = [warm_node("w1"), warm_node("w2"), warm_node("w3", S.BOOTSTRAPPING),
             warm_node("w4", S.STOPPING)]
    plan = run(policies(size=4), nodes)
    assert plan.actions == [] or all(isinstance(a, Hold) for a in plan.actions), kinds(plan)
    assert plan.pools["vision/gpu"].nodes == 0  # decide() never saw them


def test_a_pending_job_starts_a_stopped_node_and_holds_the_cold_rest():
    nodes = [warm_node("w1", hours=3), warm_node("w2", hours=1), warm_node("w3", S.BOOTSTRAPPING)]
    plan = run(policies(size=3, max_nodes=10), nodes, pending_gpus=3)
    starts = [a for a in plan.actions if isinstance(a, StartWarm)]
    assert [s.node for s in starts] == ["w2", "w1"]  # youngest first
    assert all(s.instance_type == "g4dn.xlarge" and s.market is Market.ON_DEMAND for s in starts)
    assert "start warm nodes (w2, w1)" in starts[0].reason
    [held] = [a for a in plan.actions if isinstance(a, Hold) and "cold held" in a.reason]
    assert "1 cold held until the 2 warm node(s) starting are READY" in held.reason
    assert not [a for a in plan.actions if isinstance(a, Launch) and a.trigger != "warm-pool"]
    # The pool refills behind them once they are READY, not in the apply that starts them.
    assert not [a for a in plan.actions if isinstance(a, Launch) and a.trigger == "warm-pool"]
    assert any("refreshed once its warm nodes starting are READY" in a.reason
               for a in plan.actions if isinstance(a, Hold))
    ready = [warm_node("w3", S.BOOTSTRAPPING)]  # w1, w2 serving: READY, out of the warm pool
    plan = run(policies(size=3, max_nodes=10), ready)
    [fill] = [a for a in plan.actions if isinstance(a, Launch) and a.trigger == "warm-pool"]
    assert fill.count == 2


def test_stale_old_and_surplus_warm_nodes_are_retired():
    nodes = [warm_node("w-stale", image="h0"), warm_node("w-old", hours=30), warm_node("w1"),
             warm_node("w2"), warm_node("w3")]
    # All at once only with the budget lifted (test_warm_budget.py has the per-tick limit).
    plan = run(policies(size=1, most=2, lifetime={"max_node_age": "24h"},
                        scale_down={"max_draining_percent": 100}), nodes)
    retired = {a.node: a.reason for a in plan.actions if isinstance(a, Terminate)}
    assert set(retired) == {"w-stale", "w-old", "w1"}
    assert "stale image h0 (the pool's is now h1)" in retired["w-stale"]
    assert "age 1d6h past lifetime.max_node_age 1d" in retired["w-old"]
    assert "above warm_pool.max 2" in retired["w1"]
    assert not [a for a in plan.actions if isinstance(a, Launch)]


def test_a_warm_pool_whose_policy_is_gone_is_kept_and_no_hash_holds_the_refresh():
    # As removed_pools.py keeps the pool's other nodes (test_warm_budget.py has the rest).
    plan = run({"vision": make_policy(name="other")}, [warm_node("w1")])
    assert not [a for a in plan.actions if isinstance(a, Terminate)]
    assert any(isinstance(a, Hold) and "warm node(s) are kept until drain_removed_pools"
               in a.reason for a in plan.actions)
    plan = run(policies(size=2), [warm_node("w1")], images={})
    assert [a.kind for a in plan.actions] == ["hold"]
    assert "bootstrap hash is not known" in plan.actions[0].reason


def test_pools_without_warm_pool_are_untouched():
    pols = {"vision": make_policy(instance_types=["g4dn.xlarge"])}
    plan = decide(pols, FleetView(), Snapshot(taken_at=NOW), NOW, catalog=CATALOG)
    same = with_warm_pools(plan, pols, WarmInputs(warm=[]), Prices(CATALOG, Snapshot(taken_at=NOW), NOW), NOW)
    assert same == plan


def test_a_warm_node_in_a_zone_that_refused_its_type_stays_stopped():
    from autoscaler.model.snapshot import CapacityError

    nodes = [dataclasses.replace(warm_node("w-a", hours=1), zone="us-east-1a"),
             dataclasses.replace(warm_node("w-b", hours=3), zone="us-east-1b")]
    pols = policies(size=2, max_nodes=10, zones=["us-east-1a", "us-east-1b"])
    fleet, warm = service_warm.split(FleetView(nodes=nodes))
    refused = CapacityError(cloud="aws", region="us-east-1", instance_type="g4dn.xlarge",
                            zone="us-east-1a", market=Market.ON_DEMAND,
                            code="InsufficientInstanceCapacity", at=NOW - timedelta(minutes=1))
    snapshot = Snapshot.model_validate({"taken_at": NOW, "capacity_errors": [refused.model_dump()],
                                        "pools": {"vision/gpu": {"pending": [{"id": "j", "gpus": 1}]}}})
    plan = decide(pols, fleet, snapshot, NOW, catalog=CATALOG)
    plan = service_warm.apply(plan, pols, fleet, warm, Prices(CATALOG, snapshot, NOW), {},
                              lambda _: {"vision/gpu": "h1"}, NOW)
    assert [a.node for a in plan.actions if isinstance(a, StartWarm)] == ["w-b"]
