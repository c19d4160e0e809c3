"""AWS spot notices: EventBridge events, as read from the interruption queue, checked and
turned into :class:`Interruption` records.

EventBridge rules forward "EC2 Spot Instance Interruption Warning" and "EC2 Instance
Rebalance Recommendation" events (optionally through SNS) to one SQS queue. Anyone who may
send to that queue can write a message that looks like one, so a body is data to check,
never an order: :func:`parse_event` accepts an event only when

* it is one bounded JSON object (an SNS envelope is opened once, never recursively; the
  JSON parser bounds nesting, so ``[[[[…`` is refused, not a RecursionError);
* it comes from the cloud (``source`` is ``aws.ec2``), from the fleet's account and from a
  configured region (:class:`Trust`): anything else is *forged*;
* its instance id has AWS's syntax and its ``time`` is a real moment near now (year 9999
  is refused before any arithmetic on it can overflow).

It raises :class:`RejectedEventError` (``reason`` ``malformed`` or ``forged``) and nothing
else, whatever the body; the queue logs, counts and deletes such a message once. Whether the
instance is one of ours, in that region, is the intake's check (it has the store).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from autoscaler.clouds.base import Interruption, InterruptionKind

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
KINDS = {SPOT_WARNING: InterruptionKind.INTERRUPTION, REBALANCE: InterruptionKind.REBALANCE}
CLOUD_SOURCE = "aws.ec2"
# AWS reclaims a spot instance two minutes after the warning.
SPOT_NOTICE = timedelta(minutes=2)
# An EC2 event is under 2 KB, 3 KB in its SNS envelope; SQS would carry 256 KiB.
MAX_BODY_CHARS = 16 * 1024
# A genuine notice is at most SQS's longest retention (14 days) plus EventBridge's 24 h of
# delivery retries old, and never from the future beyond clock skew.
OLDEST = timedelta(days=15)
SKEW = timedelta(minutes=5)
INSTANCE_ID = r"^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$"
EXCERPT_CHARS = 80


class RejectedEventError(ValueError):
    """A message that is not obeyed; ``reason`` is a metric label (few values)."""

    reason: ClassVar[str] = "malformed"


class MalformedEventError(RejectedEventError):
    reason = "malformed"


class ForgedEventError(RejectedEventError):
    reason = "forged"


@dataclass(frozen=True)
class Trust:
    """Whose events are obeyed: the fleet's account, in the regions the config names."""

    account: str
    regions: frozenset[str]
    source: str = CLOUD_SOURCE


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class _SnsEnvelope(_Strict):
    Type: Literal["Notification"]
    Message: str


class _Event(_Strict):
    source: str = Field(max_length=64)
    account: str = Field(max_length=32)
    region: str = Field(max_length=32)
    detail_type: str = Field(alias="detail-type", max_length=128)
    time: str = Field(max_length=40)
    detail: dict[str, Any]


class _Detail(_Strict):
    instance_id: str = Field(alias="instance-id", pattern=INSTANCE_ID)
    instance_action: str | None = Field(None, alias="instance-action", pattern=r"^[a-z-]{1,32}$")


_OBJECT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


def excerpt(text: object, limit: int = EXCERPT_CHARS) -> str:
    """At most ``limit`` printable ASCII characters of ``text`` for a log line: a hostile
    value never writes control characters, new lines or megabytes into the log."""
    raw = text if isinstance(text, str) else repr(text)
    clean = "".join(c if c.isascii() and c.isprintable() else "?" for c in raw[:limit])
    return clean + ("..." if len(raw) > limit else "")


def _why(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(p) for p in first["loc"])
    return excerpt(f"{where}: {first['msg']}" if where else first["msg"], 120)


def _validated(model: type[_Strict], data: object, what: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise MalformedEventError(f"{what}: {_why(exc)}") from None


def _object(text: str) -> dict[str, Any]:
    if len(text) > MAX_BODY_CHARS:
        raise MalformedEventError(f"too long: {len(text)} characters (at most {MAX_BODY_CHARS})")
    try:
        return _OBJECT.validate_json(text)
    except ValidationError as exc:
        raise MalformedEventError(f"not a JSON object: {_why(exc)}") from None


def _unwrap(body: str) -> dict[str, Any]:
    """The event; EventBridge -> SNS -> SQS wraps it in one SNS envelope (never two)."""
    event = _object(body)
    if event.get("Type") == "Notification":
        envelope: _SnsEnvelope = _validated(_SnsEnvelope, event, "SNS envelope")
        event = _object(envelope.Message)
    return event


def _parse_time(value: str, now: datetime) -> datetime:
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise MalformedEventError(f"bad 'time' {excerpt(value)!r}") from None
    if at.tzinfo is None:
        raise MalformedEventError(f"'time' {excerpt(value)!r} has no timezone")
    if not now - OLDEST <= at <= now + SKEW:
        raise MalformedEventError(f"'time' {excerpt(value)!r} is not within {OLDEST.days} days "
                                  f"before now and {int(SKEW.total_seconds() // 60)} min after")
    return at


def _check_origin(event: _Event, trust: Trust) -> None:
    if event.source != trust.source:
        raise ForgedEventError(f"source {excerpt(event.source, 40)!r} is not {trust.source!r}")
    if event.account != trust.account:
        raise ForgedEventError(f"account {excerpt(event.account, 40)!r} is not the fleet's")
    if event.region not in trust.regions:
        raise ForgedEventError(f"region {excerpt(event.region, 40)!r} is not a configured one")


def parse_event(body: str, trust: Trust, now: datetime) -> Interruption | None:
    """The interruption an event announces; None for the cloud's other EC2 events (not for
    us). Raises :class:`RejectedEventError` and nothing else, whatever ``body`` holds."""
    try:
        return _parse(body, trust, now)
    except RejectedEventError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # Defence in depth: the checks above are meant to leave nothing for here.
        raise MalformedEventError(f"unreadable ({type(exc).__name__})") from None


def _parse(body: str, trust: Trust, now: datetime) -> Interruption | None:
    event: _Event = _validated(_Event, _unwrap(body), "event")
    _check_origin(event, trust)
    kind = KINDS.get(event.detail_type)
    if kind is None:
        return None
    detail: _Detail = _validated(_Detail, event.detail, "detail")
    at = _parse_time(event.time, now)
    deadline = at + SPOT_NOTICE if kind is InterruptionKind.INTERRUPTION else None
    action = f" ({detail.instance_action})" if detail.instance_action else ""
    return Interruption(instance_id=detail.instance_id, kind=kind, at=at, deadline=deadline,
                        source=f"aws:{event.detail_type}{action}", cloud="aws",
                        region=event.region)


@dataclass(frozen=True)
class Received:
    """One message as a source read it. ``interruption`` None: not an interruption (ignored)
    or refused (``rejected`` says why: a metric label); ``receipt`` "": nothing left to ack
    (a refused message is already deleted, a polled notice has no message)."""

    interruption: Interruption | None
    receipt: str
    rejected: str | None = None


def dedupe(items: Iterable[Interruption]) -> list[Interruption]:
    """One notice per (instance, kind), the earliest: SQS standard queues may redeliver."""
    first: dict[tuple[str, InterruptionKind], Interruption] = {}
    for item in items:
        key = (item.instance_id, item.kind)
        if key not in first or item.at < first[key].at:
            first[key] = item
    return sorted(first.values(), key=lambda i: (i.at, i.instance_id))
