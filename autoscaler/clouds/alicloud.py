"""Alibaba Cloud ECS market data and instance truth through aliyun-python-sdk-ecs.

Prices: ``DescribePrice`` (pay-as-you-go, and spot with ``SpotStrategy=SpotAsPriceGo``),
``DescribeSpotPriceHistory``. Stock: ``DescribeAvailableResource``. Instances:
``DescribeInstances`` by tag. Interruptions: an instance whose ``OperationLocks`` say
``Recycling``, and ``Instance:PreemptibleInstanceInterruption`` system events.
Credentials come from the environment (see ``alicloud_api``); prices in another currency
than USD are converted only with a rate the operator configured.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from aliyunsdkecs.request.v20140526.DescribeAvailableResourceRequest import (
    DescribeAvailableResourceRequest,
)
from aliyunsdkecs.request.v20140526.DescribeInstanceHistoryEventsRequest import (
    DescribeInstanceHistoryEventsRequest,
)
from aliyunsdkecs.request.v20140526.DescribeInstancesRequest import DescribeInstancesRequest
from aliyunsdkecs.request.v20140526.DescribePriceRequest import DescribePriceRequest
from aliyunsdkecs.request.v20140526.DescribeSpotPriceHistoryRequest import (
    DescribeSpotPriceHistoryRequest,
)

from autoscaler.clouds import alicloud_parse as parse
from autoscaler.clouds.alicloud_api import Credentials, EcsApi, Endpoint, credentials_from_env
from autoscaler.clouds.base import (
    LIVE_STATES,
    MANAGED_TAGS,
    CloudApiError,
    CloudDataError,
    CloudInstance,
    InstanceState,
    Interruption,
    InterruptionKind,
    SpotPrice,
    TtlCache,
    ZoneOffering,
)
from autoscaler.model.clock import Clock, utc_now

log = logging.getLogger(__name__)

MAX_PAGES = 1000  # a bound on every pagination loop, far above any real fleet


@dataclass(frozen=True)
class AlicloudSettings:
    endpoint: str | None = None  # None: the SDK's regional endpoint
    price_ttl: timedelta = timedelta(minutes=10)
    spot_ttl: timedelta = timedelta(minutes=5)
    stock_ttl: timedelta = timedelta(minutes=2)
    spot_lookback: timedelta = timedelta(hours=3)
    currency_rates: Mapping[str, float] = field(default_factory=lambda: {"USD": 1.0})
    network_type: str = "vpc"
    page_size: int = 100
    connect_timeout: float = 3
    read_timeout: float = 10
    max_retries: int = 1


class AlicloudCloud:
    """:class:`autoscaler.clouds.base.CloudMarket` for one Alibaba Cloud region."""

    cloud = "alicloud"

    def __init__(self, region: str, *, settings: AlicloudSettings | None = None,
                 credentials: Credentials | None = None, clock: Clock = utc_now):
        self.region = region
        self.settings = s = settings or AlicloudSettings()
        self.clock = clock
        self.api = EcsApi(region, credentials or credentials_from_env(),
                          endpoint=Endpoint.parse(s.endpoint) if s.endpoint else None,
                          connect_timeout=s.connect_timeout, read_timeout=s.read_timeout,
                          max_retries=s.max_retries)
        self._on_demand: TtlCache[str, float] = TtlCache(s.price_ttl, clock)
        self._history: TtlCache[str, list[SpotPrice]] = TtlCache(s.spot_ttl, clock)
        self._quotes: TtlCache[tuple[str, str], float] = TtlCache(s.spot_ttl, clock)
        self._stock: TtlCache[str, dict[str, dict[str, tuple[bool, str]]]] = TtlCache(
            s.stock_ttl, clock)
        self._said: set[str] = set()  # the events' problems logged while they last

    def _usd(self, amount: float, currency: str) -> float:
        rate = self.settings.currency_rates.get(currency or "USD")
        if rate is None:
            raise CloudDataError(
                f"ECS prices in {self.region} are in {currency}: configure a USD rate for it "
                "(currency_rates) or use the operator price file")
        return round(amount * rate, 6)

    # -- answers ----------------------------------------------------------------
    def _count(self, page: dict[str, Any], key: str, action: str) -> int:
        """A page counter (TotalCount, NextOffset); absent is 0."""
        value = page.get(key)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CloudDataError(f"ECS {action} in {self.region}: {key} {_brief(value)} is not "
                                 "a count")
        return value

    def _items(self, page: dict[str, Any], outer: str, inner: str, action: str,
               required: bool = False) -> list[dict[str, Any]]:
        """parse.items, with the outer wrapper checked (these calls have no _shape guard).
        ``required``: ECS always sends it, so an answer without it is not an empty list."""
        wrapper = page.get(outer)
        if wrapper is None and required:
            raise CloudDataError(f"ECS {action} in {self.region}: the answer has no {outer}")
        if wrapper is not None and not isinstance(wrapper, dict):
            raise CloudDataError(f"ECS {action} in {self.region}: {outer} is not an object")
        try:
            return parse.items(page, outer, inner)
        except CloudDataError as exc:
            raise CloudDataError(f"ECS {action} in {self.region}: {exc}") from None

    # -- prices -----------------------------------------------------------------
    def _price(self, instance_type: str, spot: bool, zone: str | None) -> float:
        req = DescribePriceRequest()
        req.set_ResourceType("instance")
        req.set_InstanceType(instance_type)
        req.set_PriceUnit("Hour")
        req.set_SpotStrategy("SpotAsPriceGo" if spot else "NoSpot")
        if zone:
            req.set_ZoneId(zone)
        amount, currency = parse.price(self.api.call(req))
        # A spot quote of 0 is no market price (it would win every comparison); a
        # pay-as-you-go price may be 0 (a free trial).
        if not math.isfinite(amount) or amount < 0 or (spot and amount == 0):
            raise CloudDataError(f"ECS DescribePrice in {self.region}: {_brief(amount)} for "
                                 f"{instance_type} is not a price (finite, "
                                 f"{'above' if spot else 'at least'} 0)")
        return self._usd(amount, currency)

    def on_demand_prices(self, types: Iterable[str]) -> dict[str, float]:
        """Pay-as-you-go $/h per type (the instance part, without disks). A type the
        region does not sell is left out (and logged); auth or network errors raise."""
        out = {}
        for name in sorted(set(types)):
            cached = self._on_demand.get(name)
            if cached is None:
                try:
                    cached = self._price(name, spot=False, zone=None)
                except CloudApiError as exc:
                    log.warning("alicloud %s: no on-demand price for %s: %s", self.region, name, exc)
                    continue
                self._on_demand.put(name, cached)
            out[name] = cached
        return out

    def spot_quote(self, instance_type: str, zone: str) -> float:
        """The spot price DescribePrice quotes now for (type, zone)."""
        cached = self._quotes.get((instance_type, zone))
        if cached is None:
            cached = self._price(instance_type, spot=True, zone=zone)
            self._quotes.put((instance_type, zone), cached)
        return cached

    def spot_price_history(self, types: Iterable[str],
                           zones: Iterable[str] | None = None) -> list[SpotPrice]:
        """History rows per type; a requested zone without history gets a DescribePrice quote."""
        wanted = sorted(set(types))
        for name in self._history.missing(wanted):
            self._history.put(name, self._fetch_history(name))
        zone_list = sorted(set(zones)) if zones is not None else None
        out = [p for name in wanted for p in self._history.get(name) or []
               if zone_list is None or p.zone in zone_list]
        seen = {(p.instance_type, p.zone) for p in out}
        for name in wanted:
            for zone in zone_list or []:
                if (name, zone) in seen:
                    continue
                try:
                    out.append(SpotPrice(name, zone, self.spot_quote(name, zone), self.clock()))
                except CloudApiError as exc:
                    log.warning("alicloud %s: no spot quote for %s in %s: %s", self.region,
                                name, zone, exc)
        return out

    def _fetch_history(self, instance_type: str) -> list[SpotPrice]:
        start = (self.clock() - self.settings.spot_lookback).strftime("%Y-%m-%dT%H:%M:%SZ")
        rows: list[SpotPrice] = []
        offset = dropped = 0
        for _ in range(MAX_PAGES):
            req = DescribeSpotPriceHistoryRequest()
            req.set_InstanceType(instance_type)
            req.set_NetworkType(self.settings.network_type)
            req.set_IoOptimized("optimized")
            req.set_OSType("linux")
            req.set_StartTime(start)
            req.set_Offset(offset)
            page = self.api.call(req)
            batch, currency = parse.spot_history(page)
            kept = [p for p in batch if math.isfinite(p.usd_per_hour) and p.usd_per_hour > 0]
            dropped += len(batch) - len(kept)
            rows += [SpotPrice(p.instance_type, p.zone, self._usd(p.usd_per_hour, currency), p.at)
                     for p in kept]
            next_offset = self._count(page, "NextOffset", "DescribeSpotPriceHistory")
            if not batch or next_offset <= offset:
                break
            offset = next_offset
        if dropped:
            log.warning("alicloud %s: dropped %d spot price row(s) for %s: not a finite price "
                        "above 0", self.region, dropped, instance_type)
        log.info("alicloud %s: read %d spot price rows for %s", self.region, len(rows),
                 instance_type)
        return rows

    # -- stock ------------------------------------------------------------------
    def offerings(self, types: Iterable[str]) -> list[ZoneOffering]:
        """Stock per zone from one DescribeAvailableResource call per region."""
        stock = self._stock.get(self.region)
        if stock is None:
            req = DescribeAvailableResourceRequest()
            req.set_DestinationResource("InstanceType")
            req.set_IoOptimized("optimized")
            req.set_InstanceChargeType("PostPaid")
            stock = parse.available_resources(self.api.call(req))
            self._stock.put(self.region, stock)
        out = []
        for name in sorted(set(types)):
            for zone in sorted(stock):
                available, category = stock[zone].get(name, (False, "NotOffered"))
                out.append(ZoneOffering(name, zone, available, category))
        return out

    # -- instance truth -----------------------------------------------------------
    def managed_instances(self, tags: Mapping[str, str] | None = None,
                          states: Iterable[InstanceState] | None = None) -> list[CloudInstance]:
        wanted = set(states) if states is not None else set(LIVE_STATES)
        tag_list = [{"Key": k, "Value": v} for k, v in (tags or MANAGED_TAGS).items()]
        found: list[CloudInstance] = []
        for number in range(1, MAX_PAGES + 1):
            req = DescribeInstancesRequest()
            req.set_Tags(tag_list)
            req.set_PageSize(self.settings.page_size)
            req.set_PageNumber(number)
            page = self.api.call(req)
            batch = [parse.instance(raw)
                     for raw in self._items(page, "Instances", "Instance", "DescribeInstances",
                                             required=True)]
            found += batch
            if not batch or len(found) >= self._count(page, "TotalCount", "DescribeInstances"):
                break
        return sorted((i for i in found if i.state in wanted), key=lambda i: i.instance_id)

    def interruption_events(self) -> list[Interruption]:
        """Scheduled or executing preemptible-instance interruption events for our instances."""
        out: list[Interruption] = []
        problems: list[str] = []
        seen, now = 0, self.clock()
        for number in range(1, MAX_PAGES + 1):
            req = DescribeInstanceHistoryEventsRequest()
            req.set_EventType(parse.INTERRUPTION_EVENT)
            req.set_InstanceEventCycleStatuss(["Scheduled", "Executing"])
            req.set_Tags([{"Key": k, "Value": v} for k, v in MANAGED_TAGS.items()])
            req.set_PageSize(self.settings.page_size)
            req.set_PageNumber(number)
            page = self.api.call(req)
            events = self._items(page, "InstanceSystemEventSet", "InstanceSystemEventType",
                                 "DescribeInstanceHistoryEvents")
            seen += len(events)
            out += [e for e in (parse.interruption_event(raw, now, problems) for raw in events)
                    if e is not None]
            if not events or seen >= self._count(page, "TotalCount", "DescribeInstanceHistoryEvents"):
                break
        # An event stays in the answer, problem and all, every poll until the reclaim: say
        # each problem once while it lasts (kept for this poll only, so the set stays small).
        for problem in problems:
            if problem not in self._said:
                log.warning("%s", problem)
        self._said = set(problems)
        return out

    def interruptions(self) -> list[Interruption]:
        """Events (with the release time) first; a Recycling lock without an event still counts."""
        events = {i.instance_id: i for i in self.interruption_events()}
        now = self.clock()
        for inst in self.managed_instances():
            if inst.recycling and inst.instance_id not in events:
                events[inst.instance_id] = Interruption(
                    inst.instance_id, InterruptionKind.INTERRUPTION, at=now, deadline=None,
                    source="alicloud:OperationLocks Recycling")
        return sorted(events.values(), key=lambda i: (i.at, i.instance_id))


def _brief(value: object) -> str:
    """An answer's value for a message: short, whatever it holds."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
