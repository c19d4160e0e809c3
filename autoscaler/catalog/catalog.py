"""The instance catalog and operator price overrides.

AWS on-demand prices are us-east-1 Linux list prices. No authoritative public list exists
for Alibaba Cloud, so its types carry no price until the operator supplies a price file
(or the ECS DescribePrice API fills one): a pool using an unpriced type is refused with a
message that says which file to write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from autoscaler.catalog.mig import MigProfile, mig_profiles


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
    on_demand_usd: float | None
    spot_discount: float  # 0.7 means spot is usually 70% below on-demand

    @property
    def mig(self) -> dict[str, MigProfile]:
        """MIG profiles of one of its GPUs; empty without MIG."""
        return mig_profiles(self.gpu_model, self.gpu_memory_gib)

    @property
    def spot_usd(self) -> float | None:
        if self.on_demand_usd is None:
            return None
        return round(self.on_demand_usd * (1 - self.spot_discount), 4)


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
    # MIG-capable (see catalog/mig.py). Launch list prices; AWS lowered P4/P5 prices in
    # 2025, so operators should supply current ones in a price file.
    _t("aws", "p4d.24xlarge", 8, "A100", 40, 96, 1152, 32.7726, 0.60),
    _t("aws", "p4de.24xlarge", 8, "A100", 80, 96, 1152, 40.9657, 0.60),
    _t("aws", "p5.48xlarge", 8, "H100", 80, 192, 2048, 98.32, 0.60),
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
    """Immutable lookup of instance types; ``with_prices`` returns an updated copy."""

    def __init__(self, types: Iterable[InstanceType]):
        self._types: dict[tuple[str, str], InstanceType] = {(t.cloud, t.name): t for t in types}

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

    def on_demand_usd(self, cloud: str, name: str) -> float:
        itype = self.get(cloud, name)
        if itype.on_demand_usd is None:
            raise MissingPriceError(
                f"no on-demand price for {cloud} {name}: add it to a price file "
                f"(prices: {{{cloud}: {{{name}: {{on_demand: <usd per hour>}}}}}}) "
                "and pass it with --prices or the config's catalog.prices_file"
            )
        return itype.on_demand_usd

    def with_prices(self, prices: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> Catalog:
        """Apply ``{cloud: {type: {on_demand, spot_discount}}}`` overrides."""
        updated = dict(self._types)
        for cloud, entries in prices.items():
            for name, fields in entries.items():
                base = self.get(cloud, name)
                unknown = set(fields) - {"on_demand", "spot_discount"}
                if unknown:
                    raise CatalogError(
                        f"price entry {cloud}/{name}: unknown keys {sorted(unknown)} "
                        "(allowed: on_demand, spot_discount)"
                    )
                on_demand = fields.get("on_demand", base.on_demand_usd)
                discount = fields.get("spot_discount", base.spot_discount)
                if on_demand is not None and float(on_demand) <= 0:
                    raise CatalogError(f"price entry {cloud}/{name}: on_demand must be > 0")
                if not 0 <= float(discount) < 1:
                    raise CatalogError(f"price entry {cloud}/{name}: spot_discount must be in [0, 1)")
                updated[(cloud, name)] = replace(
                    base,
                    on_demand_usd=None if on_demand is None else float(on_demand),
                    spot_discount=float(discount),
                )
        return Catalog(updated.values())


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
    if not isinstance(data, dict) or not isinstance(data.get("prices"), dict):
        raise CatalogError(f"{prices_file}: expected a mapping with a 'prices' key")
    return catalog.with_prices(data["prices"])
