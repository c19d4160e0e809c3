"""The interruption queue on moto's SQS: notices read and acked, refused messages logged once
and deleted (or dead-lettered), the fleet's account from STS."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import boto3
import pytest

from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.clouds.aws_events import Trust
from autoscaler.clouds.aws_queue import SqsInterruptionQueue
from autoscaler.clouds.base import CloudError, InterruptionKind
from tests.clouds.helpers import NOW, FakeClock, rebalance, spot_warning

A, B, D = "i-0aaaaaaaaaaaaaaaa", "i-0bbbbbbbbbbbbbbbb", "i-0dddddddddddddddd"


def make_queue(endpoint: str, name: str = "gpu-autoscaler-interruptions",
               **attributes: str) -> tuple[Any, str]:
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=endpoint)
    return sqs, sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]


def cloud_for(endpoint: str, queue_url: str, **settings: Any) -> AwsCloud:
    return AwsCloud("us-east-1", clock=FakeClock(NOW), settings=AwsSettings(
        endpoint_url=endpoint, queue_url=queue_url, **settings))


def queue_of(cloud: AwsCloud) -> SqsInterruptionQueue:
    queue = cloud.interruption_queue()
    assert queue is not None
    return queue


def queued(sqs: Any, url: str) -> int:
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return sum(int(v) for v in attrs.values())


def test_notices_are_read_and_refused_messages_logged_once_and_deleted(
        moto: str, caplog: pytest.LogCaptureFixture) -> None:
    sqs, url = make_queue(moto)
    sns_wrapped = json.dumps({"Type": "Notification", "MessageId": "m-1",
                              "Message": spot_warning(B)})
    state_change = json.dumps({**json.loads(spot_warning(A)), "detail-type":
                               "EC2 Instance State-change Notification"})
    forged = json.dumps({**json.loads(spot_warning(A)), "account": "999999999999"})
    poison = "[" * 100_000
    for body in (spot_warning(A), rebalance(D), sns_wrapped, "{not json\x1b[2J", poison,
                 state_change, forged):
        sqs.send_message(QueueUrl=url, MessageBody=body)

    with caplog.at_level(logging.DEBUG, logger="autoscaler.clouds.aws_queue"):
        received = queue_of(cloud_for(moto, url)).receive()

    by_id = {r.interruption.instance_id: r.interruption for r in received if r.interruption}
    assert set(by_id) == {A, B, D}
    assert by_id[B].kind is InterruptionKind.INTERRUPTION  # via SNS
    assert by_id[D].kind is InterruptionKind.REBALANCE and by_id[D].deadline is None
    assert sorted(r.rejected for r in received if r.rejected) == ["forged", "malformed",
                                                                 "malformed"]
    refused = [r for r in caplog.records if r.getMessage().startswith("refused")]
    assert len(refused) == 3 and not any(r.exc_info for r in caplog.records)
    assert all(len(r.getMessage()) < 500 and "\x1b" not in r.getMessage() for r in refused)
    assert queued(sqs, url) == 4  # refused ones deleted at once; the rest waits for its ack
    queue_of(cloud_for(moto, url)).ack([r.receipt for r in received])
    assert queued(sqs, url) == 0


def test_refused_messages_go_to_the_dead_letter_queue_when_there_is_one(moto: str) -> None:
    sqs, url = make_queue(moto)
    _, dlq = make_queue(moto, "gpu-autoscaler-refused")
    forged = json.dumps({**json.loads(spot_warning(A)), "source": "my.app"})
    for body in ("{not json", forged, spot_warning(A)):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    notices = cloud_for(moto, url, dead_letter_url=dlq).interruptions()
    assert [n.instance_id for n in notices] == [A]
    kept = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10,
                               MessageAttributeNames=["All"])["Messages"]
    assert sorted((m["Body"], m["MessageAttributes"]["refused"]["StringValue"]) for m in kept) \
        == sorted([("{not json", "malformed"), (forged, "forged")])
    assert queued(sqs, url) == 0


def test_the_fleets_account_comes_from_sts_unless_configured(moto: str) -> None:
    sqs, url = make_queue(moto)
    assert cloud_for(moto, url).notice_trust().account == "123456789012"  # moto's account
    mine = cloud_for(moto, url, account_id="210987654321")
    assert mine.notice_trust().account == "210987654321"
    sqs.send_message(QueueUrl=url, MessageBody=spot_warning(A))  # from 123456789012
    [received] = queue_of(mine).receive()
    assert received.rejected == "forged" and queued(sqs, url) == 0


def test_notice_regions_default_to_the_adapters_own(moto: str) -> None:
    _, url = make_queue(moto)
    assert cloud_for(moto, url).notice_trust().regions == {"us-east-1"}
    both = cloud_for(moto, url, notice_regions=frozenset({"us-east-1", "us-west-2"}))
    assert both.notice_trust().regions == {"us-east-1", "us-west-2"}


def test_redelivered_notices_count_once(moto: str) -> None:
    sqs, url = make_queue(moto)
    for _ in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=spot_warning(A))
    assert [i.instance_id for i in cloud_for(moto, url).interruptions()] == [A]
    assert cloud_for(moto, url).interruptions() == []


def test_receive_without_ack_redelivers_after_the_visibility_timeout(moto: str) -> None:
    sqs, url = make_queue(moto, VisibilityTimeout="1")
    sqs.send_message(QueueUrl=url, MessageBody=spot_warning(A))
    queue = queue_of(cloud_for(moto, url))
    first = queue.receive()
    assert [r.interruption.instance_id for r in first if r.interruption] == [A]
    # A caller that crashed before ack() sees the notice again: nothing is lost.
    deadline = time.monotonic() + 10
    again = queue.receive()
    while not again and time.monotonic() < deadline:
        again = queue.receive()
    assert len(again) == 1
    queue.ack([r.receipt for r in again])
    assert queued(sqs, url) == 0


def test_no_queue_configured_means_no_notices(moto: str) -> None:
    assert AwsCloud("us-east-1", settings=AwsSettings(endpoint_url=moto)).interruptions() == []


def test_until_the_account_is_known_nothing_is_read_or_deleted(moto: str) -> None:
    sqs, url = make_queue(moto)
    sqs.send_message(QueueUrl=url, MessageBody=spot_warning(A))

    def unknown() -> Trust:
        raise CloudError("sts GetCallerIdentity: cannot reach the endpoint")

    queue = SqsInterruptionQueue(sqs, url, unknown, FakeClock(NOW))
    with pytest.raises(CloudError):
        queue.receive()
    assert queued(sqs, url) == 1  # still there for the pass that can check it


def test_a_dead_letter_queue_that_fails_does_not_keep_refused_messages(
        moto: str, caplog: pytest.LogCaptureFixture) -> None:
    sqs, url = make_queue(moto)
    sqs.send_message(QueueUrl=url, MessageBody="{not json")
    gone = url.rsplit("/", 1)[0] + "/no-such-queue"
    with caplog.at_level(logging.WARNING, logger="autoscaler.clouds.aws_queue"):
        [received] = queue_of(cloud_for(moto, url, dead_letter_url=gone)).receive()
    assert received.rejected == "malformed" and queued(sqs, url) == 0
    assert any("could not dead-letter" in r.getMessage() for r in caplog.records)
