"""The in-memory FakePoolWorkspace behaves like the real one where callers can tell."""

from __future__ import annotations

import pytest

from autoscaler.actuators.node_map import NodeSpec
from autoscaler.actuators.terraform import StalePlanError, StateLockedError
from autoscaler.policy.models import Market
from tests.actuators.fake_workspace import FakePoolWorkspace

SPOT, OD = Market.SPOT, Market.ON_DEMAND
A = NodeSpec(instance_type="p3.2xlarge", market=SPOT, zone="us-east-1a")
B = NodeSpec(instance_type="g4dn.xlarge", market=OD)


def test_create_change_and_destroy() -> None:
    ws = FakePoolWorkspace("vision", "v100")
    result = ws.apply(ws.plan({"a": A, "b": B}))
    assert result.ok and result.created == ["a", "b"] and result.nodes["a"].lifecycle == "spot"
    assert ws.plan({"a": A, "b": B}).changes == []
    plan = ws.plan({"a": B})
    assert [(c.node, c.action) for c in plan.changes] == [("a", "replace"), ("b", "destroy")]
    assert ws.apply(plan).destroyed == ["a", "b"]
    assert ws.applied_nodes() == {"a": B}
    ws.destroy_all()
    assert ws.outputs() == {} and ws.calls[-1] == "destroy_all"


def test_capacity_failure_half_applies_the_pool() -> None:
    ws = FakePoolWorkspace("vision", "v100")
    ws.fail_nodes["b"] = "InsufficientInstanceCapacity"
    result = ws.apply(ws.plan({"a": A, "b": B}))
    assert not result.ok and list(result.failed) == ["b"] and sorted(result.nodes) == ["a"]
    [err] = result.capacity_errors
    assert (err.instance_type, err.market, err.code) == ("g4dn.xlarge", OD,
                                                          "InsufficientInstanceCapacity")
    assert ws.applied_nodes() == {"a": A}


def test_stale_plan_and_next_error() -> None:
    ws = FakePoolWorkspace("vision", "v100")
    old = ws.plan({"a": A})
    ws.apply(ws.plan({"b": B}))
    with pytest.raises(StalePlanError):
        ws.apply(old)
    ws.next_error = StateLockedError("locked")
    with pytest.raises(StateLockedError):
        ws.plan({"a": A})
    assert ws.plan({"a": A}).changes  # only the next call fails
