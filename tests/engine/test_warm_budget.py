"""Warm nodes leave within a budget: those of a pool no policy defines follow
removed_pools.py (kept unless drain_removed_pools, kept on an empty policy set or missing
signals, then the removed-pool share and per-tick count), and a pool's own retirements
(stale, old, surplus) are at most its max_draining_percent of its warm nodes per tick, at
least 1 (audit F2: 8 warm nodes of a pool were terminated in one tick with no policy
loaded at all, while its READY nodes were held)."""

from __future__ import annotations

from datetime import timedelta

from autoscaler.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.engine.pricing import Prices
from autoscaler.engine.settings import EngineSettings
from autoscaler.engine.warm_plan import WarmInputs, with_warm_pools
from autoscaler.engine.warm_pool import Target, WarmNode, refresh
from autoscaler.model.lifecycle import NodeState as S
from autoscaler.model.node import FleetView, Node
from autoscaler.model.plan import Hold, Launch, Plan, Terminate
from autoscaler.model.progress import NodeProgress, WarmProgress
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import Market, TeamPolicy
from autoscaler.service.control import warm as service_warm
from tests.builders import NOW, busy, make_node, make_policy

CATALOG = default_catalog()
DRAIN = EngineSettings(drain_removed_pools=True)


def warm_node(name: str, hours: float = 2, image: str = "h1", team: str = "vision") -> Node:
    return make_node(name, team=team, state=S.WARM, instance_type="g4dn.xlarge",
                     market=Market.ON_DEMAND, age=timedelta(hours=hours), ready_for=None,
                     progress=NodeProgress(warm=WarmProgress(image=image)))


def audit_nodes() -> list[Node]:
    """The audit's input: 8 WARM and 4 READY nodes of vision/gpu."""
    return [warm_node(f"w{i}", hours=2 + i) for i in range(8)] + [
        make_node(f"r{i}", instance_type="g4dn.xlarge") for i in range(4)]


def tick(pols: dict[str, TeamPolicy], nodes: list[Node], *, settings: EngineSettings | None = None,
         missing: list[str] | None = None) -> Plan:
    """decide() and the warm step, as the service runs them (service/control/warm.py),
    with the engine settings and missing sources handed to the warm step."""
    engine_fleet, warm = service_warm.split(FleetView(nodes=nodes))
    snap = Snapshot(taken_at=NOW, nodes={n.name: busy() for n in nodes if n.state is S.READY},
                    missing=missing or [])
    plan = decide(pols, engine_fleet, snap, NOW, catalog=CATALOG, settings=settings)
    inputs = WarmInputs(warm=warm, images={"vision/gpu": "h1"},
                        settings=settings or EngineSettings(), missing=frozenset(snap.missing))
    return with_warm_pools(plan, pols, inputs, Prices(CATALOG, snap, NOW), NOW)


def terminated(plan: Plan) -> list[str]:
    return sorted(a.node for a in plan.actions if isinstance(a, Terminate))


def holds(plan: Plan) -> list[str]:
    return [a.reason for a in plan.actions if isinstance(a, Hold)]


def other_team() -> dict[str, TeamPolicy]:
    return {"nlp": make_policy(team="nlp", instance_types=["g4dn.xlarge"])}


def test_an_empty_policy_set_keeps_every_warm_node() -> None:
    plan = tick({}, audit_nodes())
    assert terminated(plan) == []
    assert "vision/gpu: no policy defines this pool any more; its 8 warm node(s) are kept until " \
           "drain_removed_pools is enabled" in holds(plan)
    # Even with drain_removed_pools: an empty policy directory is a mistake, not a removal.
    plan = tick({}, audit_nodes(), settings=DRAIN)
    assert terminated(plan) == []
    assert any("its 8 warm node(s) are kept: no policy is loaded at all" in h for h in holds(plan))


def test_the_service_path_hands_the_settings_and_missing_sources_on() -> None:
    """service/control/warm.apply, as the loop and `plan` call it: without settings the
    nodes of a pool no policy defines are kept; with drain_removed_pools they leave within
    its budget, unless a source is missing."""
    nodes = audit_nodes()
    engine_fleet, warm = service_warm.split(FleetView(nodes=nodes))

    def apply(pols: dict[str, TeamPolicy], settings: EngineSettings | None = None,
              missing: list[str] | None = None) -> Plan:
        snap = Snapshot(taken_at=NOW, nodes={n.name: busy() for n in nodes if n.state is S.READY},
                        missing=missing or [])
        plan = decide(pols, engine_fleet, snap, NOW, catalog=CATALOG)
        return service_warm.apply(plan, pols, engine_fleet, warm, Prices(CATALOG, snap, NOW), {},
                                  lambda _: {"vision/gpu": "h1"}, NOW, settings, snap.missing)

    for pols in ({}, other_team()):
        assert terminated(apply(pols)) == []
    assert terminated(apply(other_team(), DRAIN)) == ["w7"]
    assert terminated(apply(other_team(), DRAIN, ["slurm"])) == []


def test_a_removed_team_keeps_its_warm_nodes_like_its_ready_ones() -> None:
    plan = tick(other_team(), audit_nodes())
    assert terminated(plan) == []
    assert any("its 4 node(s) are kept until drain_removed_pools" in h for h in holds(plan))
    assert any("its 8 warm node(s) are kept until drain_removed_pools" in h for h in holds(plan))


def test_missing_signals_freeze_them() -> None:
    plan = tick(other_team(), audit_nodes(), settings=DRAIN, missing=["slurm"])
    assert terminated(plan) == []
    assert any("its 8 warm node(s) are kept: signals are missing (slurm)" in h for h in holds(plan))


def test_with_drain_removed_pools_they_leave_within_the_removed_pool_budget() -> None:
    plan = tick(other_team(), [warm_node(f"w{i}", hours=2 + i) for i in range(8)], settings=DRAIN)
    assert terminated(plan) == ["w7"]  # 20% of 8 is 1; the oldest first
    assert ("vision/gpu: 7 warm node(s) of the removed pool wait: at most 20% of them (8) are "
            "terminated at once and 10 removed-pool node(s) leave per tick fleet-wide") in holds(plan)
    wide = EngineSettings(drain_removed_pools=True, removed_pool_drain_percent=100,
                          removed_pool_drains_per_tick=3)
    plan = tick(other_team(), [warm_node(f"w{i}", hours=2 + i) for i in range(8)], settings=wide)
    assert terminated(plan) == ["w5", "w6", "w7"]  # the fleet-wide count


def test_the_fleet_wide_count_is_shared_with_the_removed_pools_ready_nodes() -> None:
    wide = EngineSettings(drain_removed_pools=True, removed_pool_drain_percent=100,
                          removed_pool_drains_per_tick=5)
    plan = tick(other_team(), audit_nodes(), settings=wide)
    drains = [a for a in plan.actions if a.kind == "drain" and a.pool == "vision/gpu"]
    assert len(drains) == 4  # the READY nodes first (removed_pools.py)
    assert terminated(plan) == ["w7"]  # 5 - 4


# -- a pool's own retirements --------------------------------------------------------------

def test_a_stale_warm_pool_is_retired_a_budget_at_a_time() -> None:
    pols = {"vision": make_policy(warm_pool={"size": 10, "max": 10}, instance_types=["g4dn.xlarge"],
                                  capacity={"spot_percent": 0})}
    nodes = [warm_node(f"w{i}", hours=2 + i, image="h0") for i in range(10)]
    plan = tick(pols, nodes)
    assert terminated(plan) == ["w8", "w9"]  # 20% of 10, oldest first
    assert ("vision/gpu: 8 warm node(s) wait for their retirement: at most 2 retired per tick "
            "(max_draining_percent 20 of 10 warm node(s), at least 1)") in holds(plan)
    [fill] = [a for a in plan.actions if isinstance(a, Launch)]
    assert fill.count == 2  # the 8 waiting still count: never above the target
    assert "8 more to retire wait: at most 2 retired per tick" in fill.reason


def test_refresh_counts_the_waiting_retirements_as_there() -> None:
    pool = make_policy(warm_pool={"size": 3, "max": 3}).pools[0]
    nodes = [WarmNode(f"w{i}", "p3.2xlarge", Market.SPOT, NOW - timedelta(hours=1 + i), "h0", True)
             for i in range(3)]
    got = refresh(pool, nodes, Target(3, "warm target 3"), "h1", NOW)
    assert [name for name, _ in got.retire] == ["w2"]  # 20% of 3 is 0: still 1
    assert (got.deferred, got.refill) == (2, 1)
