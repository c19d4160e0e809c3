"""Spot placement scores (AwsCloud.spot_placement_scores) against a moto server on
127.0.0.1: moto answers DescribeAvailabilityZones (names and ids) itself, and ``score_book``
answers GetSpotPlacementScores, which moto does not, in AWS's shape over real HTTP."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.clouds.base import CloudAuthError
from tests.clouds.helpers import FakeClock, ScoreBook

V100 = ["p3.8xlarge", "p3.2xlarge", "p3.16xlarge"]


def scored(endpoint: str, clock: FakeClock | None = None, **settings: object) -> AwsCloud:
    return AwsCloud("us-east-1", clock=clock or FakeClock(), settings=AwsSettings(
        endpoint_url=endpoint, spot_scores=True, max_attempts=1, **settings))  # type: ignore[arg-type]


def row(zone_id: str, score: object, region: str = "us-east-1") -> dict[str, object]:
    return {"Region": region, "AvailabilityZoneId": zone_id, "Score": score}


def test_scores_come_per_zone_name_for_the_whole_set_of_types_and_are_kept_for_the_ttl(
        moto: str, score_book: ScoreBook) -> None:
    # moto's us-east-1: use1-az6 is us-east-1a, use1-az1 us-east-1b, use1-az2 us-east-1c.
    score_book.rows = [row("use1-az6", 9), row("use1-az1", 2), row("use1-az2", 5)]
    clock = FakeClock()
    cloud = scored(moto, clock)
    assert cloud.spot_placement_scores(V100) == {"us-east-1a": 9, "us-east-1b": 2, "us-east-1c": 5}
    (asked,) = score_book.requests
    assert asked == {"types": sorted(V100), "capacity": 1, "unit": "units", "single_az": True,
                     "regions": ["us-east-1"], "next_token": 0}
    clock.advance(timedelta(minutes=9))
    assert cloud.spot_placement_scores(reversed(V100)) == {"us-east-1a": 9, "us-east-1b": 2, "us-east-1c": 5}
    assert len(score_book.requests) == 1  # one configuration, asked again only after the TTL
    clock.advance(timedelta(minutes=2))
    cloud.spot_placement_scores(V100)
    assert len(score_book.requests) == 2


def test_every_page_is_read(moto: str, score_book: ScoreBook) -> None:
    ids = ["use1-az6", "use1-az1", "use1-az2", "use1-az4", "use1-az3", "use1-az5"]
    score_book.rows = [row(z, 1 + i) for i, z in enumerate(ids)] * 3  # AWS's pages: 10 rows
    assert scored(moto).spot_placement_scores(V100) == {
        "us-east-1a": 1, "us-east-1b": 2, "us-east-1c": 3, "us-east-1d": 4, "us-east-1e": 5, "us-east-1f": 6}
    assert [r["next_token"] for r in score_book.requests] == [0, 10]


def test_nothing_is_asked_when_scores_are_off_or_for_fewer_than_three_types(
        moto: str, score_book: ScoreBook) -> None:
    score_book.rows = [row("use1-az6", 9)]
    off = AwsCloud("us-east-1", clock=FakeClock(), settings=AwsSettings(endpoint_url=moto))
    assert off.spot_placement_scores(V100) is None
    # AWS: with one or two types "the returned placement score will always be low".
    assert scored(moto).spot_placement_scores(["p3.2xlarge", "p3.8xlarge", "p3.2xlarge"]) is None
    assert score_book.requests == []


def test_a_row_no_aws_answer_could_hold_is_dropped_and_logged(
        moto: str, score_book: ScoreBook, caplog: pytest.LogCaptureFixture) -> None:
    score_book.rows = [row("use1-az6", 8), row("use1-az1", 0), row("use1-az2", 11),
                       row("usw2-az1", 9, region="us-west-2"), row("use1-az99", 9), row("use1-az4", 4)]
    with caplog.at_level(logging.WARNING):
        assert scored(moto).spot_placement_scores(V100) == {"us-east-1a": 8, "us-east-1d": 4}
    assert "dropped 4 Spot placement score row(s)" in caplog.text


def test_a_missing_permission_names_it(moto: str, score_book: ScoreBook) -> None:
    score_book.error = "UnauthorizedOperation"
    with pytest.raises(CloudAuthError, match="need ec2:GetSpotPlacementScores in the service's IAM policy"):
        scored(moto).spot_placement_scores(V100)
