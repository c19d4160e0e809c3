"""The instance catalog and operator price overrides.

AWS types carry their us-east-1 Linux list price (``on_demand_usd``); ``catalog/regional.py``
holds the list prices of other regions where known. No authoritative public list exists
for Alibaba Cloud, so its types carry no price until the operator supplies a price file
(or the ECS DescribePrice API fills one): a pool using an unpriced type is refused with a
message that says which file to write.

``Catalog.price(cloud, region, name)`` is the one place a catalog price is chosen, in this
order (the first that has one wins, field by field):
  1. the price file's entry for that region,
  2. the price file's region-less entry (it means every region),
  3. the built-in list price of that region (``catalog/regional.py``),
  4. the built-in default (us-east-1 for AWS): a fallback, and ``Price.source`` says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from autoscaler.catalog.mig import MigProfile, mig_profiles
from autoscaler.catalog.price_file import PriceEntry, PriceFileError, PriceKey, parse_prices
from autoscaler.catalog.regional import DEFAULT_PRICE_REGION, regional_on_demand


class CatalogError(Exception):
    pass


class UnknownInstanceTypeError(CatalogError):
    pass


class MissingPriceError(CatalogError):
    pass


@dataclass(frozen=True)
class InstanceType:
    cloud: str
    name: str
    gpus: int
    gpu_model: str
    gpu_memory_gib: int
    vcpu: int
    ram_gib: float
    on_demand_usd: float | None  # AWS: the us-east-1 list price; see Catalog.price per region
    spot_discount: float  # 0.7 means spot is usually 70% below on-demand
    spot_list_usd: float | None = None  # the price file's region-less absolute spot price

    @property
    def mig(self) -> dict[str, MigProfile]:
        """MIG profiles of one of its GPUs; empty without MIG."""
        return mig_profiles(self.gpu_model, self.gpu_memory_gib)

    @property
    def spot_usd(self) -> float | None:
        if self.spot_list_usd is not None:
            return self.spot_list_usd
        return spot_from(self.on_demand_usd, self.spot_discount)


def spot_from(on_demand: float | None, discount: float) -> float | None:
    """The catalog's spot fallback: on-demand less the usual discount (4 decimals)."""
    return None if on_demand is None else round(on_demand * (1 - discount), 4)


@dataclass(frozen=True)
class Price:
    """A catalog price for one (cloud, region, type), and where it came from."""

    on_demand_usd: float | None
    spot_usd: float | None
    source: str  # "price file (us-west-2)", "us-east-1 list price used for eu-west-1", ...
    fallback_region: str | None = None  # set when another region's price stands in


def _t(cloud: str, name: str, gpus: int, model: str, mem: int, vcpu: int, ram: float,
       price: float | None, discount: float) -> InstanceType:
    return InstanceType(cloud, name, gpus, model, mem, vcpu, ram, price, discount)


_BUILTIN: tuple[InstanceType, ...] = (
    _t("aws", "p3.2xlarge", 1, "V100", 16, 8, 61, 3.06, 0.70),
    _t("aws", "p3.8xlarge", 4, "V100", 16, 32, 244, 12.24, 0.70),
    _t("aws", "p3.16xlarge", 8, "V100", 16, 64, 488, 24.48, 0.70),
    _t("aws", "g4dn.xlarge", 1, "T4", 16, 4, 16, 0.526, 0.65),
    _t("aws", "g4dn.2xlarge", 1, "T4", 16, 8, 32, 0.752, 0.65),
    _t("aws", "g4dn.12xlarge", 4, "T4", 16, 48, 192, 3.912, 0.65),
    _t("aws", "g5.xlarge", 1, "A10G", 24, 4, 16, 1.006, 0.60),
    # MIG-capable (see catalog/mig.py). us-east-1 list prices after AWS's June 2025 cut
    # (p4d 32.7726 -> 21.957642, p4de 40.9657 -> 27.44705, p5 98.32 -> 55.04), from the
    # SkyPilot AWS catalog built from the AWS Price List (source [v8] in regional.py),
    # read 2026-12-03.
    _t("aws", "p4d.24xlarge", 8, "A100", 40, 96, 1152, 21.957642, 0.60),
    _t("aws", "p4de.24xlarge", 8, "A100", 80, 96, 1152, 27.44705, 0.60),
    _t("aws", "p5.48xlarge", 8, "H100", 80, 192, 2048, 55.04, 0.60),
    # H200 (141 GB). p5e is sold through Capacity Blocks only: the Price List has no
    # on-demand price for it in any region ([v8]), so it has none here and a launch is
    # refused until the price file gives one. p5en: [v8], and dstack PR #4110 (2026-08).
    _t("aws", "p5e.48xlarge", 8, "H200", 141, 192, 2048, None, 0.60),
    _t("aws", "p5en.48xlarge", 8, "H200", 141, 192, 2048, 63.296, 0.60),
    # L4 (g6) and L40S (g6e): shapes and us-east-1 prices from [v7] in regional.py, read
    # 2026-12-03. The spot discounts are rough: that snapshot's us-east-1 spot prices
    # were about half the on-demand ones.
    _t("aws", "g6.xlarge", 1, "L4", 24, 4, 16, 0.8048, 0.50),
    _t("aws", "g6.2xlarge", 1, "L4", 24, 8, 32, 0.9776, 0.50),
    _t("aws", "g6.48xlarge", 8, "L4", 24, 192, 768, 13.3504, 0.50),
    _t("aws", "g6e.xlarge", 1, "L40S", 48, 4, 32, 1.861, 0.55),
    _t("aws", "g6e.12xlarge", 4, "L40S", 48, 48, 384, 10.49264, 0.55),
    _t("alicloud", "ecs.gn6i-c4g1.xlarge", 1, "T4", 16, 4, 15, None, 0.70),
    _t("alicloud", "ecs.gn6i-c8g1.2xlarge", 1, "T4", 16, 8, 31, None, 0.70),
    _t("alicloud", "ecs.gn6i-c16g1.4xlarge", 1, "T4", 16, 16, 62, None, 0.70),
    _t("alicloud", "ecs.gn6i-c24g1.12xlarge", 2, "T4", 16, 48, 186, None, 0.70),
    _t("alicloud", "ecs.gn6i-c24g1.24xlarge", 4, "T4", 16, 96, 372, None, 0.70),
    _t("alicloud", "ecs.gn6v-c8g1.2xlarge", 1, "V100", 16, 8, 32, None, 0.70),
    _t("alicloud", "ecs.gn6v-c8g1.8xlarge", 4, "V100", 16, 32, 128, None, 0.70),
    _t("alicloud", "ecs.gn6v-c8g1.16xlarge", 8, "V100", 16, 64, 256, None, 0.70),
    _t("alicloud", "ecs.gn7e-c16g1.4xlarge", 1, "A100", 80, 16, 125, None, 0.70),
    _t("alicloud", "ecs.gn7e-c16g1.32xlarge", 8, "A100", 80, 128, 1000, None, 0.70),
)


class Catalog:
    """Immutable lookup of instance types and their prices; ``with_prices`` returns an
    updated copy."""

    def __init__(self, types: Iterable[InstanceType],
                 overrides: Mapping[PriceKey, PriceEntry] | None = None):
        self._types: dict[tuple[str, str], InstanceType] = {(t.cloud, t.name): t for t in types}
        self._overrides: dict[PriceKey, PriceEntry] = dict(overrides or {})
        self._prices: dict[tuple[str, str, str], Price] = {}  # memo: the catalog is immutable

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._types

    def types(self, cloud: str | None = None) -> list[InstanceType]:
        return sorted(
            (t for t in self._types.values() if cloud is None or t.cloud == cloud),
            key=lambda t: (t.cloud, t.name),
        )

    def get(self, cloud: str, name: str) -> InstanceType:
        try:
            return self._types[(cloud, name)]
        except KeyError:
            known = ", ".join(t.name for t in self.types(cloud))
            raise UnknownInstanceTypeError(
                f"{name!r} is not a known {cloud} instance type (known: {known})"
            ) from None

    def price(self, cloud: str, region: str, name: str) -> Price:
        """The catalog's price of ``name`` in ``region`` and its source (order: module doc)."""
        key = (cloud, region, name)
        if key not in self._prices:
            self._prices[key] = self._price(cloud, region, name)
        return self._prices[key]

    def _price(self, cloud: str, region: str, name: str) -> Price:
        itype = self.get(cloud, name)
        here = self._overrides.get((cloud, name, region))
        everywhere = self._overrides.get((cloud, name, None))
        fallback: str | None = None
        listed = regional_on_demand(cloud, name, region)
        default_region = DEFAULT_PRICE_REGION.get(cloud)
        on_demand: float | None
        if here is not None and (here.on_demand_usd is not None or here.no_price):
            on_demand, source = here.on_demand_usd, f"price file ({region})"
        elif everywhere is not None and (everywhere.on_demand_usd is not None or everywhere.no_price):
            on_demand, source = everywhere.on_demand_usd, "price file (every region)"
        elif listed is not None:
            on_demand, source = listed, f"{region} list price"
        elif itype.on_demand_usd is None:
            on_demand, source = None, "no price in the catalog"
        elif default_region is None or default_region == region:
            on_demand, source = itype.on_demand_usd, f"{default_region or 'catalog'} list price"
        else:
            on_demand, fallback = itype.on_demand_usd, default_region
            source = f"{default_region} list price used for {region}"
        entries = [e for e in (here, everywhere) if e is not None]
        spot = next((e.spot_usd for e in entries if e.spot_usd is not None), None)
        if spot is None:
            discount = next((e.spot_discount for e in entries if e.spot_discount is not None),
                            itype.spot_discount)
            spot = spot_from(on_demand, discount)
        return Price(on_demand, spot, source, fallback)

    def on_demand_usd(self, cloud: str, name: str, region: str | None = None) -> float:
        """The on-demand price (of ``region`` when given, else the type's default)."""
        price = self.get(cloud, name).on_demand_usd if region is None else (
            self.price(cloud, region, name).on_demand_usd)
        if price is None:
            where = f" in {region}" if region else ""
            raise MissingPriceError(
                f"no on-demand price for {cloud} {name}{where}: add it to a price file "
                f"(prices: {{{cloud}: {{{name}: {{on_demand: <usd per hour>}}}}}}, or per region "
                f"{{{cloud}: {{<region>: {{{name}: {{on_demand: ...}}}}}}}}) "
                "and pass it with --prices or the config's catalog.prices_file"
            )
        return price

    def with_prices(self, prices: Mapping[str, Any]) -> Catalog:
        """Apply a price file's ``prices:`` mapping (shape: ``catalog/price_file.py``).

        Region-less entries also update the type itself, so code that reads
        ``InstanceType`` directly (the simulator, admission) sees the operator's price."""
        try:
            entries = parse_prices(prices, self._gpus_of, self._names)
        except PriceFileError as exc:
            raise CatalogError(str(exc)) from None
        updated = dict(self._types)
        for (cloud, name, region), entry in entries.items():
            if region is not None:
                continue
            base = updated[(cloud, name)]
            updated[(cloud, name)] = replace(
                base,
                on_demand_usd=None if entry.no_price else (
                    entry.on_demand_usd if entry.on_demand_usd is not None else base.on_demand_usd),
                spot_discount=base.spot_discount if entry.spot_discount is None else entry.spot_discount,
                spot_list_usd=entry.spot_usd if entry.spot_usd is not None else base.spot_list_usd,
            )
        return Catalog(updated.values(), {**self._overrides, **entries})

    def _gpus_of(self, cloud: str, name: str) -> int | None:
        itype = self._types.get((cloud, name))
        return itype.gpus if itype else None

    def _names(self, cloud: str) -> list[str]:
        return [t.name for t in self.types(cloud)]


def default_catalog() -> Catalog:
    return Catalog(_BUILTIN)


def load_catalog(prices_file: Path | None = None) -> Catalog:
    """The built-in catalog, with the operator's price file applied when given."""
    catalog = default_catalog()
    if prices_file is None:
        return catalog
    try:
        data = YAML(typ="safe").load(Path(prices_file).read_text())
    except OSError as exc:
        raise CatalogError(f"cannot read price file {prices_file}: {exc.strerror}") from exc
    except MarkedYAMLError as exc:  # one line, file:line:col, as policy and config errors
        mark = exc.problem_mark or exc.context_mark
        where = f"{prices_file}:{mark.line + 1}:{mark.column + 1}" if mark else f"{prices_file}:1:1"
        raise CatalogError(f"{where}: not valid YAML: {exc.problem or exc.context}") from None
    except YAMLError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise CatalogError(f"{prices_file}:1:1: not valid YAML: {first}") from None
    if not isinstance(data, dict) or not isinstance(data.get("prices"), dict):
        raise CatalogError(f"{prices_file}: expected a mapping with a 'prices' key")
    try:
        return catalog.with_prices(data["prices"])
    except CatalogError as exc:
        raise CatalogError(f"{prices_file}: {exc}") from None
