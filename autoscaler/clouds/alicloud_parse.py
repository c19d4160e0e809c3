"""Reading ECS API answers (the documented JSON shapes) into our records.

A field missing where the API documents one is a :class:`CloudDataError`, never a
default price: the engine then falls back to the catalog instead of trusting a guess.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

from autoscaler.clouds.aws_events import OLDEST, SKEW, excerpt
from autoscaler.clouds.base import (
    CloudDataError,
    CloudInstance,
    InstanceState,
    Interruption,
    InterruptionKind,
    SpotPrice,
)
from autoscaler.policy.models import Market

INTERRUPTION_EVENT = "Instance:PreemptibleInstanceInterruption"
# StatusCategory values that mean "can be created now" (ClosedWithStock: being retired).
WITH_STOCK = frozenset({"WithStock", "ClosedWithStock"})
SPOT_STRATEGIES = frozenset({"SpotAsPriceGo", "SpotWithPriceLimit"})
_STATES = {
    "Pending": InstanceState.PENDING, "Starting": InstanceState.PENDING,
    "Running": InstanceState.RUNNING, "Stopping": InstanceState.STOPPING,
    "Stopped": InstanceState.STOPPED,
}

P = ParamSpec("P")
R = TypeVar("R")


def _shape(what: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise CloudDataError(f"unexpected {what} answer: {type(exc).__name__} {exc}") from None
        return inner
    return wrap


def parse_time(value: str) -> datetime:
    """ECS times are UTC ISO 8601, sometimes to the minute only (``2017-12-10T04:04Z``)."""
    at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _optional_time(value: object) -> datetime | None:
    """A time the answer may leave out: None also when it is not one (a bad optional field
    must not make the whole answer unbelieved)."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def items(data: dict[str, Any], outer: str, inner: str) -> list[dict[str, Any]]:
    """ECS wraps every list twice: ``{"Instances": {"Instance": [...]}}``."""
    found = (data.get(outer) or {}).get(inner) or []
    if not isinstance(found, list):
        raise CloudDataError(f"{outer}.{inner} is not a list")
    return found


@_shape("DescribePrice")
def price(data: dict[str, Any]) -> tuple[float, str]:
    """The instance's own TradePrice (disks and bandwidth are priced apart)."""
    p = data["PriceInfo"]["Price"]
    currency = p["Currency"]
    for detail in items(p, "DetailInfos", "DetailInfo"):
        if detail.get("Resource") == "instanceType":
            return float(detail["TradePrice"]), currency
    return float(p["TradePrice"]), currency


@_shape("DescribeSpotPriceHistory")
def spot_history(data: dict[str, Any]) -> tuple[list[SpotPrice], str]:
    rows = [SpotPrice(r["InstanceType"], r["ZoneId"], float(r["SpotPrice"]), parse_time(r["Timestamp"]))
            for r in items(data, "SpotPrices", "SpotPriceType")]
    return rows, data["Currency"] if rows else data.get("Currency", "USD")


@_shape("DescribeAvailableResource")
def available_resources(data: dict[str, Any]) -> dict[str, dict[str, tuple[bool, str]]]:
    """zone -> instance type -> (can be created now, StatusCategory)."""
    out: dict[str, dict[str, tuple[bool, str]]] = {}
    for zone in items(data, "AvailableZones", "AvailableZone"):
        zone_open = zone.get("Status") == "Available"
        types = out.setdefault(zone["ZoneId"], {})
        for res in items(zone, "AvailableResources", "AvailableResource"):
            if res.get("Type") != "InstanceType":
                continue
            for sup in items(res, "SupportedResources", "SupportedResource"):
                category = sup.get("StatusCategory") or sup.get("Status", "")
                ok = zone_open and sup.get("Status") == "Available" and category in WITH_STOCK
                types[sup["Value"]] = (ok, category)
    return out


@_shape("DescribeInstances")
def instance(raw: dict[str, Any]) -> CloudInstance:
    tags = {t["TagKey"]: t["TagValue"] for t in items(raw, "Tags", "Tag")}
    ips = ((raw.get("VpcAttributes") or {}).get("PrivateIpAddress") or {}).get("IpAddress") or []
    ips = ips or (raw.get("InnerIpAddress") or {}).get("IpAddress") or []
    locks = items(raw, "OperationLocks", "LockReason")
    return CloudInstance(
        instance_id=raw["InstanceId"],
        node=tags.get("node"), team=tags.get("team"), pool=tags.get("pool"),
        instance_type=raw.get("InstanceType", ""),
        zone=raw.get("ZoneId"),
        market=Market.SPOT if raw.get("SpotStrategy") in SPOT_STRATEGIES else Market.ON_DEMAND,
        state=_STATES.get(raw.get("Status", ""), InstanceState.PENDING),
        private_ip=ips[0] if ips else None,
        launched_at=_optional_time(raw.get("CreationTime")),
        tags=tags,
        recycling=any(lock.get("LockReason") == "Recycling" for lock in locks),
    )


@_shape("DescribeInstanceHistoryEvents")
def interruption_event(raw: dict[str, Any], now: datetime,
                       problems: list[str]) -> Interruption | None:
    """The event's times are bounded as AWS notices are: the event itself is the cloud's own
    answer, so an implausible time is dropped, never the notice. A NotBefore that cannot be
    the coming reclaim (unreadable, before the publication or already past) is no deadline:
    believed, it would terminate the node without its checkpoint drain. What was dropped is
    added to ``problems``: the caller logs it once, as the same event is read every poll
    until the reclaim."""
    if (raw.get("EventType") or {}).get("Name") != INTERRUPTION_EVENT:
        return None
    instance_id = raw["InstanceId"]
    status = (raw.get("EventCycleStatus") or {}).get("Name", "")
    published = _optional_time(raw.get("EventPublishTime"))
    if published is not None and not now - OLDEST <= published <= now + SKEW:
        published = None
    if published is None:
        problems.append(
            f"alicloud interruption event for {excerpt(instance_id, 40)}: EventPublishTime "
            f"{excerpt(raw.get('EventPublishTime'), 40)!r} is not a time within {OLDEST.days} days "
            f"before now and {SKEW.total_seconds() // 60:g} min after; read as now")
    not_before = raw.get("NotBefore")
    deadline = _optional_time(not_before)
    if deadline is not None and (deadline < now - SKEW or (published is not None and deadline < published)):
        deadline = None
    if not_before and deadline is None:
        problems.append(
            f"alicloud interruption event for {excerpt(instance_id, 40)}: NotBefore "
            f"{excerpt(not_before, 40)!r} is not a coming reclaim time; the configured drain "
            "deadline applies")
    return Interruption(
        instance_id=instance_id, kind=InterruptionKind.INTERRUPTION, at=published or now,
        deadline=deadline,
        source=f"alicloud:{INTERRUPTION_EVENT} ({status})" if status else f"alicloud:{INTERRUPTION_EVENT}",
    )
