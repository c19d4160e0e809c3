"""Price signals: cloud market data turned into the snapshot's market part (``PriceView``,
model/snapshot_parts.py).

For every (cloud, region) the policies use, one market adapter (kept between ticks, so its
TTL caches work) gives on-demand prices, spot prices and per-zone stock; we return them
as ``Offering`` records, with the capacity errors seen recently (kept with their time so
the engine's backoff applies). Where the adapter gives them (AWS, when turned on), each
pool's set of types also gets its Spot placement score per zone (``SpotScore``). A cloud
API that fails is logged and named in ``missing``; its last good answer is reused for
``KEEP_LAST_GOOD``, and after that the engine falls back to the catalog. Nothing here
invents a price.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from autoscaler.clouds.base import CloudError, CloudMarket, SpotPrice, ZoneOffering, latest_spot
from autoscaler.model.clock import Clock, utc_now
from autoscaler.model.snapshot import CapacityError, Offering, SpotScore
from autoscaler.model.snapshot_parts import PriceView
from autoscaler.policy.models import TeamPolicy

log = logging.getLogger(__name__)
# The lowest spot price believed, as a share of on-demand: spot discounts reach about 90%.
SPOT_FLOOR = 0.05

MarketFactory = Callable[[str, str], CloudMarket]  # (cloud, region) -> adapter
T = TypeVar("T")
ERROR_RETENTION = timedelta(hours=2)  # longer than any sane policy backoff
KEEP_LAST_GOOD = timedelta(minutes=30)


@dataclass(frozen=True)
class RegionWant:
    """What the policies need from one region: the union of their types and zones."""

    cloud: str
    region: str
    types: tuple[str, ...]
    zones: tuple[str, ...] | None  # None: some pool takes any zone
    # Each pool's own set of types, for pools that list zones: what a Spot placement score
    # is asked for (a pool without zones launches wherever the cloud puts it).
    type_sets: tuple[tuple[str, ...], ...] = ()


def wants(policies: Mapping[str, TeamPolicy]) -> list[RegionWant]:
    types: dict[tuple[str, str], set[str]] = {}
    zones: dict[tuple[str, str], set[str]] = {}
    any_zone: set[tuple[str, str]] = set()
    sets: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    for policy in policies.values():
        for pool in policy.pools:
            key = (pool.cloud.value, pool.region)
            types.setdefault(key, set()).update(pool.instance_types)
            zones.setdefault(key, set()).update(pool.zones)
            if not pool.zones:
                any_zone.add(key)
            else:
                sets.setdefault(key, set()).add(tuple(sorted(set(pool.instance_types))))
    return [RegionWant(cloud, region, tuple(sorted(names)),
                       None if (cloud, region) in any_zone else tuple(sorted(zones[(cloud, region)])),
                       tuple(sorted(sets.get((cloud, region), ()))))
            for (cloud, region), names in sorted(types.items())]


@dataclass
class _LastGood:
    """The last answer of each market call, reused for ``keep`` when the API fails."""

    keep: timedelta
    clock: Clock
    items: dict[tuple[Any, ...], tuple[datetime, Any]] = field(default_factory=dict)
    # The last error logged per call: a source that keeps failing the same way (no
    # credentials, say) is logged once, not every tick; it stays in snapshot.missing.
    logged: dict[tuple[Any, ...], str] = field(default_factory=dict)

    def read(self, key: tuple[Any, ...], fetch: Callable[[], T], what: str,
             missing: list[str], strict: bool) -> T | None:
        try:
            value = fetch()
        except CloudError as exc:
            if strict:
                raise
            prior = self.items.get(key)
            # A negative age (our clock stepped back) is no proof of freshness either.
            fresh = prior is not None and timedelta(0) <= self.clock() - prior[0] < self.keep
            note = f"; using the answer from {prior[0]:%H:%M:%S}" if fresh and prior else ""
            if self.logged.get(key) != str(exc):
                self.logged[key] = str(exc)
                log.warning("%s failed: %s%s (logged once until it changes)", what, exc, note)
            missing.append(f"{what}: {exc}{note}")
            return prior[1] if fresh and prior else None
        self.items[key] = (self.clock(), value)
        if self.logged.pop(key, None) is not None:
            log.info("%s works again", what)
        return value


def _stock_zones(stock: list[ZoneOffering] | None) -> list[str] | None:
    if stock is None:
        return None
    return sorted({o.zone for o in stock if o.available})


def region_offerings(market: CloudMarket, want: RegionWant, *, strict: bool = False,
                     last_good: _LastGood | None = None) -> tuple[list[Offering], list[str]]:
    """Offerings per (type, zone) plus one per type for "any zone"; and what was missing."""
    memo = last_good or _LastGood(timedelta(0), utc_now)
    missing: list[str] = []
    where = f"prices {want.cloud}/{want.region}"
    types = list(want.types)
    od = memo.read(("od", want.types), lambda: market.on_demand_prices(types),
                   f"{where}: on-demand prices", missing, strict)
    stock = memo.read(("stock", want.types), lambda: market.offerings(types),
                      f"{where}: stock per zone", missing, strict)
    spot_zones = list(want.zones) if want.zones is not None else _stock_zones(stock)
    spot = memo.read(("spot", want.types, tuple(spot_zones or ())),
                     lambda: market.spot_price_history(types, spot_zones),
                     f"{where}: spot prices", missing, strict)
    return build_offerings(want, od, stock, spot), missing


def region_scores(market: CloudMarket, want: RegionWant, *, last_good: _LastGood | None = None,
                  missing: list[str] | None = None) -> list[SpotScore]:
    """The Spot placement scores of each pool's set of types in the region's listed zones,
    from a market that gives them (AWS with scores on); none from any other."""
    scorer: Callable[[list[str]], dict[str, int] | None] | None = getattr(
        market, "spot_placement_scores", None)
    if scorer is None or not want.type_sets:
        return []
    memo = last_good or _LastGood(timedelta(0), utc_now)
    gaps = missing if missing is not None else []
    out: list[SpotScore] = []
    for names in want.type_sets:
        got = memo.read(("scores", names), partial(scorer, list(names)),
                        f"prices {want.cloud}/{want.region}: spot placement scores of "
                        f"{', '.join(names)}", gaps, False)
        for zone, score in sorted((got or {}).items()):
            if want.zones is None or zone in want.zones:
                out.append(SpotScore(cloud=want.cloud, region=want.region, zone=zone,
                                     instance_types=list(names), score=score))
    return out


def _plausible(rows: Iterable[SpotPrice], on_demand: Mapping[str, float],
               want: RegionWant) -> list[SpotPrice]:
    """Spot rows at or above SPOT_FLOOR of their type's on-demand price: a cloud never
    discounts that far, and a junk price near zero would win every comparison (a 4-GPU
    node bought for a 1-GPU job at $0.000001/h). Types without an on-demand price keep
    every row."""
    kept, dropped = [], 0
    for row in rows:
        od = on_demand.get(row.instance_type)
        if od is not None and row.usd_per_hour < SPOT_FLOOR * od:
            dropped += 1
        else:
            kept.append(row)
    if dropped:
        log.warning("prices %s/%s: dropped %d spot price row(s) below %.0f%% of on-demand: no "
                    "cloud discounts that far", want.cloud, want.region, dropped, SPOT_FLOOR * 100)
    return kept


def build_offerings(want: RegionWant, on_demand: Mapping[str, float] | None,
                    stock: Iterable[ZoneOffering] | None,
                    spot: Iterable[SpotPrice] | None) -> list[Offering]:
    latest = latest_spot(_plausible(spot or [], on_demand or {}, want))
    stock_map = {(o.instance_type, o.zone): o for o in stock or []}
    known_stock = stock is not None
    zones = sorted({z for _, z in latest} | {z for _, z in stock_map})
    out: list[Offering] = []
    for name in want.types:
        od = (on_demand or {}).get(name)
        per_zone = []
        for zone in zones:
            price, offer = latest.get((name, zone)), stock_map.get((name, zone))
            if price is None and offer is None:
                continue
            per_zone.append(Offering(
                cloud=want.cloud, region=want.region, instance_type=name, zone=zone,
                spot_usd=price.usd_per_hour if price else None, on_demand_usd=od,
                in_stock=offer.available if offer else None))
        # "Any zone" (pools without zones): the dearest spot price among zones with stock,
        # so the engine's spot-ratio check is never fooled by a zone it may not get.
        usable = [o for o in per_zone if o.in_stock is not False]
        spots = [o.spot_usd for o in usable if o.spot_usd is not None]
        in_stock = any(o.in_stock is True for o in per_zone) if known_stock else None
        out += per_zone
        out.append(Offering(cloud=want.cloud, region=want.region, instance_type=name, zone=None,
                            spot_usd=max(spots) if spots else None, on_demand_usd=od,
                            in_stock=in_stock))
    return out


class PriceSignals:
    """Per tick: ``observe(policies)``. Launch failures: ``record_capacity_error(err)``."""

    def __init__(self, markets: MarketFactory, *, clock: Clock = utc_now):
        self._factory, self.clock = markets, clock
        self._markets: dict[tuple[str, str], CloudMarket] = {}
        self._last_good: dict[tuple[str, str], _LastGood] = {}
        self._errors: list[CapacityError] = []
        self._lock = threading.Lock()

    def market(self, cloud: str, region: str) -> CloudMarket:
        key = (cloud, region)
        if key not in self._markets:
            self._markets[key] = self._factory(cloud, region)
        return self._markets[key]

    def observe(self, policies: Mapping[str, TeamPolicy]) -> PriceView:
        offerings: list[Offering] = []
        scores: list[SpotScore] = []
        missing: list[str] = []
        for want in wants(policies):
            try:
                market = self.market(want.cloud, want.region)
            except CloudError as exc:
                log.warning("prices %s/%s: no market adapter: %s", want.cloud, want.region, exc)
                missing.append(f"prices {want.cloud}/{want.region}: {exc}")
                continue
            memo = self.last_good(want)
            found, gaps = region_offerings(market, want, last_good=memo)
            offerings += found
            missing += gaps
            scores += region_scores(market, want, last_good=memo, missing=missing)
        return PriceView(offerings, self.capacity_errors(), missing, scores)

    def last_good(self, want: RegionWant) -> _LastGood:
        """The region's last good answers, kept across ticks."""
        return self._last_good.setdefault((want.cloud, want.region),
                                          _LastGood(KEEP_LAST_GOOD, self.clock))

    def record_capacity_error(self, error: CapacityError) -> None:
        with self._lock:
            self._errors.append(error)

    def capacity_errors(self) -> list[CapacityError]:
        """Errors younger than ``ERROR_RETENTION``."""
        now = self.clock()
        with self._lock:
            self._errors = [e for e in self._errors if now - e.at < ERROR_RETENTION]
            return list(self._errors)
