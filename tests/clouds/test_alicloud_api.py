"""What the Alibaba SDK logs about a request, with the service's logging at DEBUG."""

from __future__ import annotations

import io
import json
import logging

import pytest

from autoscaler.cli.logs import LOG_FORMAT, OneLineFormatter
from autoscaler.clouds.alicloud import AlicloudCloud, AlicloudSettings
from autoscaler.clouds.alicloud_api import Credentials, redact
from autoscaler.clouds.base import CloudDataError
from tests.clouds.helpers import FakeClock
from tests.hostile_answers import AnswerServer, Reply

KEY_ID, SECRET = "LTAI5tTestKeyId00001", "TestSecretValue00000000000000000"
STS = "CAIS-test-sts/token+VALUE=1234567890"


def test_no_credential_reaches_the_log_at_debug(answers: AnswerServer) -> None:
    """The SDK logs each request's parameters at DEBUG, the STS SecurityToken with them."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(OneLineFormatter(LOG_FORMAT))
    sdk = logging.getLogger("aliyunsdkcore")
    root = logging.getLogger()
    before = (root.level, sdk.level)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    sdk.setLevel(logging.DEBUG)
    body = json.dumps({"Currency": "USD", "SpotPrices": {"SpotPriceType": []}}).encode()
    answers.reply = Reply(200, body)
    try:
        cloud = AlicloudCloud("cn-hangzhou", settings=AlicloudSettings(endpoint=answers.url,
                                                                       max_retries=0),
                              credentials=Credentials(KEY_ID, SECRET, STS), clock=FakeClock())
        with pytest.raises(CloudDataError):  # the answer is no price; the log is what counts
            cloud.on_demand_prices(["ecs.gn6i-c4g1.xlarge"])
    finally:
        root.removeHandler(handler)
        root.setLevel(before[0])
        sdk.setLevel(before[1])
    text = out.getvalue()
    assert "'SecurityToken': '***'" in text  # the parameters were logged, redacted
    for secret in (KEY_ID, SECRET, STS, "CAIS-test-sts"):
        assert secret not in text


def test_redact_hides_the_token_and_signature_however_they_are_encoded() -> None:
    text = ("Params: {'SecurityToken': 'CAIS-a/b+c=', 'AccessKeyId': 'LTAIx'} "
            "?AccessKeyId=LTAIx&SecurityToken=CAIS-a%2Fb%2Bc%3D&Signature=s1g%2B&Format=JSON "
            "GET&%2F&SecurityToken%3DCAIS-a%252Fb%26SignatureMethod%3DHMAC-SHA1")
    assert redact(text) == (
        "Params: {'SecurityToken': '***', 'AccessKeyId': '***'} "
        "?AccessKeyId=***&SecurityToken=***&Signature=***&Format=JSON "
        "GET&%2F&SecurityToken%3D***%26SignatureMethod%3DHMAC-SHA1")
