"""Real components from the config: signal reader, price signals, executor, reconciler."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from autoscaler.catalog import Catalog
from autoscaler.clouds import connect
from autoscaler.clouds.base import CloudMarket
from autoscaler.fleet.store import FleetStore
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.addresses import AddressOf
from autoscaler.service.config import ServiceConfig
from autoscaler.signals.prices import PriceSignals
from autoscaler.signals.snapshot import SignalReader


def build_signals(config: ServiceConfig, catalog: Catalog,
                  closers: list[Callable[[], None]]) -> SignalReader:
    reader = SignalReader(config.signals, catalog)
    closers.append(reader.close)
    return reader


def build_prices(config: ServiceConfig, catalog: Catalog,
                 clock: Callable[[], datetime]) -> PriceSignals:
    def market(cloud: str, region: str) -> CloudMarket:
        return connect(cloud, region, endpoint=config.clouds.endpoint(cloud), catalog=catalog)

    return PriceSignals(market, clock=clock)


def build_actuators(config: ServiceConfig, store: FleetStore,
                    policies: Callable[[], dict[str, TeamPolicy]], address_of: AddressOf,
                    catalog: Catalog, clock: Callable[[], datetime]) -> tuple[Any, Any]:
    """The executor and reconciler of issue 6, wired to Terraform, Ansible and drainers."""
    raise NotImplementedError("the executor (autoscaler/service/executor) is not wired yet")
