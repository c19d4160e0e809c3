"""Node maps from the fleet, change detection, and hypothetical maps for plan previews."""

from __future__ import annotations

import pytest

from autoscaler.actuators.node_map import (
    INSTANCE_STATES,
    NodeSpec,
    PreviewError,
    changed_pools,
    desired_maps,
    preview_maps,
)
from autoscaler.catalog import default_catalog
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import CancelDrain, Drain, Launch, Plan, Replace, Terminate
from autoscaler.policy.models import Market
from tests.builders import NOW, make_node, make_policy

S = NodeState
SPOT, OD = Market.SPOT, Market.ON_DEMAND
CATALOG = default_catalog()


@pytest.mark.parametrize("state", list(NodeState))
def test_which_states_keep_an_instance_in_the_map(state: NodeState) -> None:
    maps = desired_maps([make_node("vision-gpu-1", state=state)])
    expected = state not in {S.TERMINATING, S.TERMINATED, S.LOST, S.PROVISION_FAILED}
    assert ("vision/gpu" in maps) == expected
    assert (state in INSTANCE_STATES) == expected


def test_map_holds_type_market_and_zone_per_pool() -> None:
    maps = desired_maps([
        make_node("vision-gpu-1", market=SPOT, zone="us-east-1a"),
        make_node("vision-gpu-2", instance_type="p3.8xlarge"),
        make_node("search-t4-1", team="search", pool="t4", instance_type="g4dn.xlarge"),
    ])
    assert maps == {
        "vision/gpu": {
            "vision-gpu-1": NodeSpec(instance_type="p3.2xlarge", market=SPOT, zone="us-east-1a"),
            "vision-gpu-2": NodeSpec(instance_type="p3.8xlarge", market=OD, zone=""),
        },
        "search/t4": {"search-t4-1": NodeSpec(instance_type="g4dn.xlarge", market=OD)},
    }
    assert maps["vision/gpu"]["vision-gpu-1"].tf() == {
        "instance_type": "p3.2xlarge", "market": "spot", "zone": "us-east-1a"}


def test_only_pools_whose_map_changed_are_planned() -> None:
    a = {"n1": NodeSpec(instance_type="p3.2xlarge", market=OD)}
    b = {**a, "n2": NodeSpec(instance_type="p3.2xlarge", market=SPOT)}
    desired = {"t/same": a, "t/grew": b, "t/new": a}
    applied = {"t/same": dict(a), "t/grew": a, "t/gone": a, "t/empty": {}}
    assert changed_pools(desired, applied) == ["t/gone", "t/grew", "t/new"]
    # A market switch is a change (Terraform replaces the node).
    switched = {"n1": NodeSpec(instance_type="p3.2xlarge", market=SPOT)}
    assert changed_pools({"t/x": switched}, {"t/x": a}) == ["t/x"]


def _launch(pool: str, itype: str, market: Market, count: int, zone: str | None = None) -> Launch:
    return Launch(pool=pool, reason=f"{pool}: grow", instance_type=itype, market=market,
                  zone=zone, count=count, gpus_per_node=1, hourly_usd=1.0, trigger="pending")


def test_preview_applies_launch_terminate_replace_and_ignores_drains() -> None:
    fleet = [
        make_node("vision-gpu-1", market=SPOT, zone="us-east-1a"),
        make_node("vision-gpu-2", state=S.DRAINED),
        make_node("vision-gpu-3", state=S.DRAINING),
        make_node("vision-gpu-4"),
    ]
    plan = Plan(decided_at=NOW, actions=[
        _launch("vision/gpu", "p3.8xlarge", OD, 2, zone="us-east-1b"),
        Terminate(pool="vision/gpu", reason="vision/gpu: drained", node="vision-gpu-2"),
        Replace(pool="vision/gpu", reason="vision/gpu: XID", node="vision-gpu-1",
                instance_type="p3.2xlarge", market=SPOT, zone="us-east-1a", trigger="unhealthy"),
        Drain(pool="vision/gpu", reason="vision/gpu: idle", node="vision-gpu-4", trigger="idle"),
        CancelDrain(pool="vision/gpu", reason="vision/gpu: demand", node="vision-gpu-3"),
    ])
    [pm] = preview_maps(fleet, plan, CATALOG).values()
    assert sorted(pm.before) == ["vision-gpu-1", "vision-gpu-2", "vision-gpu-3", "vision-gpu-4"]
    assert sorted(pm.after) == ["vision-gpu-1", "vision-gpu-3", "vision-gpu-4",
                                "vision-gpu-new1", "vision-gpu-new2", "vision-gpu-new3"]
    assert pm.after["vision-gpu-new1"] == NodeSpec(instance_type="p3.8xlarge", market=OD,
                                                   zone="us-east-1b")
    assert pm.after["vision-gpu-new3"] == pm.before["vision-gpu-1"]  # the replacement
    assert pm.reasons == ["vision/gpu: grow", "vision/gpu: drained", "vision/gpu: XID"]


def test_preview_locates_a_pool_without_nodes_from_its_policy() -> None:
    policy = make_policy(team="search", name="t4", instance_types=["g4dn.xlarge"],
                         region="us-west-2")
    plan = Plan(decided_at=NOW, actions=[_launch("search/t4", "g4dn.xlarge", SPOT, 1)])
    maps = preview_maps([], plan, CATALOG, {"search/t4": policy.pools[0]})
    pm = maps["search/t4"]
    assert (pm.ref.cloud, pm.ref.region) == ("aws", "us-west-2")
    assert pm.before == {} and list(pm.after) == ["search-t4-new1"]


def test_preview_refuses_unknown_pools_and_types() -> None:
    plan = Plan(decided_at=NOW, actions=[_launch("ghost/pool", "g4dn.xlarge", SPOT, 1)])
    with pytest.raises(PreviewError, match="ghost/pool"):
        preview_maps([], plan, CATALOG)
    plan = Plan(decided_at=NOW, actions=[_launch("vision/gpu", "ecs.gn6i-c4g1.xlarge", SPOT, 1)])
    with pytest.raises(PreviewError, match="not a known aws instance type"):
        preview_maps([make_node("vision-gpu-1")], plan, CATALOG)
