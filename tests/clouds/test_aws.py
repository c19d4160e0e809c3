"""AwsCloud against a moto server on 127.0.0.1 (real boto3 requests over HTTP).

moto's spot price history is one fake row per zone, so ``spot_book`` serves our own rows
with real MaxResults/NextToken paging: what is tested is our pagination, caching and
filtering, not AWS's prices.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from autoscaler.catalog import load_catalog
from autoscaler.clouds import aws
from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.clouds.base import (
    CloudAuthError,
    CloudDataError,
    CloudUnreachableError,
    InstanceState,
    latest_spot,
)
from autoscaler.policy.models import Market
from autoscaler.sandbox.hosts.procs import free_port
from tests.clouds.helpers import AWS_TEST_ENV, NOW, FakeClock, SpotBook

AMI = "ami-1e749f67"
MANAGED = [{"Key": "managed-by", "Value": "gpu-autoscaler"}, {"Key": "team", "Value": "vision"},
           {"Key": "pool", "Value": "v100-train"}]


def make_cloud(endpoint: str, clock: FakeClock | None = None, **settings: object) -> AwsCloud:
    return AwsCloud("us-east-1", settings=AwsSettings(endpoint_url=endpoint, **settings),  # type: ignore[arg-type]
                    clock=clock or FakeClock())


def fill_book(book: SpotBook) -> None:
    """2 types x 3 zones x 4 hourly prices = 24 rows, plus a type nobody asks for."""
    for hours in range(4):
        at = NOW - timedelta(hours=hours)
        for zone, base in (("us-east-1a", 0.20), ("us-east-1b", 0.16), ("us-east-1c", 0.30)):
            book.add("g4dn.xlarge", zone, base + hours / 100, at)
            book.add("g4dn.12xlarge", zone, 4 * base + hours / 100, at)
    book.add("p3.16xlarge", "us-east-1a", 7.0)


def test_spot_history_follows_every_page(moto: str, spot_book: SpotBook) -> None:
    fill_book(spot_book)
    cloud = make_cloud(moto, spot_page_size=10)
    rows = cloud.spot_price_history(["g4dn.xlarge", "g4dn.12xlarge"])
    assert len(rows) == 24
    assert [r["next_token"] for r in spot_book.requests] == [0, 10, 20]
    first = spot_book.requests[0]
    assert first["types"] == ["g4dn.12xlarge", "g4dn.xlarge"]
    assert first["products"] == ["Linux/UNIX"] and first["max_results"] == 10
    assert first["start_time"] is not None  # the lookback window is sent
    latest = latest_spot(rows)
    assert latest[("g4dn.xlarge", "us-east-1b")].usd_per_hour == pytest.approx(0.16)
    assert latest[("g4dn.xlarge", "us-east-1b")].at == NOW
    assert {t for t, _ in latest} == {"g4dn.xlarge", "g4dn.12xlarge"}


def test_spot_history_is_cached_per_type_until_the_ttl(moto: str, spot_book: SpotBook) -> None:
    fill_book(spot_book)
    clock = FakeClock()
    cloud = make_cloud(moto, clock, spot_ttl=timedelta(minutes=5))
    cloud.spot_price_history(["g4dn.xlarge"])
    assert len(spot_book.requests) == 1
    # Another zone filter, same types: served from the cache, filtered here.
    clock.advance(timedelta(minutes=4))
    only_a = cloud.spot_price_history(["g4dn.xlarge"], zones=["us-east-1a"])
    assert {r.zone for r in only_a} == {"us-east-1a"} and len(only_a) == 4
    assert len(spot_book.requests) == 1
    # A new type is fetched alone; the cached one is not asked again.
    cloud.spot_price_history(["g4dn.xlarge", "g4dn.12xlarge"])
    assert spot_book.requests[-1]["types"] == ["g4dn.12xlarge"]
    assert len(spot_book.requests) == 2
    # Past the TTL the first type is read again.
    clock.advance(timedelta(minutes=2))
    cloud.spot_price_history(["g4dn.xlarge"])
    assert spot_book.requests[-1]["types"] == ["g4dn.xlarge"]
    assert cloud.api_calls["describe_spot_price_history"] == 3


def test_offerings_mark_zones_where_the_type_is_not_offered(moto: str) -> None:
    cloud = make_cloud(moto)
    offers = {(o.instance_type, o.zone): o for o in cloud.offerings(["g4dn.xlarge"])}
    # moto (like AWS) offers g4dn.xlarge in five us-east-1 zones, not in us-east-1e.
    assert offers[("g4dn.xlarge", "us-east-1a")].available is True
    assert offers[("g4dn.xlarge", "us-east-1e")].available is False
    assert offers[("g4dn.xlarge", "us-east-1e")].stock == "not-offered"
    calls = dict(cloud.api_calls)
    cloud.offerings(["g4dn.xlarge"])
    assert cloud.api_calls == calls  # cached


def test_type_unknown_to_the_region_is_offered_nowhere(moto: str) -> None:
    offers = make_cloud(moto).offerings(["p9.nonexistent"])
    assert offers and not any(o.available for o in offers)


def test_managed_instances_paginate_and_filter_by_tag_and_state(moto: str) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto)
    tagged = [{"ResourceType": "instance", "Tags": MANAGED}]
    ours = [ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="g4dn.xlarge",
                              TagSpecifications=tagged)["Instances"][0]["InstanceId"]
            for _ in range(11)]
    ec2.run_instances(ImageId=AMI, MinCount=3, MaxCount=3, InstanceType="g4dn.xlarge",
                      TagSpecifications=[{"ResourceType": "instance",
                                          "Tags": [{"Key": "owner", "Value": "someone-else"}]}])
    spot = ec2.run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="g4dn.xlarge",
        InstanceMarketOptions={"MarketType": "spot"}, Placement={"AvailabilityZone": "us-east-1b"},
        TagSpecifications=[{"ResourceType": "instance",
                            "Tags": [*MANAGED, {"Key": "node", "Value": "vision-v100-train-7"}]}],
    )["Instances"][0]
    gone = ours[:3]
    ec2.terminate_instances(InstanceIds=gone)

    cloud = make_cloud(moto, instances_page_size=5)
    live = cloud.managed_instances()
    assert len(live) == 9  # 11 - 3 terminated + 1 spot; the untagged ones are not ours
    assert cloud.api_calls["describe_instances"] == 2  # 9 reservations, 5 per page
    assert not set(gone) & {i.instance_id for i in live}
    node = next(i for i in live if i.instance_id == spot["InstanceId"])
    assert (node.node, node.team, node.pool) == ("vision-v100-train-7", "vision", "v100-train")
    assert node.market is Market.SPOT and node.zone == "us-east-1b"
    assert node.state is InstanceState.RUNNING and node.private_ip
    assert node.launched_at is not None and node.launched_at.tzinfo is not None
    ended = cloud.managed_instances(states=[InstanceState.TERMINATED])
    assert sorted(i.instance_id for i in ended) == sorted(gone)


def test_on_demand_prices_come_from_the_catalog_or_the_price_file(moto: str, tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("prices:\n  aws:\n    p3.2xlarge: {on_demand: 2.75}\n")
    cloud = AwsCloud("us-east-1", settings=AwsSettings(endpoint_url=moto),
                     catalog=load_catalog(prices))
    got = cloud.on_demand_prices(["p3.2xlarge", "g4dn.xlarge", "p9.nonexistent"])
    assert got == {"p3.2xlarge": 2.75, "g4dn.xlarge": 0.526}


def test_missing_credentials_name_the_variables(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask 169.254.169.254
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    cloud = make_cloud("http://127.0.0.1:9")
    with pytest.raises(CloudAuthError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        cloud.offerings(["g4dn.xlarge"])


def test_unreachable_endpoint_fails_fast_and_clearly(moto: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    cloud = make_cloud(dead, max_attempts=1)
    with pytest.raises(CloudUnreachableError, match=f"cannot reach {dead}"):
        cloud.spot_price_history(["g4dn.xlarge"])


# -- hostile answers (botocore Stubber: values no AWS endpoint sends, nothing on the network) --
@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> tuple[AwsCloud, Stubber]:
    for key, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(key, value)
    cloud = make_cloud("http://127.0.0.1:9")
    stubber = Stubber(cloud._client("ec2"))
    stubber.activate()
    return cloud, stubber


def spot_row(price: object, zone: str = "us-east-1a") -> dict[str, Any]:
    return {"InstanceType": "p3.2xlarge", "AvailabilityZone": zone, "SpotPrice": price,
            "Timestamp": NOW}


@pytest.mark.parametrize("price", ["abc", "", "nan", "-5", "inf", "1e400", "0", "-0"])
def test_a_spot_row_without_a_finite_price_above_zero_is_dropped_and_counted(
        stubbed: tuple[AwsCloud, Stubber], price: str, caplog: pytest.LogCaptureFixture) -> None:
    cloud, stubber = stubbed
    stubber.add_response("describe_spot_price_history", {"SpotPriceHistory": [
        spot_row(price), spot_row(price, "us-east-1c"), spot_row("0.918", "us-east-1b")]})
    with caplog.at_level(logging.WARNING, logger="autoscaler.clouds.aws"):
        got = cloud.spot_price_history(["p3.2xlarge"])
    assert [(p.zone, p.usd_per_hour) for p in got] == [("us-east-1b", 0.918)]
    # One line per read with the count, not one per row.
    assert [r.getMessage() for r in caplog.records] == [
        "aws us-east-1: dropped 2 spot price row(s) for p3.2xlarge: not a finite price above 0 "
        "with a type, zone and time"]


def test_a_spot_row_that_breaks_the_reading_is_a_cloud_data_error(
        stubbed: tuple[AwsCloud, Stubber], monkeypatch: pytest.MonkeyPatch) -> None:
    # The price signals keep the last good answer on a CloudError only: any other error
    # would end the control loop's tick.
    def broken(row: object) -> None:
        raise KeyError("SpotPrice")
    monkeypatch.setattr(aws, "_spot_row", broken)
    cloud, stubber = stubbed
    stubber.add_response("describe_spot_price_history", {"SpotPriceHistory": [spot_row("1")]})
    with pytest.raises(CloudDataError, match=r"^ec2 describe_spot_price_history in us-east-1: "
                       r"http://127\.0\.0\.1:9 answered something that is not an AWS response "
                       r"\(KeyError\)$"):
        cloud.spot_price_history(["p3.2xlarge"])


def instances(*raw: dict[str, Any]) -> dict[str, Any]:
    return {"Reservations": [{"Instances": list(raw)}]}


ID = "i-0123456789abcdef0"


@pytest.mark.parametrize("name", ["bogus", "", "Running", "terminated\n"])
def test_a_state_aws_never_sends_is_read_as_pending_not_gone(
        stubbed: tuple[AwsCloud, Stubber], name: str, caplog: pytest.LogCaptureFixture) -> None:
    cloud, stubber = stubbed
    stubber.add_response("describe_instances", instances(
        {"InstanceId": ID, "State": {"Name": name}},
        {"InstanceId": "i-0fedcba9876543210", "State": {"Name": "running"}}))
    with caplog.at_level(logging.WARNING, logger="autoscaler.clouds.aws"):
        got = cloud.managed_instances()
    assert [(i.instance_id, i.state) for i in got] == [
        (ID, InstanceState.PENDING), ("i-0fedcba9876543210", InstanceState.RUNNING)]
    assert [r.getMessage() for r in caplog.records] == [
        f"aws us-east-1: instance state(s) {name!r} are not AWS's: those instances are read as "
        "pending, not gone"]


@pytest.mark.parametrize("raw", [{"State": {"Name": "running"}},
                                 {"InstanceId": "", "State": {"Name": "running"}}])
def test_an_instance_without_an_id_makes_the_listing_unbelieved(
        stubbed: tuple[AwsCloud, Stubber], raw: dict[str, Any]) -> None:
    cloud, stubber = stubbed
    stubber.add_response("describe_instances", instances(
        {"InstanceId": ID, "State": {"Name": "running"}}, raw))
    with pytest.raises(CloudDataError, match=r"^ec2 describe_instances in us-east-1: an instance "
                       r"in the answer has no InstanceId$"):
        cloud.managed_instances()


def test_an_answer_without_reservations_is_no_evidence_that_instances_are_gone(
        stubbed: tuple[AwsCloud, Stubber]) -> None:
    """EC2 answers an empty reservationSet when nothing matches; no set at all is read as
    'none left' by nobody."""
    cloud, stubber = stubbed
    stubber.add_response("describe_instances", {})
    with pytest.raises(CloudDataError, match=r"^ec2 describe_instances in us-east-1: the answer "
                       r"has no Reservations$"):
        cloud.managed_instances()
    stubber.add_response("describe_instances", {"Reservations": []})
    assert cloud.managed_instances() == []


def test_a_tag_without_a_value_is_absent(stubbed: tuple[AwsCloud, Stubber]) -> None:
    cloud, stubber = stubbed
    stubber.add_response("describe_instances", instances(
        {"InstanceId": ID, "State": {"Name": "running"},
         "Tags": [{"Key": "node"}, {"Key": "team", "Value": "vision"}, {"Key": "pool", "Value": ""}]}))
    (got,) = cloud.managed_instances()
    assert (got.node, got.team, got.pool) == (None, "vision", "")
    assert dict(got.tags) == {"team": "vision", "pool": ""}


@pytest.mark.parametrize("launched", ["1970-01-01T00:00:00Z", datetime(1970, 1, 1),
                                      datetime(9999, 1, 1)])
def test_a_launch_time_that_is_not_an_aware_time_is_none(
        stubbed: tuple[AwsCloud, Stubber], launched: object) -> None:
    """A string or a naive time cannot be compared with our clock: no launch time at all."""
    cloud, stubber = stubbed
    stubber.add_response("describe_instances", instances(
        {"InstanceId": ID, "State": {"Name": "running"}, "LaunchTime": launched}))
    (got,) = cloud.managed_instances()
    assert got.launched_at is None


def test_an_aware_launch_time_is_kept(stubbed: tuple[AwsCloud, Stubber]) -> None:
    cloud, stubber = stubbed
    stubber.add_response("describe_instances", instances(
        {"InstanceId": ID, "State": {"Name": "running"}, "LaunchTime": datetime(1970, 1, 1, tzinfo=UTC)}))
    (got,) = cloud.managed_instances()
    assert got.launched_at == datetime(1970, 1, 1, tzinfo=UTC)  # its bounds are the adopter's
