"""One pool's failing rules never stop the others; removed pools never drain without
evidence nor faster than their budgets."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import pytest

from autoscaler.engine import Drain, EngineSettings, Hold, Launch, decide
from autoscaler.engine.scale_up import grow
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.snapshot import PoolObservation
from autoscaler.policy.models import TeamPolicy
from tests.builders import NOW, fleet, idle, make_node, make_policy, pending, snapshot

decide_module = importlib.import_module("autoscaler.engine.decide")  # the package exports the function
TEAMS = {"vision": make_policy(team="vision"), "search": make_policy(team="search")}
DEMAND = {"vision/gpu": pending(1), "search/gpu": pending(1)}


def two_teams_with_demand() -> dict[str, Any]:
    return {"pools": {k: PoolObservation(pending=v) for k, v in DEMAND.items()}}


def test_a_pool_whose_rule_raises_is_held_and_the_others_are_decided(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ctx: Any, *args: Any) -> Any:
        if ctx.key == "vision/gpu":
            raise OverflowError("date value out of range")
        return grow(ctx, *args)

    monkeypatch.setattr(decide_module, "grow", broken)
    plan = decide(TEAMS, fleet(), snapshot(**two_teams_with_demand()), NOW)
    assert [a.pool for a in plan.actions if isinstance(a, Launch)] == ["search/gpu"]
    [held] = [a for a in plan.actions if a.pool == "vision/gpu"]
    assert isinstance(held, Hold) and held.what == "all"
    assert "scale-up raised OverflowError: date value out of range" in held.reason


def test_a_failing_scale_down_drops_the_pools_launches_too(monkeypatch: pytest.MonkeyPatch) -> None:
    real = decide_module._Decision._scale_down

    def broken(self: Any, ctx: Any, g: Any) -> None:
        if ctx.team == "search":
            raise ValueError("boom")
        real(self, ctx, g)

    monkeypatch.setattr(decide_module._Decision, "_scale_down", broken)
    plan = decide(TEAMS, fleet(), snapshot(**two_teams_with_demand()), NOW)
    assert [a.pool for a in plan.actions if isinstance(a, Launch)] == ["vision/gpu"]
    assert [a.pool for a in plan.actions if isinstance(a, Hold) and a.what == "all"] == ["search/gpu"]


def test_a_schedule_that_cannot_be_evaluated_holds_only_its_pool(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from autoscaler.engine import schedule

    def floor(pool: Any, now: Any) -> Any:
        if pool.schedule:
            raise ValueError("failed to find prev date")
        return pool.min_nodes, "min"

    monkeypatch.setattr(schedule, "floor", floor)
    vision = make_policy(team="vision", schedule=[{"cron": "0 8 * * *", "min_nodes": 2,
                                                   "duration": "1h"}])
    nodes = [make_node("v1", state=NodeState.READY)]
    plan = decide({**TEAMS, "vision": vision}, fleet(*nodes),
                  snapshot({"v1": idle()}, **two_teams_with_demand()), NOW)
    assert [a.pool for a in plan.actions if isinstance(a, Launch)] == ["search/gpu"]
    [held] = [a for a in plan.actions if a.pool == "vision/gpu"]
    assert isinstance(held, Hold) and "its schedule raised ValueError" in held.reason
    assert not [a for a in plan.actions if isinstance(a, Drain)]  # v1 is not an orphan


def orphans(n: int, team: str = "gone") -> list[Any]:
    return [make_node(f"{team}-old-{i}", team=team, pool="old") for i in range(1, n + 1)]


ON = EngineSettings(drain_removed_pools=True)


@pytest.mark.parametrize(("policies", "missing", "why"), [
    ({}, [], "no policy is loaded at all"),
    ({"vision": make_policy()}, ["prometheus"], "signals are missing (prometheus)"),
])
def test_removed_pools_freeze_without_evidence(policies: dict[str, TeamPolicy],
                                                missing: list[str], why: str) -> None:
    nodes = orphans(5)
    plan = decide(policies, fleet(*nodes), snapshot({n.name: idle() for n in nodes},
                                                    missing=missing), NOW, settings=ON)
    assert not plan.changes()
    [hold] = [a for a in plan.actions if a.pool == "gone/old"]
    assert why in hold.reason


def test_removed_pool_drains_within_its_share_and_the_fleet_cap() -> None:
    nodes = orphans(10) + orphans(10, team="left") + orphans(10, team="quit")
    obs = snapshot({n.name: idle() for n in nodes})
    policies = {"vision": make_policy()}
    plan = decide(policies, fleet(*nodes), obs, NOW, settings=ON)
    drains = [a for a in plan.actions if isinstance(a, Drain)]
    # 20% of 10 per pool, 3 pools, under the fleet cap of 10.
    assert sorted({d.pool for d in drains}) == ["gone/old", "left/old", "quit/old"]
    assert len(drains) == 6
    capped = EngineSettings(drain_removed_pools=True, removed_pool_drains_per_tick=3)
    drains = [a for a in decide(policies, fleet(*nodes), obs, NOW, settings=capped).actions
              if isinstance(a, Drain)]
    assert len(drains) == 3
    draining = [dataclasses.replace(n, state=NodeState.DRAINING) if i < 2 else n
                for i, n in enumerate(orphans(10))]
    plan = decide(policies, fleet(*draining), snapshot({n.name: idle() for n in draining}),
                  NOW, settings=ON)
    assert not [a for a in plan.actions if isinstance(a, Drain)]  # 2 of 10 already leave
    assert any("8 node(s) of the removed pool wait" in a.reason for a in plan.actions)
