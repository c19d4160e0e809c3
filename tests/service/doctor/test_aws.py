"""The doctor's Spot placement score check against a moto server on 127.0.0.1, whose
GetSpotPlacementScores ``score_book`` answers as AWS does (DryRunOperation when allowed)."""

from __future__ import annotations

from pathlib import Path

from autoscaler.catalog import default_catalog
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.doctor.aws import spot_scores
from autoscaler.service.doctor.context import Context
from autoscaler.service.doctor.report import Status
from tests.builders import make_pool_dict
from tests.clouds import helpers
from tests.clouds.helpers import ScoreBook

moto_url, moto, score_book = helpers.moto_url, helpers.moto, helpers.score_book
V100 = ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]


def context(endpoint: str, on: bool, **pool: object) -> Context:
    config = ServiceConfig.model_validate({"policies_dir": "p", "clouds": {"aws": {
        "endpoint_url": endpoint, "spot_placement_scores": on}}})
    team = TeamPolicy.model_validate({"team": "vision", "pools": [make_pool_dict(
        "v100", region="us-east-1", **{"zones": ["us-east-1a"], "instance_types": V100, **pool})]})
    return Context(Path("config.yaml"), config, default_catalog(), {"vision": team})


def test_the_score_check_asks_with_dry_run_and_names_a_missing_permission(
        moto: str, score_book: ScoreBook) -> None:
    [row] = spot_scores(context(moto, on=False))
    assert row.status is Status.SKIP and "spot_placement_scores is off" in row.reason
    [row] = spot_scores(context(moto, on=True, instance_types=V100[:2]))
    assert row.status is Status.SKIP and "3 or more instance types" in row.reason
    assert score_book.requests == []

    [row] = spot_scores(context(moto, on=True))
    assert (row.name, row.status) == ("spot scores us-east-1", Status.OK), row
    assert "allowed (DryRun)" in row.reason
    assert score_book.requests[-1]["types"] == sorted(V100)
    score_book.error = "UnauthorizedOperation"
    [row] = spot_scores(context(moto, on=True))
    assert row.status is Status.FAIL and "get_spot_placement_scores" in row.reason
    assert "not allowed for these credentials (UnauthorizedOperation): grant ec2:GetSpotPlacementScores" in row.reason
