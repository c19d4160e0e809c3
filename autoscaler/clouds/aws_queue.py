"""The AWS interruption queue (SQS), read one receive (at most 10 messages) at a time.

Each message is parsed on its own (:func:`parse_event`): one that is refused (malformed or
forged) is logged once, with a short sanitised excerpt and no traceback, dead-lettered when
a dead-letter queue is configured, and deleted at once, before the batch is handed on. It
never comes back, so it can neither abort a pass nor keep a genuine notice behind it
waiting. Notices are acked by the caller only after it recorded them (``ack``), so a crash
in between redelivers them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from datetime import datetime
from typing import Any

import botocore.exceptions as bex

from autoscaler.clouds.aws_events import (
    Received,
    RejectedEventError,
    Trust,
    dedupe,
    excerpt,
    parse_event,
)
from autoscaler.clouds.base import Interruption

log = logging.getLogger(__name__)
BATCH = 10  # SQS returns at most 10 messages per receive and deletes at most 10 per call


class SqsInterruptionQueue:
    """``batches()`` yields one receive at a time until the queue is empty (the caller stops
    when its time is up); ``receive()`` and ``drain()`` read a bounded number of them."""

    def __init__(self, client: Any, queue_url: str, trust: Callable[[], Trust],
                 clock: Callable[[], datetime], *, wait_seconds: int = 1,
                 dead_letter_url: str | None = None, max_batches: int = 10):
        self.client, self.queue_url, self.trust, self.clock = client, queue_url, trust, clock
        self.wait_seconds, self.dead_letter_url = wait_seconds, dead_letter_url
        self.max_batches = max_batches

    def batches(self) -> Generator[list[Received], None, None]:
        trust = self.trust()  # before any receive: unknown trust reads (and deletes) nothing
        wait = self.wait_seconds
        while True:
            resp = self.client.receive_message(QueueUrl=self.queue_url,
                                               MaxNumberOfMessages=BATCH, WaitTimeSeconds=wait)
            messages = resp.get("Messages", [])
            if not messages:
                return
            wait = 0  # long-poll only for the first: the rest is already there
            now = self.clock()
            read = [(m, self._read(m, trust, now)) for m in messages]
            self._discard([(m, r.rejected) for m, r in read if r.rejected])
            yield [r for _, r in read]

    def _read(self, message: dict[str, Any], trust: Trust, now: datetime) -> Received:
        receipt = str(message.get("ReceiptHandle", ""))
        body = message.get("Body", "")
        try:
            item = parse_event(body if isinstance(body, str) else "", trust, now)
        except RejectedEventError as exc:
            log.warning("refused %s message %s on the interruption queue: %s; body starts %r",
                        exc.reason, excerpt(message.get("MessageId", "?"), 64), exc,
                        excerpt(body))
            return Received(None, receipt, rejected=exc.reason)
        if item is None:
            log.debug("ignoring message %s: not an interruption event",
                      excerpt(message.get("MessageId", "?"), 64))
        return Received(item, receipt)

    def _discard(self, refused: list[tuple[dict[str, Any], str]]) -> None:
        """Refused messages: to the dead-letter queue when there is one, then deleted."""
        if refused and self.dead_letter_url:
            entries = [{"Id": str(i), "MessageBody": str(m.get("Body", "")) or "(empty)",
                        "MessageAttributes": {"refused": {"DataType": "String",
                                                          "StringValue": reason}}}
                       for i, (m, reason) in enumerate(refused)]
            try:
                resp = self.client.send_message_batch(QueueUrl=self.dead_letter_url,
                                                      Entries=entries)
            except (bex.BotoCoreError, bex.ClientError) as exc:
                # Deleted all the same: kept, it would come back and be refused every pass.
                resp = {"Failed": [{"Message": f"{type(exc).__name__}: {exc}"}]}
            for failed in resp.get("Failed", []):  # the refusal's log line has the excerpt
                log.warning("could not dead-letter a refused message: %s",
                            excerpt(failed.get("Message", failed.get("Code")), 120))
        self.ack([str(m.get("ReceiptHandle", "")) for m, _ in refused])

    def ack(self, receipts: list[str]) -> None:
        receipts = [r for r in receipts if r]
        for start in range(0, len(receipts), BATCH):
            entries = [{"Id": str(i), "ReceiptHandle": r}
                       for i, r in enumerate(receipts[start:start + BATCH])]
            resp = self.client.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            for failed in resp.get("Failed", []):
                log.warning("could not delete interruption message: %s",
                            excerpt(failed.get("Message", failed.get("Code")), 120))

    def receive(self) -> list[Received]:
        """Up to ``max_batches`` receives, not acked (refused messages are already gone)."""
        out: list[Received] = []
        for n, batch in enumerate(self.batches(), 1):
            out += batch
            if n >= self.max_batches:
                break
        return out

    def drain(self) -> list[Interruption]:
        received = self.receive()
        self.ack([r.receipt for r in received])
        return dedupe(r.interruption for r in received if r.interruption is not None)
