"""The patched moto server: p3 types, adopted spot requests, capacity faults, Spot placement
scores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.sandbox.services.moto_server import MOTO_AMI, MotoSandbox, SpotScoreRule, running_instances

pytestmark = pytest.mark.slow

SPOT_OPTIONS = {"MarketType": "spot", "SpotOptions": {
    "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoSandbox]:
    with MotoSandbox(tmp_path_factory.mktemp("moto")) as sb:
        yield sb


@pytest.fixture
def ec2(sandbox: MotoSandbox) -> Iterator[Any]:
    sandbox.reset()
    sandbox.clear_faults()
    sandbox.set_spot_scores([])
    yield sandbox.client()
    sandbox.clear_faults()
    sandbox.set_spot_scores([])


def launch(ec2: Any, itype: str, spot: bool = False, zone: str | None = None) -> dict[str, Any]:
    kw: dict[str, Any] = {"InstanceMarketOptions": SPOT_OPTIONS} if spot else {}
    if zone:
        kw["Placement"] = {"AvailabilityZone": zone}
    resp = ec2.run_instances(ImageId=MOTO_AMI, MinCount=1, MaxCount=1, InstanceType=itype, **kw)
    return dict(resp["Instances"][0])


def test_server_listens_on_loopback_only(sandbox: MotoSandbox) -> None:
    assert sandbox.endpoint.startswith("http://127.0.0.1:")
    assert sandbox.env()["AWS_ENDPOINT_URL"] == sandbox.endpoint


def test_p3_types_are_described_and_offered(ec2: Any) -> None:
    types = ec2.describe_instance_types(InstanceTypes=["p3.2xlarge", "p3.8xlarge"])
    by_name = {t["InstanceType"]: t for t in types["InstanceTypes"]}
    assert by_name["p3.2xlarge"]["VCpuInfo"]["DefaultVCpus"] == 8
    assert by_name["p3.2xlarge"]["GpuInfo"]["Gpus"][0]["Name"] == "V100"
    assert by_name["p3.8xlarge"]["GpuInfo"]["Gpus"][0]["Count"] == 4
    offers = ec2.describe_instance_type_offerings(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": ["p3.2xlarge"]}])["InstanceTypeOfferings"]
    assert "us-east-1a" in {o["Location"] for o in offers}


def test_spot_launch_gets_a_spot_request_like_ec2(ec2: Any) -> None:
    spot = launch(ec2, "p3.2xlarge", spot=True)
    on_demand = launch(ec2, "g4dn.xlarge")
    described = {i["InstanceId"]: i for i in running_instances(ec2)}
    assert described[spot["InstanceId"]]["InstanceLifecycle"] == "spot"
    request_id = described[spot["InstanceId"]]["SpotInstanceRequestId"]
    [request] = ec2.describe_spot_instance_requests(
        SpotInstanceRequestIds=[request_id])["SpotInstanceRequests"]
    assert request["InstanceId"] == spot["InstanceId"] and request["State"] == "active"
    assert "InstanceLifecycle" not in described[on_demand["InstanceId"]]


def test_capacity_fault_hits_only_the_matching_type_zone_and_market(
        sandbox: MotoSandbox, ec2: Any) -> None:
    sandbox.fail_capacity("p3.2xlarge", zone="us-east-1a", market="spot")
    with pytest.raises(ClientError) as info:
        launch(ec2, "p3.2xlarge", spot=True, zone="us-east-1a")
    assert info.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"
    assert "p3.2xlarge" in info.value.response["Error"]["Message"]
    launch(ec2, "p3.2xlarge", spot=False, zone="us-east-1a")  # other market
    launch(ec2, "p3.2xlarge", spot=True, zone="us-east-1b")  # other zone
    launch(ec2, "g4dn.xlarge", spot=True, zone="us-east-1a")  # other type
    sandbox.clear_faults()
    launch(ec2, "p3.2xlarge", spot=True, zone="us-east-1a")
    assert len(running_instances(ec2)) == 4


def test_fault_codes_and_wildcards(sandbox: MotoSandbox, ec2: Any) -> None:
    sandbox.fail_capacity(market="spot", code="MaxSpotInstanceCountExceeded")
    with pytest.raises(ClientError) as info:
        launch(ec2, "g4dn.xlarge", spot=True)
    assert info.value.response["Error"]["Code"] == "MaxSpotInstanceCountExceeded"
    assert launch(ec2, "g4dn.xlarge")["InstanceType"] == "g4dn.xlarge"


def test_running_instances_skips_terminated_and_filters_tags(ec2: Any) -> None:
    keep = launch(ec2, "g4dn.xlarge")
    gone = launch(ec2, "g4dn.xlarge")
    ec2.create_tags(Resources=[keep["InstanceId"], gone["InstanceId"]],
                    Tags=[{"Key": "pool", "Value": "t4"}])
    ec2.terminate_instances(InstanceIds=[gone["InstanceId"]])
    assert [i["InstanceId"] for i in running_instances(ec2, pool="t4")] == [keep["InstanceId"]]
    assert running_instances(ec2, pool="other") == []


def test_a_repeated_client_token_gets_the_first_reservation_back_as_from_ec2(ec2: Any) -> None:
    """The SDKs keep a RunInstances' token across their retries: a retry launches nothing."""
    kw: dict[str, Any] = {"ImageId": MOTO_AMI, "MinCount": 1, "MaxCount": 1,
                          "InstanceType": "g4dn.xlarge",
                          "TagSpecifications": [{"ResourceType": "instance", "Tags": [
                              {"Key": "pool", "Value": "retried"}]}]}
    first = ec2.run_instances(ClientToken="retry-1", **kw)
    again = ec2.run_instances(ClientToken="retry-1", **kw)
    assert again["ReservationId"] == first["ReservationId"]
    assert [i["InstanceId"] for i in again["Instances"]] == [
        i["InstanceId"] for i in first["Instances"]]
    other = ec2.run_instances(**kw)  # botocore fills in a token of its own
    assert other["Instances"][0]["ClientToken"] not in ("", "retry-1", "ABCDE")
    assert sorted(i["InstanceId"] for i in running_instances(ec2, pool="retried")) == sorted(
        [first["Instances"][0]["InstanceId"], other["Instances"][0]["InstanceId"]])


def test_a_repeated_create_image_gets_the_first_image_and_a_used_name_is_refused(ec2: Any) -> None:
    """CreateImage has no token: a repeat from the same instance (in the sandbox, an SDK
    retry) gets the first image back; another instance's image under that name is refused
    with EC2's code."""
    a, b = launch(ec2, "g4dn.xlarge"), launch(ec2, "g4dn.xlarge")
    tags = [{"ResourceType": "image", "Tags": [{"Key": "bake", "Value": "retried"}]}]
    first = ec2.create_image(InstanceId=a["InstanceId"], Name="bake-retried-1",
                             TagSpecifications=tags)["ImageId"]
    again = ec2.create_image(InstanceId=a["InstanceId"], Name="bake-retried-1",
                             TagSpecifications=tags)["ImageId"]
    assert again == first
    with pytest.raises(ClientError, match=r"InvalidAMIName\.Duplicate"):
        ec2.create_image(InstanceId=b["InstanceId"], Name="bake-retried-1")
    other = ec2.create_image(InstanceId=a["InstanceId"], Name="bake-retried-2",
                             TagSpecifications=tags)["ImageId"]
    found = ec2.describe_images(Owners=["self"], Filters=[
        {"Name": "tag:bake", "Values": ["retried"]}])["Images"]
    assert sorted(i["ImageId"] for i in found) == sorted([first, other])


def test_tags_read_from_the_resource_answer_as_moto_does(ec2: Any) -> None:
    """The patched lookup (moto scanned every tag per instance: quadratic over a describe)
    gives the same tags, sees added and deleted ones, and filters by them."""
    a, b = launch(ec2, "g4dn.xlarge"), launch(ec2, "g4dn.xlarge")
    ec2.create_tags(Resources=[a["InstanceId"]], Tags=[{"Key": "pool", "Value": "tagcheck"},
                                                       {"Key": "node", "Value": "n-1"}])
    ec2.create_tags(Resources=[b["InstanceId"]], Tags=[{"Key": "pool", "Value": "tagcheck"}])
    ec2.delete_tags(Resources=[b["InstanceId"]], Tags=[{"Key": "pool"}])
    found = ec2.describe_instances(Filters=[{"Name": "tag:pool", "Values": ["tagcheck"]}])
    [inst] = [i for r in found["Reservations"] for i in r["Instances"]]
    assert inst["InstanceId"] == a["InstanceId"]
    assert {t["Key"]: t["Value"] for t in inst["Tags"]} == {"pool": "tagcheck", "node": "n-1"}
    described = ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [a["InstanceId"]]}])
    assert {(t["Key"], t["Value"], t["ResourceType"]) for t in described["Tags"]} == {
        ("pool", "tagcheck", "instance"), ("node", "n-1", "instance")}


def test_spot_placement_scores_are_answered_as_ec2_shapes_them(
        sandbox: MotoSandbox, ec2: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The score file, by zone name, is answered by zone id, per region, for the set of
    types asked (a rule naming other types does not count), in pages; the product's adapter
    reads the region's part back by name. A DryRun is DryRunOperation, as from EC2."""
    three = ("p3.2xlarge", "p3.8xlarge", "p3.16xlarge")
    ids = {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    sandbox.set_spot_scores([SpotScoreRule("us-east-1", "us-east-1a", 9),
                             SpotScoreRule("us-east-1", "us-east-1b", 2, three),
                             SpotScoreRule("us-east-1", "us-east-1c", 7, ("g4dn.xlarge",)),
                             SpotScoreRule("us-west-2", "us-west-2a", 5)])
    ask = {"InstanceTypes": list(three), "TargetCapacity": 1, "SingleAvailabilityZone": True}
    rows = ec2.get_spot_placement_scores(RegionNames=["us-east-1"], **ask)["SpotPlacementScores"]
    assert sorted((r["Region"], r["AvailabilityZoneId"], r["Score"]) for r in rows) == sorted([
        ("us-east-1", ids["us-east-1a"], 9), ("us-east-1", ids["us-east-1b"], 2)])
    by_region = ec2.get_spot_placement_scores(InstanceTypes=list(three), TargetCapacity=1)
    assert sorted((r["Region"], r["Score"]) for r in by_region["SpotPlacementScores"]) == [
        ("us-east-1", 9), ("us-west-2", 5)]
    # Eleven zones, more than a page (at least 10 rows): each is read once across two pages.
    zones = [(region, f"{region}{z}") for region in ("us-east-1", "us-east-2", "us-west-2")
             for z in "abc"]
    sandbox.set_spot_scores([SpotScoreRule(r, z, 4) for r, z in zones] * 2 + [
        SpotScoreRule("us-east-1", "us-east-1d", 3), SpotScoreRule("us-east-1", "us-east-1e", 3)])
    pages = list(ec2.get_paginator("get_spot_placement_scores").paginate(
        PaginationConfig={"PageSize": 10}, **ask))
    every = [(r["Region"], r["AvailabilityZoneId"]) for p in pages for r in p["SpotPlacementScores"]]
    assert len(pages) == 2 and len(every) == len(set(every)) == 11
    with pytest.raises(ClientError, match="DryRunOperation"):
        ec2.get_spot_placement_scores(DryRun=True, **ask)
    for key, value in sandbox.env().items():
        monkeypatch.setenv(key, value)
    cloud = AwsCloud("us-east-1", settings=AwsSettings(endpoint_url=sandbox.endpoint,
                                                       spot_scores=True))
    assert cloud.spot_placement_scores(three) == {
        "us-east-1a": 4, "us-east-1b": 4, "us-east-1c": 4, "us-east-1d": 3, "us-east-1e": 3}


def test_stop_ends_the_process(tmp_path: Path) -> None:
    sb = MotoSandbox(tmp_path).start()
    proc = sb.proc
    sb.stop()
    assert proc is not None and not proc.alive()


def test_iam_enforcement_checks_batch_calls_as_aws_does(tmp_path: Path) -> None:
    """Under enforce_iam, DeleteMessageBatch needs sqs:DeleteMessage (as on AWS), and an
    action the caller's policy does not grant is refused. Its own server: enforcement
    would refuse the fake keys the other tests use."""
    with MotoSandbox(tmp_path / "moto") as sb:
        url = sb.client("sqs").create_queue(QueueName="q")["QueueUrl"]
        arn = sb.client("sqs").get_queue_attributes(
            QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        iam = sb.client("iam")
        iam.create_user(UserName="reader")
        iam.put_user_policy(UserName="reader", PolicyName="p", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": arn, "Action": [
                "sqs:ReceiveMessage", "sqs:DeleteMessage"]}]}))
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        sb.client("sqs").send_message(QueueUrl=url, MessageBody="m")
        sb.enforce_iam()
        sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=sb.endpoint,
                           aws_access_key_id=key["AccessKeyId"],
                           aws_secret_access_key=key["SecretAccessKey"])
        [msg] = sqs.receive_message(QueueUrl=url)["Messages"]
        done = sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": "0", "ReceiptHandle": msg["ReceiptHandle"]}])
        assert [e["Id"] for e in done["Successful"]] == ["0"]
        with pytest.raises(ClientError, match="AccessDenied"):
            sqs.send_message(QueueUrl=url, MessageBody="not granted")
