"""Spot interruption intake: EventBridge-shaped events through a moto SQS queue."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.clouds.aws_events import MalformedEventError, parse_event
from autoscaler.clouds.base import InterruptionKind
from tests.clouds.helpers import rebalance, spot_warning

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def make_queue(endpoint: str, **attributes: str) -> tuple[object, str]:
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=endpoint)
    url = sqs.create_queue(QueueName="gpu-autoscaler-interruptions",
                           Attributes=attributes)["QueueUrl"]
    return sqs, url


def cloud_for(endpoint: str, queue_url: str) -> AwsCloud:
    return AwsCloud("us-east-1", settings=AwsSettings(endpoint_url=endpoint, queue_url=queue_url))


def queued(sqs: object, url: str) -> int:
    attrs = sqs.get_queue_attributes(  # type: ignore[attr-defined]
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                      "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"])


def test_interruptions_are_read_acked_and_malformed_ones_dropped(
        moto: str, caplog: pytest.LogCaptureFixture) -> None:
    sqs, url = make_queue(moto)
    sns_wrapped = json.dumps({"Type": "Notification", "MessageId": "m-1",
                              "Message": spot_warning("i-0bbbbbbbbbbbbbbbb")})
    state_change = json.dumps({"detail-type": "EC2 Instance State-change Notification",
                               "time": "2026-11-30T12:00:00Z",
                               "detail": {"instance-id": "i-0ccc", "state": "running"}})
    no_detail = json.dumps({"detail-type": "EC2 Spot Instance Interruption Warning"})
    for body in (spot_warning("i-0aaaaaaaaaaaaaaaa"), rebalance("i-0dddddddddddddddd"),
                 sns_wrapped, "{not json", no_detail, state_change):
        sqs.send_message(QueueUrl=url, MessageBody=body)

    with caplog.at_level(logging.WARNING, logger="autoscaler.clouds.aws_events"):
        got = cloud_for(moto, url).interruptions()

    by_id = {i.instance_id: i for i in got}
    assert set(by_id) == {"i-0aaaaaaaaaaaaaaaa", "i-0bbbbbbbbbbbbbbbb", "i-0dddddddddddddddd"}
    warning = by_id["i-0aaaaaaaaaaaaaaaa"]
    assert warning.kind is InterruptionKind.INTERRUPTION
    assert warning.at == AT and warning.deadline == AT + timedelta(minutes=2)
    assert "terminate" in warning.source
    assert by_id["i-0bbbbbbbbbbbbbbbb"].kind is InterruptionKind.INTERRUPTION  # via SNS
    assert by_id["i-0dddddddddddddddd"].kind is InterruptionKind.REBALANCE
    assert by_id["i-0dddddddddddddddd"].deadline is None
    malformed = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(malformed) == 2
    assert queued(sqs, url) == 0  # everything handled was deleted, the malformed too


def test_redelivered_notices_count_once(moto: str) -> None:
    sqs, url = make_queue(moto)
    for _ in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=spot_warning("i-0aaaaaaaaaaaaaaaa"))
    got = cloud_for(moto, url).interruptions()
    assert [i.instance_id for i in got] == ["i-0aaaaaaaaaaaaaaaa"]
    assert cloud_for(moto, url).interruptions() == []


def test_receive_without_ack_redelivers_after_the_visibility_timeout(moto: str) -> None:
    sqs, url = make_queue(moto, VisibilityTimeout="1")
    sqs.send_message(QueueUrl=url, MessageBody=spot_warning("i-0aaaaaaaaaaaaaaaa"))
    queue = cloud_for(moto, url).interruption_queue()
    assert queue is not None
    first = queue.receive()
    assert [r.interruption.instance_id for r in first if r.interruption] == ["i-0aaaaaaaaaaaaaaaa"]
    # A caller that crashed before ack() sees the notice again: nothing is lost.
    time.sleep(1.2)
    again = queue.receive()
    assert len(again) == 1
    queue.ack([r.receipt for r in again])
    assert queued(sqs, url) == 0


def test_no_queue_configured_means_no_notices(moto: str) -> None:
    assert AwsCloud("us-east-1", settings=AwsSettings(endpoint_url=moto)).interruptions() == []


@pytest.mark.parametrize("body, why", [
    ("[]", "not a JSON object"),
    (json.dumps({"time": "2026-11-30T12:00:00Z"}), "detail-type"),
    (json.dumps({"detail-type": "EC2 Spot Instance Interruption Warning",
                 "time": "2026-11-30T12:00:00Z"}), "detail"),
    (json.dumps({"detail-type": "EC2 Spot Instance Interruption Warning",
                 "time": "2026-11-30T12:00:00Z", "detail": {"instance-id": "vol-1"}}),
     "instance-id"),
    (json.dumps({"detail-type": "EC2 Instance Rebalance Recommendation",
                 "time": "yesterday", "detail": {"instance-id": "i-1"}}), "time"),
    (json.dumps({"detail-type": "EC2 Instance Rebalance Recommendation",
                 "time": "2026-11-30T12:00:00", "detail": {"instance-id": "i-1"}}), "timezone"),
])
def test_parse_event_rejects_what_it_cannot_trust(body: str, why: str) -> None:
    with pytest.raises(MalformedEventError, match=why):
        parse_event(body)
