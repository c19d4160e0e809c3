"""An endpoint that is not AWS (a proxy's HTML, bytes, JSON of another shape or depth):
botocore's parsers raise ResponseParserError, KeyError, UnicodeDecodeError, AttributeError
or RecursionError, none of them a BotoCoreError. Each call says so as a CloudDataError."""

from __future__ import annotations

import pytest

from autoscaler.clouds import CloudDataError
from autoscaler.clouds.aws import AwsCloud, AwsSettings
from tests.hostile_answers import HOSTILE, AnswerServer

NOT_AWS = ["html-200", "garbage-bytes", "empty-200", "json-list", "json-deep", "json-huge"]


@pytest.mark.exhausts_stack
@pytest.mark.parametrize("answer", NOT_AWS)
def test_an_answer_that_is_not_aws_is_a_cloud_data_error(
        answers: AnswerServer, answer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    answers.reply = HOSTILE[answer]
    cloud = AwsCloud("us-east-1", settings=AwsSettings(
        endpoint_url=answers.url, queue_url=f"{answers.url}/123456789012/q", max_attempts=1))
    calls = [cloud.account_id, lambda: cloud.allowed("terminate_instances", InstanceIds=["i-1"]),
             lambda: cloud.queue_attributes(["QueueArn"]), cloud.zones]
    for call in calls:
        try:
            call()
        except CloudDataError as exc:
            assert answers.url in str(exc) or "DryRun" in str(exc)
        else:  # an answer botocore reads as success: it must not look like a real one
            assert call is not cloud.account_id
