"""Spot interruption intake for AWS: EventBridge events delivered to an SQS queue.

EventBridge rules forward "EC2 Spot Instance Interruption Warning" and "EC2 Instance
Rebalance Recommendation" events (optionally through SNS) to one queue. We long-poll it
with a short wait, turn each event into an :class:`Interruption`, and delete what we
handled. A message we cannot read is logged and deleted too: left in the queue it would
come back on every tick and hide the real notices behind it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from autoscaler.clouds.base import Interruption, InterruptionKind

log = logging.getLogger(__name__)

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
KINDS = {SPOT_WARNING: InterruptionKind.INTERRUPTION, REBALANCE: InterruptionKind.REBALANCE}
# AWS reclaims a spot instance two minutes after the warning.
SPOT_NOTICE = timedelta(minutes=2)


class MalformedEventError(ValueError):
    pass


def _unwrap(body: str) -> dict[str, Any]:
    try:
        event = json.loads(body)
    except ValueError as exc:
        raise MalformedEventError(f"not JSON ({exc})") from None
    # EventBridge -> SNS -> SQS wraps the event in an SNS envelope.
    if isinstance(event, dict) and event.get("Type") == "Notification" and "Message" in event:
        return _unwrap(str(event["Message"]))
    if not isinstance(event, dict):
        raise MalformedEventError("not a JSON object")
    return event


def _parse_time(value: object) -> datetime:
    if not isinstance(value, str):
        raise MalformedEventError("missing 'time'")
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise MalformedEventError(f"bad 'time' {value!r}") from None
    if at.tzinfo is None:
        raise MalformedEventError(f"'time' {value!r} has no timezone")
    return at


def parse_event(body: str) -> Interruption | None:
    """The interruption an event announces; None for other EC2 events (not for us)."""
    event = _unwrap(body)
    detail_type = event.get("detail-type")
    if not isinstance(detail_type, str):
        raise MalformedEventError("missing 'detail-type'")
    kind = KINDS.get(detail_type)
    if kind is None:
        return None
    detail = event.get("detail")
    if not isinstance(detail, dict):
        raise MalformedEventError("missing 'detail'")
    instance_id = detail.get("instance-id")
    if not isinstance(instance_id, str) or not instance_id.startswith("i-"):
        raise MalformedEventError(f"bad 'detail.instance-id' {instance_id!r}")
    at = _parse_time(event.get("time"))
    action = detail.get("instance-action")
    deadline = at + SPOT_NOTICE if kind is InterruptionKind.INTERRUPTION else None
    source = f"aws:{detail_type}" + (f" ({action})" if isinstance(action, str) else "")
    return Interruption(instance_id=instance_id, kind=kind, at=at, deadline=deadline,
                        source=source)


@dataclass(frozen=True)
class Received:
    interruption: Interruption | None  # None: ignored or malformed, ack it anyway
    receipt: str


class SqsInterruptionQueue:
    """Reads the interruption queue. ``drain()`` acks at once; ``receive()``+``ack()`` lets a
    caller record the interruptions first (a crash in between redelivers them)."""

    def __init__(self, client: Any, queue_url: str, *, wait_seconds: int = 1,
                 max_batches: int = 10):
        self.client, self.queue_url = client, queue_url
        self.wait_seconds, self.max_batches = wait_seconds, max_batches

    def receive(self) -> list[Received]:
        out: list[Received] = []
        for _ in range(self.max_batches):
            resp = self.client.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10,
                WaitTimeSeconds=self.wait_seconds if not out else 0)
            messages = resp.get("Messages", [])
            if not messages:
                break
            out += [self._read(m) for m in messages]
        return out

    def _read(self, message: dict[str, Any]) -> Received:
        receipt = message["ReceiptHandle"]
        try:
            item = parse_event(message.get("Body", ""))
        except MalformedEventError as exc:
            log.warning("ignoring malformed message %s on the interruption queue: %s",
                        message.get("MessageId", "?"), exc)
            return Received(None, receipt)
        if item is None:
            log.debug("ignoring message %s: not an interruption event", message.get("MessageId"))
        return Received(item, receipt)

    def ack(self, receipts: list[str]) -> None:
        for start in range(0, len(receipts), 10):
            entries = [{"Id": str(i), "ReceiptHandle": r}
                       for i, r in enumerate(receipts[start:start + 10])]
            resp = self.client.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            for failed in resp.get("Failed", []):
                log.warning("could not delete interruption message: %s",
                            failed.get("Message", failed.get("Code")))

    def drain(self) -> list[Interruption]:
        received = self.receive()
        self.ack([r.receipt for r in received])
        return dedupe(r.interruption for r in received if r.interruption is not None)


def dedupe(items: Iterable[Interruption]) -> list[Interruption]:
    """One notice per (instance, kind), the earliest: SQS standard queues may redeliver."""
    first: dict[tuple[str, InterruptionKind], Interruption] = {}
    for item in items:
        key = (item.instance_id, item.kind)
        if key not in first or item.at < first[key].at:
            first[key] = item
    return sorted(first.values(), key=lambda i: (i.at, i.instance_id))
