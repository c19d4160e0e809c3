"""The engine's answer to a capacity request: placed in a pool, within every limit, or refused with the numbers."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.engine.admission import admit, booked
from autoscaler.engine.settings import EngineSettings
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.request_spec import Condition, RequestSpec, RequestView
from autoscaler.model.snapshot import ClusterQuota
from tests.builders import NOW, make_node, make_policy

CATALOG = default_catalog()


def request(team="vision", **kw):
    body = {"name": "ci-4711", "class": "atomic",
            "node_sets": [{"gpu_model": "V100", "gpus": 4, "nodes": 2}], **kw}
    return RequestView(id="req-1", team=team, spec=RequestSpec.model_validate(body),
                       condition=Condition.PENDING, reason="", created_at=NOW, updated_at=NOW)


def test_accepted_with_placement_and_price():
    got = admit(request(), make_policy(), CATALOG, [], EngineSettings())
    assert got.ok
    assert got.reason == ("request ci-4711 (team vision, atomic, 2 x 4 GPUs) accepted: "
                          "2 x p3.8xlarge in pool vision/gpu, +$24.48/h on-demand")
    assert got.preview()["hourly_usd_delta"] == 24.48
    assert got.preview()["add"] == [{"pool": "vision/gpu", "instance_type": "p3.8xlarge",
                                     "nodes": 2, "usd_per_node": 12.24}]


def test_beyond_the_team_quota_is_refused_with_the_numbers():
    fleet = [make_node("vision-gpu-1", instance_type="p3.8xlarge")]
    got = admit(request(), make_policy(quota={"max_gpus": 8}), CATALOG, fleet, EngineSettings())
    assert not got.ok
    assert got.reason == ("request ci-4711 (team vision, atomic, 2 x 4 GPUs) refused: team "
                          "vision GPU cap 8 (holds 4, +8 would exceed)")


def test_the_cluster_quota_and_global_caps_count_too():
    cluster = {"vision": ClusterQuota(max_gpus=6, source="ResourceQuota vision/gpus")}
    got = admit(request(), make_policy(), CATALOG, [], EngineSettings(), cluster)
    assert not got.ok and "ResourceQuota vision/gpus" in got.reason and "+8 would exceed" in got.reason
    other = [make_node("nlp-gpu-1", team="nlp", instance_type="p3.8xlarge")]
    got = admit(request(), make_policy(), CATALOG, other, EngineSettings(max_gpus=10))
    assert not got.ok and got.reason.endswith("global GPU cap 10 (holds 4, +8 would exceed)")
    got = admit(request(), make_policy(quota={"max_hourly_usd": 20}), CATALOG, [], EngineSettings())
    assert not got.ok and "$/h cap 20" in got.reason and "+$24.48/h" in got.reason


def test_pool_max_nodes_and_unknown_shapes():
    fleet = [make_node(f"vision-gpu-{i}") for i in range(3)]
    got = admit(request(), make_policy(max_nodes=4), CATALOG, fleet, EngineSettings())
    assert not got.ok and got.reason.endswith("pool vision/gpu max_nodes 4 (holds 3, +2 would exceed)")
    got = admit(request(node_sets=[{"gpu_model": "H100", "gpus": 8}]), make_policy(), CATALOG, [],
                EngineSettings())
    assert not got.ok and "no pool of team vision offers H100 with 8 GPUs per node" in got.reason
    got = admit(request(pool="infer"), make_policy(), CATALOG, [], EngineSettings())
    assert not got.ok and got.reason.endswith("team vision has no pool infer")
    assert not admit(request(team="nlp"), None, CATALOG, [], EngineSettings()).ok


def test_by_instance_type_and_in_the_named_pool():
    policy = make_policy(pools=[
        {"name": "small", "cloud": "aws", "region": "us-east-1", "instance_types": ["g4dn.xlarge"],
         "max_nodes": 4},
        {"name": "big", "cloud": "aws", "region": "us-east-1", "instance_types": ["p3.2xlarge"],
         "max_nodes": 4}])
    got = admit(request(node_sets=[{"instance_type": "p3.2xlarge", "gpus": 1, "nodes": 3}]),
                policy, CATALOG, [], EngineSettings())
    assert got.ok and got.placements[0].pool == "vision/big" and got.usd_per_hour == 3 * 3.06


def test_accepted_requests_not_yet_provisioned_count_against_the_quota():
    policy = make_policy(quota={"max_gpus": 12})
    first = request().model_copy(update={"id": "req-0", "condition": Condition.ACCEPTED})
    held = booked([first, request()], {"vision": policy}, CATALOG)  # Pending ones do not count
    assert [(p.pool, p.nodes) for p in held] == [("vision/gpu", 2)]
    got = admit(request(), policy, CATALOG, [], EngineSettings(), booked=held)
    assert not got.ok and got.reason.endswith("GPU cap 12 (holds 8, +8 would exceed)")


def test_an_accepted_requests_nodes_count_once_while_they_are_made_and_boot():
    """An Accepted request keeps its condition until its nodes are READY; the nodes it has
    made are in the fleet, so only the rest is booked (counted twice, a second CI job that
    fits was refused: "max_nodes 4 (holds 4, +2 would exceed)" with 2 nodes in the pool)."""
    from autoscaler.model.progress import NodeProgress

    policy = make_policy(max_nodes=4)
    first = request(node_sets=[{"instance_type": "p3.8xlarge", "gpus": 4, "nodes": 2}]
                    ).model_copy(update={"id": "req-0", "condition": Condition.ACCEPTED})

    def made(n: int) -> list:
        return [make_node(f"vision-gpu-{i}", instance_type="p3.8xlarge",
                          state=NodeState.PROVISIONING, progress=NodeProgress(request="req-0"))
                for i in range(n)] + [make_node("vision-gpu-9", instance_type="p3.8xlarge",
                                                progress=NodeProgress(request="req-other"))]

    for n, left in ((0, [("vision/gpu", 2)]), (1, [("vision/gpu", 1)]), (2, [])):
        fleet = made(n)
        held = booked([first], {"vision": policy}, CATALOG, fleet)
        assert [(p.pool, p.nodes) for p in held] == left, n
        got = admit(request(node_sets=[{"instance_type": "p3.8xlarge", "gpus": 4, "nodes": 1}]),
                    policy, CATALOG, fleet, EngineSettings(), booked=held)
        assert got.ok, (n, got.reason)  # 1 other + 2 for req-0 + 1 = 4
        two = admit(request(), policy, CATALOG, fleet, EngineSettings(), booked=held)
        assert not two.ok and two.reason.endswith("max_nodes 4 (holds 3, +2 would exceed)"), n


def test_the_tier_defaults_to_the_teams_and_may_not_rise_above_it():
    medium = make_policy(priority="medium")
    assert admit(request(), medium, CATALOG, [], EngineSettings()).preview()["tier"] == "medium"
    low = admit(request(tier="low"), medium, CATALOG, [], EngineSettings())
    assert low.ok and low.preview()["tier"] == "low"
    high = admit(request(tier="high"), medium, CATALOG, [], EngineSettings())
    assert not high.ok and high.reason.endswith(
        "refused: tier high is above team vision's priority medium")


def test_a_placement_group_places_the_request_in_its_cheapest_pool():
    from autoscaler.policy.models import TeamPolicy
    from tests.builders import make_pool_dict

    catalog = CATALOG.with_prices({"alicloud": {"ecs.gn6v-c8g1.8xlarge": {"on_demand": 10.40}}})
    pools = [make_pool_dict("east", instance_types=["p3.8xlarge"], placement_group="v100"),
             make_pool_dict("ali", cloud="alicloud", region="cn-hangzhou",
                            instance_types=["ecs.gn6v-c8g1.8xlarge"], placement_group="v100")]
    policy = TeamPolicy.model_validate({"team": "vision", "pools": pools})
    got = admit(request(), policy, catalog, [], EngineSettings())
    assert got.ok and [p.pool for p in got.placements] == ["vision/ali"]
    assert got.reason.endswith("(placement group v100: vision/ali (cn-hangzhou) $2.60/GPU-h chosen "
                               "over vision/east (us-east-1) $3.06/GPU-h)")
    assert [p.pool for p in booked([request().model_copy(update={"condition": Condition.ACCEPTED})],
                                   {"vision": policy}, catalog)] == ["vision/ali"]
    pools[0]["pin_region"] = True  # the first fitting pool keeps the request in its region
    pinned = TeamPolicy.model_validate({"team": "vision", "pools": pools})
    assert [p.pool for p in admit(request(), pinned, catalog, [], EngineSettings()).placements] == ["vision/east"]


@pytest.mark.parametrize("valid_until", ["1970-01-01T00:00:00Z", "0001-01-01T00:00:00+23:59",
                                         NOW.isoformat(), (NOW - timedelta(seconds=1)).isoformat()],
                         ids=["1970", "year-1", "now", "a-second-ago"])
def test_a_valid_until_not_after_now_is_refused_before_anything_is_placed(valid_until):
    """Accepted, its nodes would be launched and rolled back at the next tick."""
    got = admit(request(valid_until=valid_until), make_policy(), CATALOG, [], EngineSettings())
    assert not got.ok and got.invalid and got.placements == ()
    until = datetime.fromisoformat(valid_until.replace("Z", "+00:00")).isoformat()
    assert got.reason == ("request ci-4711 (team vision, atomic, 2 x 4 GPUs) refused: valid_until "
                          f"{until} is not after now (2026-11-30T12:00:00+00:00)")


def test_admission_measures_valid_until_against_the_now_it_is_given():
    soon = request(valid_until=(NOW + timedelta(minutes=10)).isoformat())
    assert admit(soon, make_policy(), CATALOG, [], EngineSettings()).ok  # now: its creation
    later = admit(soon, make_policy(), CATALOG, [], EngineSettings(), now=NOW + timedelta(minutes=10))
    assert not later.ok and later.invalid and "is not after now (2026-11-30T12:10:00+00:00)" in later.reason
    limited = admit(request(), make_policy(max_nodes=1), CATALOG, [], EngineSettings())
    assert not limited.ok and not limited.invalid  # a limit, not the body's fault
