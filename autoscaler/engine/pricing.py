"""Which (instance type, zone, market) to launch.

Prices come from the model's PriceBook (observed offerings, then the catalog); stock and
recent capacity errors rule offerings out. A spot offer in a zone whose Spot placement score
for the pool's types is low (:data:`LOW_SPOT_SCORE` or less) comes after every other offer
of the same pool, whatever its price: the cloud says a request there is unlikely to be met.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from autoscaler.catalog import Catalog
from autoscaler.model.node import Node
from autoscaler.model.prices import PriceBook
from autoscaler.model.snapshot import CapacityError, Snapshot
from autoscaler.policy.models import Market, Pool

# A Spot placement score at or below this ranks a spot offer last. AWS documents no
# threshold; 1-3 is the low third of its scale (10: "highly likely", 1: "not likely").
LOW_SPOT_SCORE = 3


def low_spot_score(score: int | None) -> bool:
    """Whether a Spot placement score says a spot request is unlikely to be met."""
    return score is not None and score <= LOW_SPOT_SCORE


@dataclass(frozen=True)
class Offer:
    instance_type: str
    zone: str | None
    market: Market
    hourly_usd: float
    gpus: int
    stand_in: str | None = None  # "us-east-1 list price used for eu-west-1": no price of its own
    score: int | None = None  # the zone's Spot placement score for the pool's types (spot only)
    passed: str | None = None  # cheaper offers of the pool ranked after this one for a low score

    @property
    def per_gpu(self) -> float:
        return self.hourly_usd / self.gpus

    @property
    def unlikely(self) -> bool:
        """The cloud scores a spot request here as unlikely to be met."""
        return low_spot_score(self.score)

    def describe(self) -> str:
        where = f" in {self.zone}" if self.zone else ""
        stand_in = f"; {self.stand_in}" if self.stand_in else ""
        score = f"; spot placement score {self.score}/10" if self.score is not None else ""
        passed = f"; before the cheaper {self.passed}" if self.passed else ""
        return (
            f"{self.instance_type} {self.market.value}{where} "
            f"(${self.hourly_usd:.3f}/h, ${self.per_gpu:.3f}/GPU-h{stand_in}{score}{passed})"
        )


class Prices(PriceBook):
    """Per-tick price view: catalog + observed offerings + recent capacity errors."""

    def __init__(self, catalog: Catalog, snapshot: Snapshot, now: datetime):
        super().__init__(catalog, snapshot)
        self.now = now
        self._offers: dict[tuple[object, ...], tuple[Pool, list[Offer], list[str]]] = {}
        # Per (cloud, region, type, market, zone) the newest error and the held one (``until``,
        # the launch backoff) that ends last: a fleet that keeps hitting a dry zone reports
        # thousands, and every offer consults them. Kept apart, a refusal reported with the
        # backoff's own time does not hide the backoff (it holds longer).
        self._errors: dict[tuple[str, str, str, Market], dict[tuple[str | None, bool], CapacityError]] = {}
        for err in snapshot.capacity_errors:
            by_zone = self._errors.setdefault((err.cloud, err.region, err.instance_type, err.market), {})
            slot = (err.zone, err.until is not None)
            seen = by_zone.get(slot)
            if seen is None or _ends_later(err, seen):
                by_zone[slot] = err
        self._scores = {(s.cloud, s.region, s.zone, frozenset(s.instance_types)): s.score
                        for s in snapshot.spot_scores}

    def node_type(self, node: Node) -> tuple[int, str]:
        """``node_gpus`` and ``gpu_model`` from one catalog lookup (the type's GPUs, as
        ``node_cost`` counts them)."""
        itype = self.itype(node.cloud, node.instance_type)
        return (itype.gpus, itype.gpu_model) if itype else (0, "")

    def capacity_error(self, pool: Pool, name: str, zone: str | None, market: Market) -> str | None:
        by_zone = self._errors.get((pool.cloud.value, pool.region, name, market))
        if not by_zone:
            return None
        backoff = pool.capacity.capacity_error_backoff
        # An error without a zone covers every zone; a pool without zones is hit by any.
        matching = by_zone.values() if zone is None else (
            by_zone.get((zone, False)), by_zone.get((zone, True)),
            by_zone.get((None, False)), by_zone.get((None, True)))
        recent = [e for e in matching if e is not None and (
            self.now < e.until if e.until is not None else self.now - e.at < backoff)]
        if not recent:
            return None
        err = max(recent, key=lambda e: e.at)
        if err.until is not None:
            return f"{err.code} since {err.at:%H:%M:%S} ({err.message})"
        return f"{err.code} at {err.at:%H:%M:%S}"

    def spot_refusals(self, pool: Pool) -> list[str]:
        """The pool's spot (type, zone) offerings refused within the back-off: an outage
        under way, which jobs past their max_wait do not wait out zone by zone."""
        out = []
        for name in pool.instance_types:
            for zone in list[str | None](pool.zones) or [None]:
                err = self.capacity_error(pool, name, zone, Market.SPOT)
                if err:
                    out.append(f"{name} spot" + (f" in {zone}" if zone else "") + f": {err}")
        return out

    def spot_refused_zones(self, pool: Pool, within: timedelta) -> dict[str | None, datetime]:
        """The newest spot refusal within ``within`` in each of the pool's zones (any zone
        when it lists none; None: a refusal that named no zone), of any of its types."""
        out: dict[str | None, datetime] = {}
        zones = set(pool.zones)
        for name in pool.instance_types:
            by_zone = self._errors.get((pool.cloud.value, pool.region, name, Market.SPOT))
            for (zone, _), err in (by_zone or {}).items():
                if (not zones or zone in zones) and self.now - err.at < within:
                    seen = out.get(zone)
                    out[zone] = err.at if seen is None else max(seen, err.at)
        return out

    def spot_score(self, pool: Pool, zone: str | None) -> int | None:
        """The zone's Spot placement score for the pool's own set of types, if read (a pool
        without zones has none: AWS would choose its zone)."""
        if zone is None or not self._scores:
            return None
        return self._scores.get((pool.cloud.value, pool.region, zone, frozenset(pool.instance_types)))

    def offers(
        self, pool: Pool, market: Market, min_gpus: float, gpu_model: str | None = None,
        zones: frozenset[str] | None = None, types: frozenset[str] | None = None,
    ) -> tuple[list[Offer], list[str]]:
        """Offers that fit, cheapest $/GPU-h first, and why the others were skipped
        (``types``: the instance types the job may run on, None: any). New lists each call."""
        # What a pool is offered depends only on the arguments and this tick's prices, stock
        # and errors, which do not change: a pool placing hundreds of parts asks the same
        # few questions. Keyed by the pool's identity; the entry keeps the pool alive.
        key = (id(pool), market, min_gpus, gpu_model, zones, types)
        seen = self._offers.get(key)
        if seen is None or seen[0] is not pool:
            found = self._offers_of(pool, market, min_gpus, gpu_model, zones, types)
            seen = self._offers[key] = (pool, *found)
        return list(seen[1]), list(seen[2])

    def _offers_of(
        self, pool: Pool, market: Market, min_gpus: float, gpu_model: str | None,
        zones: frozenset[str] | None, types: frozenset[str] | None,
    ) -> tuple[list[Offer], list[str]]:
        cloud, region = pool.cloud.value, pool.region
        out: list[Offer] = []
        skipped: list[str] = []
        if zones is not None and not pool.zones:
            # The pool launches in any zone of its region: a launch cannot keep the promise.
            return [], [f"the job may run only in {' or '.join(sorted(zones))} and the pool "
                        "lists no zones, so no launch can promise one (add zones to the pool)"]
        if types is not None and not types & set(pool.instance_types):
            return [], [f"the job runs only on {', '.join(sorted(types))}, which the pool does not offer"]
        for name in pool.instance_types:
            itype = self.itype(cloud, name)
            if itype is None or itype.gpus < math.ceil(min_gpus):
                continue
            if (gpu_model and itype.gpu_model != gpu_model) or (types is not None and name not in types):
                continue
            where_ok: list[str | None] = list(pool.zones) or [None]
            for zone in where_ok:
                if zones is not None and zone not in zones:
                    continue  # the job can only run elsewhere (its volume's zone)
                where = f"{name} {market.value}" + (f" in {zone}" if zone else "")
                err = self.capacity_error(pool, name, zone, market)
                if err:
                    skipped.append(f"{where}: capacity error {err}")
                    continue
                off = self._offering(cloud, region, name, zone)
                if off is not None and off.in_stock is False:
                    skipped.append(f"{where}: out of stock")
                    continue
                od = self.on_demand(cloud, region, name, zone)
                if od is None:
                    skipped.append(f"{where}: no price (add it to the price file)")
                    continue
                price, score = od, None
                if market is Market.SPOT:
                    score = self.spot_score(pool, zone)
                    spot = self.spot(cloud, region, name, zone)
                    if spot is None:
                        skipped.append(f"{where}: no spot price (none observed, none in the catalog)")
                        continue
                    if spot > pool.capacity.max_spot_price_ratio * od:
                        skipped.append(
                            f"{where}: spot ${spot:.3f}/h is above "
                            f"{pool.capacity.max_spot_price_ratio:g} x on-demand ${od:.3f}/h"
                        )
                        continue
                    price = spot
                listed = self.listed(cloud, region, name)
                stand_in = (listed.source if listed is not None and listed.fallback_region
                            and self.price_source(cloud, region, name, zone, market) != "observed"
                            else None)
                out.append(Offer(name, zone, market, price, itype.gpus, stand_in, score))
        out.sort(key=lambda o: (o.unlikely, o.per_gpu, o.gpus, o.hourly_usd, o.instance_type,
                                o.zone or ""))
        unlikely = [o for o in out if o.unlikely]
        if unlikely and len(unlikely) < len(out):
            out = [o if o.unlikely else replace(o, passed=_passed(o, unlikely)) for o in out]
        return out, skipped


def _passed(offer: Offer, unlikely: list[Offer]) -> str | None:
    """The cheaper offers a low Spot placement score ranked after ``offer``, in words."""
    cheaper = [u for u in unlikely if u.per_gpu < offer.per_gpu]
    if not cheaper:
        return None
    return ", ".join(f"{u.instance_type} in {u.zone} (spot placement score {u.score}/10)"
                     for u in cheaper[:3]) + (f" and {len(cheaper) - 3} more" if len(cheaper) > 3 else "")


def _ends_later(err: CapacityError, seen: CapacityError) -> bool:
    """Of two errors of one slot: a held one by its end, another by its time."""
    if err.until is not None and seen.until is not None:
        return err.until > seen.until
    return err.at > seen.at
