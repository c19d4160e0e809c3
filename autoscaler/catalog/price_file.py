"""The operator's price file, read into checked price entries.

Shape (``prices:`` is the top-level key of the YAML file)::

    prices:
      aws:
        p3.2xlarge: {on_demand: 2.75, spot_discount: 0.7}   # every region
        us-west-2:                                           # only this region
          p3.2xlarge: {on_demand: 3.00, spot: 0.95}

A key under a cloud is either an instance type of the catalog (region-less: every region)
or a region of ``catalog/regions.py`` holding types. A region entry beats a region-less
one, field by field. Every value is untrusted: a number must be a real, finite, positive
number no larger than ``MAX_USD_PER_GPU_HOUR`` per GPU, and each error names the key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.catalog.regions import REGIONS

# Far above any GPU list price (an 8 x H200 p5en.48xlarge is ~$8/GPU-h): a figure above
# this is a typo or a hostile file, and trusting it would skew every $/GPU-h comparison.
MAX_USD_PER_GPU_HOUR = 1000.0
FIELDS = ("on_demand", "spot", "spot_discount")


class PriceFileError(ValueError):
    """A price entry that cannot be used; the message names the key."""


@dataclass(frozen=True)
class PriceEntry:
    """What the operator said of one type, in one region or (region None) in every region."""

    on_demand_usd: float | None = None
    spot_usd: float | None = None  # an absolute spot fallback price
    spot_discount: float | None = None  # or spot = on_demand x (1 - discount)
    no_price: bool = False  # "on_demand: null": the type has no price here (launches refused)


PriceKey = tuple[str, str, str | None]  # (cloud, instance type, region or None)
GpusOf = Callable[[str, str], int | None]  # (cloud, type) -> GPUs, None: unknown type


def _number(value: Any, where: str) -> float:
    # bool is an int to Python; a YAML "yes" must not become $1/h.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PriceFileError(f"{where}: expected a number, got {type(value).__name__} {str(value)[:40]!r}")
    number = float(value)
    if not math.isfinite(number):
        raise PriceFileError(f"{where}: {value!r} is not a finite number")
    return number


def _usd(value: Any, where: str, gpus: int) -> float:
    usd = _number(value, where)
    if usd <= 0:
        raise PriceFileError(f"{where}: must be > 0 (got {usd:g})")
    if usd / max(gpus, 1) > MAX_USD_PER_GPU_HOUR:
        raise PriceFileError(f"{where}: ${usd:g}/h is ${usd / max(gpus, 1):g} per GPU-hour, above the "
                             f"${MAX_USD_PER_GPU_HOUR:g} sanity limit (a typo?)")
    return usd


def _entry(fields: Any, where: str, gpus: int) -> PriceEntry:
    if not isinstance(fields, Mapping):
        raise PriceFileError(f"{where}: expected a mapping of {', '.join(FIELDS)}")
    unknown = sorted(str(k) for k in fields if k not in FIELDS)
    if unknown:
        raise PriceFileError(f"{where}: unknown keys {unknown} (allowed: {', '.join(FIELDS)})")
    if "spot" in fields and "spot_discount" in fields:
        raise PriceFileError(f"{where}: give spot or spot_discount, not both")
    on_demand = fields.get("on_demand")
    spot = fields.get("spot")
    discount = fields.get("spot_discount")
    entry = PriceEntry(
        on_demand_usd=None if on_demand is None else _usd(on_demand, f"{where}.on_demand", gpus),
        spot_usd=None if spot is None else _usd(spot, f"{where}.spot", gpus),
        spot_discount=None if discount is None else _number(discount, f"{where}.spot_discount"),
        no_price="on_demand" in fields and on_demand is None)
    if entry.spot_discount is not None and not 0 <= entry.spot_discount < 1:
        raise PriceFileError(f"{where}.spot_discount: must be in [0, 1) (got {entry.spot_discount:g})")
    return entry


def _is_region_block(value: Any) -> bool:
    """A mapping of types (not of price fields): read as ``region: {type: {...}}``."""
    return isinstance(value, Mapping) and bool(value) and not set(value) & set(FIELDS)


def parse_prices(prices: Any, gpus_of: GpusOf,
                 known_types: Callable[[str], list[str]]) -> dict[PriceKey, PriceEntry]:
    """Checked entries of a ``prices:`` mapping; raises PriceFileError naming the key."""
    if not isinstance(prices, Mapping):
        raise PriceFileError("prices: expected a mapping of cloud -> entries")
    out: dict[PriceKey, PriceEntry] = {}
    for cloud, entries in prices.items():
        if cloud not in REGIONS:
            raise PriceFileError(f"prices.{cloud}: unknown cloud (known: {', '.join(sorted(REGIONS))})")
        if not isinstance(entries, Mapping):
            raise PriceFileError(f"prices.{cloud}: expected a mapping of instance types or regions")
        for key, value in entries.items():
            where = f"prices.{cloud}.{key}"
            if gpus_of(cloud, str(key)) is not None:
                out[(cloud, str(key), None)] = _entry(value, where, gpus_of(cloud, str(key)) or 1)
            elif _is_region_block(value):
                out.update(_region(cloud, str(key), value, gpus_of, known_types))
            else:
                raise PriceFileError(
                    f"{where}: {key!r} is not a known {cloud} instance type (known: "
                    f"{', '.join(known_types(cloud))}) nor a region holding types")
    return out


def _region(cloud: str, region: str, entries: Mapping[Any, Any], gpus_of: GpusOf,
            known_types: Callable[[str], list[str]]) -> dict[PriceKey, PriceEntry]:
    where = f"prices.{cloud}.{region}"
    if region not in REGIONS[cloud]:
        raise PriceFileError(f"{where}: {region!r} is not a region of {cloud} in the catalog "
                             f"(known: {', '.join(sorted(REGIONS[cloud]))})")
    out: dict[PriceKey, PriceEntry] = {}
    for name, fields in entries.items():
        gpus = gpus_of(cloud, str(name))
        if gpus is None:
            raise PriceFileError(f"{where}.{name}: {name!r} is not a known {cloud} instance type "
                                 f"(known: {', '.join(known_types(cloud))})")
        out[(cloud, str(name), region)] = _entry(fields, f"{where}.{name}", gpus)
    return out
