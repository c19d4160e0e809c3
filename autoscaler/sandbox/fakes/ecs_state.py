"""What the fake ECS endpoint knows (prices, stock, instances, events) and how each ECS
action answers from it, in the response shapes the ECS API reference documents.

Tests and the sandbox set the state from Python (or a JSON file for the command line);
the HTTP side, with signature checks, is in ``fake_ecs``.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

INTERRUPTION_EVENT = "Instance:PreemptibleInstanceInterruption"
WITH_STOCK = frozenset({"WithStock", "ClosedWithStock"})
SYSTEM_DISK_USD_PER_HOUR = 0.006  # DescribePrice totals include a system disk
_DEFAULT_EVENT_STATES = ("Avoided", "Executed", "Canceled", "Failed")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message


def missing(name: str) -> ApiError:
    return ApiError(400, "MissingParameter",
                    f'The input parameter "{name}" that is mandatory for processing this '
                    "request is not supplied.")


def _iso(at: datetime, minutes: bool = False) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ" if minutes else "%Y-%m-%dT%H:%M:%SZ")


def _time(value: str) -> datetime:
    at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return at if at.tzinfo else at.replace(tzinfo=UTC)


@dataclass
class FakeInstance:
    instance_id: str
    instance_type: str
    zone: str
    tags: dict[str, str] = field(default_factory=dict)
    status: str = "Running"
    spot_strategy: str = "NoSpot"
    private_ip: str | None = None
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    locks: list[str] = field(default_factory=list)


@dataclass
class FakeEvent:
    event_id: str
    instance_id: str
    publish_time: datetime
    not_before: datetime | None
    event_type: str = INTERRUPTION_EVENT
    cycle_status: str = "Executing"


class EcsState:
    """Thread-safe state of one fake region. ``calls`` counts answered actions by name."""

    def __init__(self, region: str = "cn-hangzhou", zones: tuple[str, ...] = (),
                 currency: str = "USD", clock: Callable[[], datetime] | None = None):
        self.region, self.currency = region, currency
        self.zones = list(zones) or [f"{region}-h", f"{region}-i"]
        self.clock = clock or (lambda: datetime.now(UTC))
        self.lock = threading.RLock()
        self.access_keys: dict[str, str] = {}
        self.on_demand: dict[str, float] = {}
        self.spot: dict[tuple[str, str], list[tuple[datetime, float]]] = {}
        self.stock: dict[tuple[str, str], str] = {}  # (zone, type) -> StatusCategory
        self.instances: dict[str, FakeInstance] = {}
        self.events: list[FakeEvent] = []
        self.history_page_size = 100
        self.calls: dict[str, int] = {}
        self.rejections: list[str] = []  # error codes sent for bad keys or signatures
        self._ids = itertools.count(1)

    # -- configuring ------------------------------------------------------------
    def add_key(self, key_id: str, secret: str) -> None:
        with self.lock:
            self.access_keys[key_id] = secret

    def set_on_demand(self, instance_type: str, usd: float) -> None:
        with self.lock:
            self.on_demand[instance_type] = usd

    def set_spot(self, instance_type: str, zone: str, usd: float, at: datetime | None = None) -> None:
        with self.lock:
            self.spot.setdefault((instance_type, zone), []).append((at or self.clock(), usd))

    def set_stock(self, instance_type: str, zone: str, category: str = "WithStock") -> None:
        """StatusCategory: WithStock | ClosedWithStock | WithoutStock | ClosedWithoutStock."""
        with self.lock:
            if zone not in self.zones:
                self.zones.append(zone)
            self.stock[(zone, instance_type)] = category

    def add_instance(self, instance_type: str, zone: str, tags: dict[str, str] | None = None,
                     **fields: Any) -> FakeInstance:
        with self.lock:
            n = next(self._ids)
            inst = FakeInstance(instance_id=f"i-fake{n:012d}", instance_type=instance_type,
                                zone=zone, tags=dict(tags or {}),
                                private_ip=fields.pop("private_ip", f"192.168.{n // 250}.{n % 250 + 2}"),
                                **fields)
            self.instances[inst.instance_id] = inst
            return inst

    def recycle(self, instance_id: str, notice: timedelta = timedelta(minutes=5)) -> FakeEvent:
        """What ECS does to a reclaimed spot instance: lock it and publish the event."""
        with self.lock:
            self.instances[instance_id].locks.append("Recycling")
            now = self.clock()
            event = FakeEvent(f"e-fake{next(self._ids):012d}", instance_id, now, now + notice)
            self.events.append(event)
            return event

    def count(self, action: str) -> int:
        with self.lock:
            return self.calls.get(action, 0)

    # -- loading (command line) ---------------------------------------------------
    @classmethod
    def from_file(cls, path: Path) -> EcsState:
        data = json.loads(Path(path).read_text())
        state = cls(data.get("region", "cn-hangzhou"), tuple(data.get("zones", ())),
                    data.get("currency", "USD"))
        for key_id, secret in data.get("access_keys", {}).items():
            state.add_key(key_id, secret)
        for name, usd in data.get("on_demand", {}).items():
            state.set_on_demand(name, float(usd))
        for row in data.get("spot", []):
            state.set_spot(row["type"], row["zone"], float(row["price"]))
        for row in data.get("stock", []):
            state.set_stock(row["type"], row["zone"], row.get("category", "WithStock"))
        for row in data.get("instances", []):
            inst = state.add_instance(row["type"], row["zone"], row.get("tags"),
                                      spot_strategy=row.get("spot_strategy", "NoSpot"))
            if row.get("recycling"):
                state.recycle(inst.instance_id)
        return state

    # -- answering ----------------------------------------------------------------
    def answer(self, action: str, params: dict[str, str]) -> dict[str, Any]:
        handler = _ACTIONS.get(action)
        if handler is None:
            raise ApiError(404, "InvalidAction.NotFound",
                           "Specified api is not found, please check your url and method.")
        with self.lock:
            if params.get("RegionId") != self.region:
                raise ApiError(404, "InvalidRegionId.NotFound",
                               "The specified RegionId does not exist.")
            result = handler(self, params)
            self.calls[action] = self.calls.get(action, 0) + 1
        return result

    def latest_spot(self, instance_type: str, zone: str) -> float | None:
        rows = self.spot.get((instance_type, zone))
        return max(rows)[1] if rows else None


def _describe_price(state: EcsState, p: dict[str, str]) -> dict[str, Any]:
    name = p.get("InstanceType") or ""
    if not name:
        raise missing("InstanceType")
    strategy = p.get("SpotStrategy", "NoSpot")
    if strategy == "NoSpot":
        usd = state.on_demand.get(name)
    else:
        zones = [p["ZoneId"]] if p.get("ZoneId") else state.zones
        quotes = [q for z in zones if (q := state.latest_spot(name, z)) is not None]
        usd = min(quotes) if quotes else None
    if usd is None:
        raise ApiError(400, "InvalidInstanceType.ValueNotSupported",
                       "The specified InstanceType does not exist or beyond the permitted range.")
    total = round(usd + SYSTEM_DISK_USD_PER_HOUR, 6)
    details = [{"Resource": "instanceType", "OriginalPrice": usd, "DiscountPrice": 0.0,
                "TradePrice": usd},
               {"Resource": "systemDisk", "OriginalPrice": SYSTEM_DISK_USD_PER_HOUR,
                "DiscountPrice": 0.0, "TradePrice": SYSTEM_DISK_USD_PER_HOUR}]
    return {"PriceInfo": {
        "Price": {"OriginalPrice": total, "DiscountPrice": 0.0, "TradePrice": total,
                  "Currency": state.currency, "DetailInfos": {"DetailInfo": details}},
        "Rules": {"Rule": []}}}


def _spot_history(state: EcsState, p: dict[str, str]) -> dict[str, Any]:
    name = p.get("InstanceType") or ""
    for required in ("InstanceType", "NetworkType"):
        if not p.get(required):
            raise missing(required)
    end = _time(p["EndTime"]) if p.get("EndTime") else state.clock()
    start = _time(p["StartTime"]) if p.get("StartTime") else end - timedelta(hours=3)
    rows = sorted(
        (at, zone, usd) for (t, zone), series in state.spot.items() if t == name
        for at, usd in series
        if start <= at <= end and (not p.get("ZoneId") or p["ZoneId"] == zone))
    offset, size = int(p.get("Offset") or 0), state.history_page_size
    page = rows[offset:offset + size]
    on_demand = state.on_demand.get(name, 0.0)
    return {
        "NextOffset": offset + size if offset + size < len(rows) else 0,
        "Currency": state.currency,
        "SpotPrices": {"SpotPriceType": [
            {"ZoneId": zone, "InstanceType": name, "IoOptimized": "optimized",
             "NetworkType": p["NetworkType"], "Timestamp": _iso(at), "SpotPrice": usd,
             "OriginPrice": on_demand} for at, zone, usd in page]},
    }


def _available_resource(state: EcsState, p: dict[str, str]) -> dict[str, Any]:
    if not p.get("DestinationResource"):
        raise missing("DestinationResource")
    if p["DestinationResource"] != "InstanceType":
        raise ApiError(400, "InvalidParameter", "This fake answers DestinationResource=InstanceType.")
    zones = []
    for zone in state.zones:
        if p.get("ZoneId") and p["ZoneId"] != zone:
            continue
        supported = [
            {"Value": name, "Status": "Available" if cat in WITH_STOCK else "SoldOut",
             "StatusCategory": cat}
            for (z, name), cat in sorted(state.stock.items())
            if z == zone and (not p.get("InstanceType") or p["InstanceType"] == name)]
        if not supported:
            continue
        open_ = any(s["Status"] == "Available" for s in supported)
        zones.append({
            "ZoneId": zone, "RegionId": state.region,
            "Status": "Available" if open_ else "SoldOut",
            "StatusCategory": "WithStock" if open_ else "WithoutStock",
            "AvailableResources": {"AvailableResource": [
                {"Type": "InstanceType", "SupportedResources": {"SupportedResource": supported}}]},
        })
    return {"AvailableZones": {"AvailableZone": zones}}


def _tag_filter(p: dict[str, str]) -> dict[str, str]:
    out = {}
    for n in range(1, 21):
        key = p.get(f"Tag.{n}.Key")
        if key:
            out[key] = p.get(f"Tag.{n}.Value", "")
    return out


def _page(p: dict[str, str], items: list[Any]) -> tuple[int, int, list[Any]]:
    number, size = int(p.get("PageNumber") or 1), int(p.get("PageSize") or 10)
    if not 1 <= size <= 100 or number < 1:
        raise ApiError(400, "InvalidParameter", "PageSize must be 1..100 and PageNumber >= 1.")
    return number, size, items[(number - 1) * size:number * size]


def _instance_json(state: EcsState, inst: FakeInstance) -> dict[str, Any]:
    return {
        "InstanceId": inst.instance_id, "InstanceName": inst.tags.get("node", inst.instance_id),
        "HostName": inst.tags.get("node", inst.instance_id), "RegionId": state.region,
        "ZoneId": inst.zone, "InstanceType": inst.instance_type, "Status": inst.status,
        "InstanceChargeType": "PostPaid", "SpotStrategy": inst.spot_strategy,
        "CreationTime": _iso(inst.created_at, minutes=True), "ExpiredTime": "2099-12-31T15:59Z",
        "VpcAttributes": {"PrivateIpAddress": {"IpAddress": [inst.private_ip] if inst.private_ip else []},
                          "VpcId": "vpc-fake", "VSwitchId": "vsw-fake"},
        "InnerIpAddress": {"IpAddress": []}, "PublicIpAddress": {"IpAddress": []},
        "Tags": {"Tag": [{"TagKey": k, "TagValue": v} for k, v in sorted(inst.tags.items())]},
        "OperationLocks": {"LockReason": [{"LockReason": r, "LockMsg": ""} for r in inst.locks]},
    }


def _instances(state: EcsState, p: dict[str, str]) -> dict[str, Any]:
    tags = _tag_filter(p)
    ids = json.loads(p["InstanceIds"]) if p.get("InstanceIds") else None
    found = [i for _, i in sorted(state.instances.items())
             if all(i.tags.get(k) == v for k, v in tags.items())
             and (not p.get("Status") or i.status == p["Status"])
             and (not p.get("ZoneId") or i.zone == p["ZoneId"])
             and (ids is None or i.instance_id in ids)]
    number, size, page = _page(p, found)
    return {"TotalCount": len(found), "PageNumber": number, "PageSize": size, "NextToken": "",
            "Instances": {"Instance": [_instance_json(state, i) for i in page]}}


def _indexed(p: dict[str, str], name: str) -> list[str]:
    return [p[f"{name}.{n}"] for n in range(1, 21) if p.get(f"{name}.{n}")]


def _history_events(state: EcsState, p: dict[str, str]) -> dict[str, Any]:
    types = _indexed(p, "InstanceEventType") or ([p["EventType"]] if p.get("EventType") else [])
    statuses = (_indexed(p, "InstanceEventCycleStatus")
                or ([p["EventCycleStatus"]] if p.get("EventCycleStatus") else _DEFAULT_EVENT_STATES))
    tags = _tag_filter(p)
    found = [e for e in state.events
             if (not types or e.event_type in types) and e.cycle_status in statuses
             and (not p.get("InstanceId") or e.instance_id == p["InstanceId"])
             and e.instance_id in state.instances
             and all(state.instances[e.instance_id].tags.get(k) == v for k, v in tags.items())]
    number, size, page = _page(p, found)
    return {"TotalCount": len(found), "PageNumber": number, "PageSize": size,
            "InstanceSystemEventSet": {"InstanceSystemEventType": [
                {"EventId": e.event_id, "InstanceId": e.instance_id, "ResourceType": "instance",
                 "EventType": {"Name": e.event_type}, "EventCycleStatus": {"Name": e.cycle_status},
                 "EventPublishTime": _iso(e.publish_time),
                 "NotBefore": _iso(e.not_before) if e.not_before else "",
                 "EventFinishTime": "", "ImpactLevel": "", "Reason": "",
                 "ExtendedAttribute": {}} for e in page]}}


_ACTIONS: dict[str, Callable[[EcsState, dict[str, str]], dict[str, Any]]] = {
    "DescribePrice": _describe_price,
    "DescribeSpotPriceHistory": _spot_history,
    "DescribeAvailableResource": _available_resource,
    "DescribeInstances": _instances,
    "DescribeInstanceHistoryEvents": _history_events,
}
