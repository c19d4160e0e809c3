"""AwsCloud.images_tagged: the account's own available images with a bootstrap hash, newest
first, the answer checked (signals/images.py reads a baked pool's image through it)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.clouds.base import CloudApiError, MachineImage
from tests.clouds.helpers import AWS_TEST_ENV, FakeClock

TAG = "gpu-autoscaler/bootstrap-hash"
HASH = "0123456789ab"
AMI = "ami-1e749f67"


def row(image_id: object, created: object = "2026-11-30T10:00:00.000Z", *,
        tags: object = None, state: str = "available") -> dict[str, Any]:
    return {"ImageId": image_id, "CreationDate": created, "State": state,
            "Tags": [{"Key": TAG, "Value": HASH}] if tags is None else tags}


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> tuple[AwsCloud, Stubber]:
    for key, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(key, value)
    cloud = AwsCloud("us-east-1", settings=AwsSettings(endpoint_url="http://127.0.0.1:9"),
                     clock=FakeClock())
    stubber = Stubber(cloud._client("ec2"))
    stubber.activate()
    return cloud, stubber


EXPECTED = {"Owners": ["self"], "Filters": [{"Name": f"tag:{TAG}", "Values": [HASH]},
                                            {"Name": "state", "Values": ["available"]}]}


def test_newest_first_across_pages_and_the_request_asks_for_own_available_tagged_images(
        stubbed: tuple[AwsCloud, Stubber]) -> None:
    cloud, stubber = stubbed
    stubber.add_response("describe_images", {"Images": [
        row("ami-0aaaaaaa", "2026-11-28T10:00:00.000Z"),
        row("ami-0ccccccc", "not a date")], "NextToken": "t2"}, EXPECTED)
    stubber.add_response("describe_images", {"Images": [row("ami-0bbbbbbb", "2026-11-30T10:00:00.000Z")]},
                         {**EXPECTED, "NextToken": "t2"})
    got = cloud.images_tagged(TAG, HASH)
    assert got == [MachineImage("ami-0bbbbbbb", datetime(2026, 11, 30, 10, tzinfo=UTC)),
                   MachineImage("ami-0aaaaaaa", datetime(2026, 11, 28, 10, tzinfo=UTC)),
                   MachineImage("ami-0ccccccc", None)]  # no readable date: last
    assert cloud.api_calls["describe_images"] == 2
    stubber.assert_no_pending_responses()


@pytest.mark.parametrize("hostile", [
    row("ami-0ddddddd; rm -rf /"), row("${file(\"/etc/passwd\")}"), row("ami-"), row("ami-0DDDDDDD"),
    row("m-0123456789"), row("ami-" + "0" * 200),
    row("ami-0eeeeeee", tags=[{"Key": TAG, "Value": "ffffffffffff"}]),  # another hash: lax endpoint
    row("ami-0eeeeeee", tags=[]), row("ami-0eeeeeee", state="pending"),
])
def test_a_hostile_or_unasked_image_is_left_out(stubbed: tuple[AwsCloud, Stubber],
                                                hostile: dict[str, Any]) -> None:
    cloud, stubber = stubbed
    stubber.add_response("describe_images", {"Images": [hostile, row(AMI)]}, EXPECTED)
    assert [i.image_id for i in cloud.images_tagged(TAG, HASH)] == [AMI]


def test_an_error_is_a_cloud_error(stubbed: tuple[AwsCloud, Stubber]) -> None:
    cloud, stubber = stubbed
    stubber.add_client_error("describe_images", "RequestLimitExceeded", "slow down")
    with pytest.raises(CloudApiError, match="RequestLimitExceeded"):
        cloud.images_tagged(TAG, HASH)


def test_against_moto_only_own_images_with_the_hash_are_listed(moto: str) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto)
    instance = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1,
                                 InstanceType="g4dn.xlarge")["Instances"][0]["InstanceId"]
    made = {}
    for name, value in (("ours", HASH), ("other", "ffffffffffff")):
        made[name] = ec2.create_image(InstanceId=instance, Name=name, TagSpecifications=[
            {"ResourceType": "image", "Tags": [{"Key": TAG, "Value": value}]}])["ImageId"]
    cloud = AwsCloud("us-east-1", settings=AwsSettings(endpoint_url=moto), clock=FakeClock())
    assert [i.image_id for i in cloud.images_tagged(TAG, HASH)] == [made["ours"]]
    assert cloud.images_tagged(TAG, "aaaaaaaaaaaa") == []
