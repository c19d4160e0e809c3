"""The sandbox's spot notices: an interruption queue per region in moto, and the events EC2
would put on it.

On AWS an EventBridge rule forwards "EC2 Spot Instance Interruption Warning" and "EC2
Instance Rebalance Recommendation" events to an SQS queue the service reads
(``clouds.aws.sqs_queue_urls``). moto has the queue but no EventBridge rule and no spot
market that reclaims: :func:`create_queues` makes the queues and :func:`spot_event` writes
the event EC2 would send, so ``gpu-autoscaler sandbox interrupt`` can play both parts.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Literal

from autoscaler.clouds.aws_events import CLOUD_SOURCE, REBALANCE, SPOT_WARNING
from autoscaler.sandbox.services.moto_server import sandbox_client

QUEUE_NAME = "gpu-autoscaler-interruptions"
Kind = Literal["interruption", "rebalance"]
_KEY = "interruptions/"


def queue_key(region: str) -> str:
    """The sandbox state's endpoint name of a region's queue."""
    return f"{_KEY}{region}"


def queues(endpoints: Mapping[str, str]) -> dict[str, str]:
    """Region -> queue URL, from the sandbox state's endpoints."""
    return {k.removeprefix(_KEY): url for k, url in endpoints.items() if k.startswith(_KEY)}


def create_queues(endpoint: str, regions: Iterable[str]) -> dict[str, str]:
    """One interruption queue per region in the sandbox's moto at ``endpoint``: region ->
    queue URL."""
    return {r: str(sandbox_client("sqs", endpoint, r).create_queue(QueueName=QUEUE_NAME)["QueueUrl"])
            for r in regions}


def spot_event(kind: Kind, instance_id: str, region: str, zone: str, account: str,
               at: datetime | None = None) -> str:
    """The EventBridge event EC2 sends, as AWS documents it: a warning says the instance
    is reclaimed two minutes later; a recommendation only that the risk is high."""
    detail: dict[str, str] = {"instance-id": instance_id}
    if kind == "interruption":
        detail["instance-action"] = "terminate"
    return json.dumps({
        "version": "0", "id": str(uuid.uuid4()),
        "detail-type": SPOT_WARNING if kind == "interruption" else REBALANCE,
        "source": CLOUD_SOURCE, "account": account,
        "time": (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"), "region": region,
        "resources": [f"arn:aws:ec2:{zone}:instance/{instance_id}"], "detail": detail,
    })
