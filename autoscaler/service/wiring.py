"""Real components from the config: signal reader, price signals, executor, reconciler."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime

from autoscaler.actuators.ansible import AnsibleActuator
from autoscaler.actuators.terraform.provisioner import TerraformProvisioner
from autoscaler.catalog import Catalog
from autoscaler.clouds import connect
from autoscaler.clouds.base import CloudMarket
from autoscaler.fleet.store import FleetStore
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.addresses import AddressOf
from autoscaler.service.config import ServiceConfig
from autoscaler.service.executor import Executor
from autoscaler.service.executor.collaborators import drainers_for
from autoscaler.service.executor.operations import Inline, WorkerPools
from autoscaler.service.forecasts import PoolForecasts
from autoscaler.service.interruptions import InterruptionIntake, sources_for
from autoscaler.service.reconciler import Reconciler
from autoscaler.signals.demand import Bins, load_demand
from autoscaler.signals.prices import PriceSignals, PriceView
from autoscaler.signals.prometheus import PrometheusReader
from autoscaler.signals.reader import SignalReader


class Markets:
    """One read-only cloud adapter per (cloud, region), kept for the service's lifetime
    (their TTL caches then work across ticks)."""

    def __init__(self, config: ServiceConfig, catalog: Catalog):
        self.config, self.catalog = config, catalog
        self._adapters: dict[tuple[str, str], CloudMarket] = {}
        self._lock = threading.Lock()

    def __call__(self, cloud: str, region: str) -> CloudMarket:
        with self._lock:
            key = (cloud, region)
            if key not in self._adapters:
                self._adapters[key] = self._make(cloud, region)
            return self._adapters[key]

    def _make(self, cloud: str, region: str) -> CloudMarket:
        aws = self.config.clouds.aws
        if cloud == "aws" and region in aws.sqs_queue_urls:
            from autoscaler.clouds.aws import AwsCloud, AwsSettings

            return AwsCloud(region, catalog=self.catalog, settings=AwsSettings(
                endpoint_url=aws.endpoint_url, queue_url=aws.sqs_queue_urls[region]))
        return connect(cloud, region, endpoint=self.config.clouds.endpoint(cloud),
                       catalog=self.catalog)

    def interruption_clouds(self) -> list[CloudMarket]:
        """Regions whose spot notices are read: AWS regions with a queue, Alibaba regions."""
        clouds = self.config.clouds
        return ([self("aws", r) for r in sorted(clouds.aws.sqs_queue_urls)]
                + [self("alicloud", r) for r in clouds.alicloud.regions])


def build_forecasts(config: ServiceConfig, store: FleetStore) -> PoolForecasts:
    """Demand history and forecasts; with Prometheus configured, a pool's first tick tops
    its history up from ``gpu_autoscaler_demand_gpus`` (signals/demand.py)."""
    prom = config.signals.prometheus
    if prom is None:
        return PoolForecasts(store)

    def warm(pools: list[str], now: datetime) -> Bins:
        reader = PrometheusReader(prom)
        try:
            return load_demand(reader, pools, now)
        finally:
            reader.close()

    return PoolForecasts(store, warm=warm)


def build_signals(config: ServiceConfig, catalog: Catalog,
                  closers: list[Callable[[], None]]) -> SignalReader:
    reader = SignalReader(config.signals, catalog)
    closers.append(reader.close)
    return reader


class CatalogPrices(PriceSignals):
    """Prices from the catalog only; launch capacity errors are still kept for the engine."""

    def observe(self, policies: Mapping[str, TeamPolicy]) -> PriceView:
        return PriceView([], self.capacity_errors(), [])


def build_prices(config: ServiceConfig, markets: Markets,
                 clock: Callable[[], datetime]) -> PriceSignals:
    if not config.clouds.market_prices:
        return CatalogPrices(markets, clock=clock)
    return PriceSignals(markets, clock=clock)


def build_actuators(config: ServiceConfig, store: FleetStore,
                    policies: Callable[[], dict[str, TeamPolicy]], address_of: AddressOf,
                    catalog: Catalog, clock: Callable[[], datetime], markets: Markets, *,
                    notices_in_reconciler: bool = True) -> tuple[Executor, Reconciler]:
    """The executor and reconciler (issue 6) wired to Terraform, Ansible and the drainers.
    Spot notices are read by the reconciler unless the service's notice loop takes them
    (``notices_in_reconciler=False``): never by both."""
    settings = config.executor
    provisioner = TerraformProvisioner(config.terraform, cloud_for=markets, clock=clock)
    bootstrapper = AnsibleActuator(config.ansible, address_of, catalog=catalog, clock=clock)
    drainers = drainers_for(config.signals, checkpoint_scope=settings.checkpoint_scope)
    runner = Inline(clock) if settings.operations == "inline" else WorkerPools(clock, {
        "apply": settings.apply_parallelism, "bootstrap": settings.bootstrap_parallelism,
        "drain": settings.drain_parallelism})
    executor = Executor(store, policies, provisioner, bootstrapper, drainers, address_of,
                        settings, catalog, clock, runner=runner)
    intake = build_intake(config, store, policies, clock, markets) if notices_in_reconciler else None
    reconciler = Reconciler(store, provisioner, markets, settings, clock, policies=policies,
                            interruptions=intake)
    return executor, reconciler


def build_intake(config: ServiceConfig, store: FleetStore,
                 policies: Callable[[], dict[str, TeamPolicy]], clock: Callable[[], datetime],
                 markets: Markets) -> InterruptionIntake | None:
    """Spot notices from every AWS queue and Alibaba region the config names (None: none)."""
    sources = sources_for(markets.interruption_clouds())
    return InterruptionIntake(store, sources, config.executor, clock, policies) if sources else None
