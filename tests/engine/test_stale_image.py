"""A baked pool whose image is stale holds its launches when its policy says when_stale:
hold (engine/stale_image.py's table); removals and everything else go on."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from autoscaler.engine import Drain, Hold, Launch, Replace, decide
from autoscaler.engine.stale_image import held_for, hold_stale
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Plan
from autoscaler.model.snapshot import ImageObservation, PoolObservation, PoolOption
from autoscaler.policy.models import TeamPolicy
from tests.builders import NOW, fleet, idle, make_node, make_policy, make_pool_dict, pending, snapshot

HASH = "0123456789ab"
STALE = ImageObservation(hash=HASH)
CURRENT = ImageObservation(hash=HASH, image_id="ami-0abc1234def567890")


def baked(name: str, when_stale: str = "hold", **kw: Any) -> dict[str, Any]:
    return make_pool_dict(name, bootstrap={"image": "baked", "when_stale": when_stale}, **kw)


def run(policy: TeamPolicy, pools: dict[str, PoolObservation], *nodes: Any, **snap: Any) -> Plan:
    return decide({policy.team: policy}, fleet(*nodes), snapshot(pools=pools, **snap), NOW)


def of(plan: Plan, kind: type, pool: str) -> list[Any]:
    return [a for a in plan.actions if isinstance(a, kind) and a.pool == pool]


def test_a_stale_hold_pool_holds_its_launches_while_full_and_current_pools_launch() -> None:
    policy = make_policy(pools=[baked("held"), baked("full", "full"), baked("current"),
                                make_pool_dict("base")])
    pools = {"vision/held": PoolObservation(pending=pending(1, 1), image=STALE),
             "vision/full": PoolObservation(pending=pending(1), image=STALE),
             "vision/current": PoolObservation(pending=pending(1), image=CURRENT),
             "vision/base": PoolObservation(pending=pending(1))}
    plan = run(policy, pools)
    assert of(plan, Launch, "vision/held") == []
    [hold] = of(plan, Hold, "vision/held")
    assert hold.what == "scale-up"
    assert hold.reason.startswith(
        f"vision/held: stale image: no image has bootstrap hash {HASH} and when_stale is hold; "
        "2 launches held until `gpu-autoscaler image bake vision/held` makes one (would have been: ")
    assert "2 x p3.2xlarge on-demand: vision/held: " in hold.reason
    [full] = of(plan, Launch, "vision/full")
    assert full.reason.endswith(f"; full bootstrap from the base image (stale image: no image has "
                                f"bootstrap hash {HASH})")
    assert [a.count for a in of(plan, Launch, "vision/current")] == [1]
    assert "full bootstrap" not in of(plan, Launch, "vision/current")[0].reason
    assert [a.count for a in of(plan, Launch, "vision/base")] == [1]
    # the held launches add nothing to the pool's summary
    assert plan.pools["vision/held"].nodes == 0
    assert plan.pools["vision/full"].nodes == 1


def test_removals_still_happen_in_a_stale_hold_pool() -> None:
    policy = make_policy(pools=[baked("gpu", scale_down={"idle_for": "10m", "cooldown": "1s"})])
    nodes = [make_node("n1"), make_node("n2", state=NodeState.DRAINED)]
    plan = run(policy, {"vision/gpu": PoolObservation(image=STALE)}, *nodes, nodes={"n1": idle()})
    assert [a.node for a in of(plan, Drain, "vision/gpu")] == ["n1"]
    assert [a.node for a in plan.changes() if a.kind == "terminate"] == ["n2"]
    assert of(plan, Hold, "vision/gpu") == []  # nothing to launch: nothing held


@pytest.mark.parametrize("image", [None, CURRENT])
def test_an_unknown_or_current_image_changes_nothing(image: ImageObservation | None) -> None:
    policy = make_policy(pools=[baked("gpu")])
    plan = run(policy, {"vision/gpu": PoolObservation(pending=pending(1, 4), image=image)})
    plain = run(make_policy(), {"vision/gpu": PoolObservation(pending=pending(1, 4))})
    assert plan.actions == plain.actions
    assert of(plan, Hold, "vision/gpu") == []


def test_an_expired_node_is_kept_and_an_unhealthy_one_drains_without_a_replacement() -> None:
    replace_expired = Replace(pool="vision/gpu", node="n1", instance_type="p3.2xlarge",
                              market="on-demand", trigger="expired", reason="vision/gpu: n1 is old")
    replace_sick = Replace(pool="vision/gpu", node="n2", instance_type="p3.2xlarge",
                           market="on-demand", trigger="unhealthy", reason="vision/gpu: n2 XID 79")
    pool = make_policy(pools=[baked("gpu")]).pools[0]
    out = hold_stale([replace_expired, replace_sick],
                     {"vision/gpu": (pool, PoolObservation(image=STALE))})
    [drain, kept] = out
    assert isinstance(drain, Drain) and drain.node == "n2" and drain.trigger == "unhealthy"
    assert drain.reason == f"vision/gpu: n2 XID 79; no replacement: {held_for(pool, PoolObservation(image=STALE))}"
    assert isinstance(kept, Hold) and kept.what == "scale-down"
    assert "1 node(s) kept, not replaced" in kept.reason and "n1 -> p3.2xlarge" in kept.reason


def test_an_expired_node_of_a_stale_hold_pool_is_kept_through_decide() -> None:
    policy = make_policy(pools=[baked("gpu", lifetime={"max_node_age": "24h"})])
    node = make_node("n1", age=timedelta(hours=30))
    plan = run(policy, {"vision/gpu": PoolObservation(image=STALE)}, node, nodes={"n1": idle()})
    assert of(plan, Replace, "vision/gpu") == []
    assert any("kept, not replaced" in h.reason for h in of(plan, Hold, "vision/gpu"))


def test_a_placement_group_sends_jobs_to_the_pool_that_can_launch() -> None:
    # The held pool is the cheaper (its types are), so without the hold it would win.
    policy = make_policy(
        pools=[baked("held", instance_types=["p3.2xlarge"], placement_group="train"),
               make_pool_dict("other", instance_types=["p3.8xlarge"], placement_group="train")])
    job = pending(1)[0].model_copy(update={"options": [PoolOption(pool="vision/held"),
                                                       PoolOption(pool="vision/other")]})
    plan = run(policy, {"vision/held": PoolObservation(pending=[job], image=STALE)})
    assert [a.count for a in of(plan, Launch, "vision/other")] == [1]
    assert of(plan, Launch, "vision/held") == [] and of(plan, Hold, "vision/held") == []


def test_held_launches_take_no_quota_from_the_teams_other_pools() -> None:
    policy = make_policy(quota={"max_gpus": 1}, pools=[baked("held"), make_pool_dict("other")])
    plan = run(policy, {"vision/held": PoolObservation(pending=pending(1), image=STALE),
                        "vision/other": PoolObservation(pending=pending(1))})
    assert [a.count for a in of(plan, Launch, "vision/other")] == [1]
