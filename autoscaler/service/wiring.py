"""The composition root: the service and its real components (signal reader, price signals,
executor, reconciler, forecasts) from the config; tests and the demo pass ``Overrides``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from autoscaler.actuators.ansible import AnsibleActuator
from autoscaler.actuators.bootstrap_hash import baked_images, warm_pool_hashes
from autoscaler.actuators.terraform import BakedImage
from autoscaler.actuators.terraform.provisioner import ImagesFor, TerraformProvisioner
from autoscaler.actuators.terraform.rootmodule import HASH_TAG
from autoscaler.catalog import Catalog, load_catalog
from autoscaler.clouds import connect
from autoscaler.clouds.base import CloudMarket
from autoscaler.fleet.store import FleetStore, SchemaError, StoreUnavailableError
from autoscaler.fleet.store_url import sqlite_file
from autoscaler.model.clock import utc_now
from autoscaler.model.pool import PoolRef
from autoscaler.model.snapshot import SpotScore
from autoscaler.model.snapshot_parts import PriceView
from autoscaler.policy.loader import load_dir
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.app import Service, ServiceError, one_line
from autoscaler.service.config.addresses import AddressOf, make_resolver
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.config.reload import PolicyReloader
from autoscaler.service.config.warm_pools import refusal
from autoscaler.service.control.interruptions import InterruptionIntake, NoticeLoop, sources_for
from autoscaler.service.control.leader import Leadership
from autoscaler.service.control.loop import (
    ExecutorLike,
    HeldNodes,
    ImagesLike,
    PricesLike,
    ReconcilerLike,
    ServiceLoop,
    SignalsLike,
)
from autoscaler.service.control.reconciler import Reconciler
from autoscaler.service.executor import Executor
from autoscaler.service.executor.collaborators import drainers_for
from autoscaler.service.executor.operations import Inline, WorkerPools
from autoscaler.service.instance_lock import hold_instance_lock
from autoscaler.service.observe.forecasts import PoolForecasts
from autoscaler.service.observe.metrics import ServiceMetrics
from autoscaler.signals.demand import Bins, load_demand
from autoscaler.signals.images import BakedImageReader
from autoscaler.signals.kubernetes import KubernetesReader
from autoscaler.signals.prices import PriceSignals, region_scores, wants
from autoscaler.signals.prometheus import PrometheusReader
from autoscaler.signals.reader import SignalReader

if TYPE_CHECKING:
    from autoscaler.actuators.drain.kubernetes import NodeCache

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
        if cloud == "aws":
            from autoscaler.clouds.aws import AwsCloud, AwsSettings

            return AwsCloud(region, catalog=self.catalog, settings=AwsSettings(
                endpoint_url=aws.endpoint_url, queue_url=aws.sqs_queue_urls.get(region),
                dead_letter_url=aws.dead_letter_queue_urls.get(region),
                account_id=aws.account_id, notice_regions=aws.notice_regions(),
                read_timeout=aws.read_timeout.total_seconds(),
                spot_scores=aws.spot_placement_scores))
        return connect(cloud, region, endpoint=self.config.clouds.endpoint(cloud),
                       catalog=self.catalog, read_timeout=aws.read_timeout.total_seconds())

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


def build_held(store: FleetStore) -> HeldNodes:
    """The loop's held part: node -> the capacity request holding it (not scaled down)."""
    from autoscaler.fleet.requests import RequestBook
    from autoscaler.service.control.request_keeper import held_by_requests

    book = RequestBook(store)
    return lambda nodes, now: held_by_requests(book, nodes, now)


def build_signals(config: ServiceConfig, catalog: Catalog,
                  closers: list[Callable[[], None]]) -> SignalReader:
    reader = SignalReader(config.signals, catalog)
    closers.append(reader.close)
    return reader


class CatalogPrices(PriceSignals):
    """Prices from the catalog only; launch capacity errors are still kept for the engine,
    and AWS's Spot placement scores still read where they are turned on: they are a stock
    signal, asked for separately, not a price (``clouds.aws.spot_placement_scores``)."""

    def __init__(self, markets: Markets, *, clock: Callable[[], datetime], aws_scores: bool):
        super().__init__(markets, clock=clock)
        self.aws_scores = aws_scores

    def observe(self, policies: Mapping[str, TeamPolicy]) -> PriceView:
        scores: list[SpotScore] = []
        missing: list[str] = []
        for want in wants(policies) if self.aws_scores else []:
            if want.cloud == "aws" and want.type_sets:
                scores += region_scores(self.market("aws", want.region), want,
                                        last_good=self.last_good(want), missing=missing)
        return PriceView([], self.capacity_errors(), missing, scores)


def build_prices(config: ServiceConfig, markets: Markets,
                 clock: Callable[[], datetime]) -> PriceSignals:
    if not config.clouds.market_prices:
        return CatalogPrices(markets, clock=clock,
                             aws_scores=config.clouds.aws.spot_placement_scores)
    return PriceSignals(markets, clock=clock)


def pool_images(config: ServiceConfig, policies: Callable[[], Mapping[str, TeamPolicy]]) -> ImagesFor:
    """A pool's baked image (None: base), from the policies of the moment: a reload that
    changes a baked pool's driver changes the hash its next apply looks for."""
    def image_of(ref: PoolRef) -> BakedImage | None:
        return baked_images(policies(), config.terraform, config.ansible).get(ref.key)
    return image_of


def preview_images(config: ServiceConfig) -> Callable[[Mapping[str, TeamPolicy]], dict[str, BakedImage]]:
    """The tick preview's baked images (``tick.preview: terraform``), from the tick's policies."""
    return lambda policies: baked_images(policies, config.terraform, config.ansible)


def build_images(config: ServiceConfig, markets: Markets,
                 clock: Callable[[], datetime]) -> BakedImageReader:
    """The baked pools' images for the snapshot: each pool's hash from the policies of the
    tick (as its Terraform apply computes it), looked up through the region's AWS adapter."""
    def hashes(policies: Mapping[str, TeamPolicy]) -> dict[str, str]:
        return {key: image.hash for key, image in
                baked_images(policies, config.terraform, config.ansible).items()}
    return BakedImageReader(hashes, lambda region: markets("aws", region), tag=HASH_TAG,
                            interval=config.clouds.aws.image_check_interval, clock=clock)


def build_actuators(config: ServiceConfig, store: FleetStore,
                    policies: Callable[[], dict[str, TeamPolicy]], address_of: AddressOf,
                    catalog: Catalog, clock: Callable[[], datetime], markets: Markets, *,
                    notices_in_reconciler: bool = True,
                    kube_nodes: NodeCache | None = None) -> tuple[Executor, Reconciler]:
    """The executor and reconciler (issue 6) wired to Terraform, Ansible and the drainers.
    Spot notices are read by the reconciler unless the service's notice loop takes them
    (``notices_in_reconciler=False``): never by both. ``kube_nodes``: the signal reader's
    watch cache of Kubernetes nodes, for the readiness of booting nodes."""
    settings = config.executor
    provisioner = TerraformProvisioner(config.terraform, cloud_for=markets, clock=clock,
                                       images=pool_images(config, policies))
    # A Slurm node registers the way the drainer deletes it: one setting for both.
    bootstrapper = AnsibleActuator(config.ansible, address_of, catalog=catalog, clock=clock,
                                   play_vars={"cluster_join_slurm_registration":
                                              config.signals.slurm.registration})
    drainers = drainers_for(config.signals, checkpoint_scope=settings.checkpoint_scope,
                            kube_nodes=kube_nodes)
    runner = Inline(clock) if settings.operations == "inline" else WorkerPools(clock, {
        "apply": settings.apply_parallelism, "bootstrap": settings.bootstrap_parallelism,
        "drain": settings.drain_parallelism, "state": 1})
    # A test's own clock measures the states' and drains' durations too; the real one, the
    # monotonic (a step of the wall clock must neither age nor stall them).
    steady = time.monotonic if clock is utc_now else None
    executor = Executor(store, policies, provisioner, bootstrapper, drainers, address_of,
                        settings, catalog, clock, runner=runner, monotonic=steady)
    intake = build_intake(config, store, policies, clock, markets) if notices_in_reconciler else None
    reconciler = Reconciler(store, provisioner, markets, settings, clock, policies=policies,
                            interruptions=intake, repair=executor.repair, runner=runner,
                            monotonic=steady)
    return executor, reconciler


def build_intake(config: ServiceConfig, store: FleetStore,
                 policies: Callable[[], dict[str, TeamPolicy]], clock: Callable[[], datetime],
                 markets: Markets) -> InterruptionIntake | None:
    """Spot notices from every AWS queue and Alibaba region the config names (None: none)."""
    sources = sources_for(markets.interruption_clouds())
    return InterruptionIntake(store, sources, config.executor, clock, policies) if sources else None


def open_store(config: ServiceConfig) -> FleetStore:
    """The store, or a :class:`ServiceError` saying in one line why it cannot be used: an
    unreachable database, a schema older or newer than this version's (fleet/schema.py), or
    a SQLite file the service could read but never write."""
    where = config.store.display_url()
    try:
        store = FleetStore(config.store.resolved_url())
    except StoreUnavailableError as exc:
        raise ServiceError(f"cannot open the store {where}: {one_line(exc.driver_error)}") from None
    except SchemaError as exc:  # older than this version needs, or newer than it knows
        raise ServiceError(f"cannot open the store {where}: {exc}") from None
    except OSError as exc:
        raise ServiceError(f"cannot open the store {where}: {one_line(exc)}") from None
    path = sqlite_file(store.url)
    if path is not None:
        # WAL writes a -wal and a -shm file beside the database: both need writing.
        unwritable = [p for p in (path, path.resolve().parent) if not os.access(p, os.W_OK)]
        if unwritable:
            store.close()
            raise ServiceError(f"cannot open the store {where}: {unwritable[0]} is not writable")
    return store


@dataclasses.dataclass
class Overrides:
    """Components to use instead of the ones the config describes (tests, demo)."""

    executor: ExecutorLike | None = None
    reconciler: ReconcilerLike | None = None
    signals: SignalsLike | None = None
    prices: PricesLike | None = None
    address_of: AddressOf | None = None
    store: FleetStore | None = None
    images: ImagesLike | None = None


def build_service(config: ServiceConfig, *, dry_run: bool = False,
                  clock: Callable[[], datetime] = utc_now,
                  overrides: Overrides | None = None) -> Service:
    """The service; what it opened is closed again (the instance lock released) if the
    building fails."""
    closers: list[Callable[[], None]] = []
    try:
        return _build(config, dry_run, clock, overrides or Overrides(), closers)
    except BaseException:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                close()
        raise


def _build(config: ServiceConfig, dry_run: bool, clock: Callable[[], datetime], o: Overrides,
           closers: list[Callable[[], None]]) -> Service:
    catalog = load_catalog(config.prices_file)
    refused = refusal(load_dir(config.policies_dir, catalog)[0])
    if refused:  # before the store opens: nothing runs for a policy the service cannot follow
        raise ServiceError(refused)
    markets = Markets(config, catalog)
    store = o.store or open_store(config)
    if o.store is None:
        closers.append(store.close)
    reloader = PolicyReloader(config.policies_dir, catalog)
    signals = o.signals or build_signals(config, catalog, closers)
    kube = getattr(signals, "kubernetes", None)
    kube = kube if isinstance(kube, KubernetesReader) else None
    # Capacity requests are made only through the team-token API: without it nothing is held.
    held = build_held(store) if config.http.team_tokens else None
    prices = o.prices or build_prices(config, markets, clock)
    leadership = Leadership(store, config.leader)
    if leadership.enabled:  # every store write and side effect is fenced by the lease epoch
        store.set_fence(leadership.token)
    elif o.store is None and not dry_run:
        # One controller per store, or two would both launch for the same demand. A dry
        # run changes nothing and may run beside it; an injected store is its owner's.
        lock = hold_instance_lock(config)
        if lock is not None:
            closers.insert(0, lock.release)  # released last, after the store is closed
    executor, reconciler = o.executor, o.reconciler
    intake = None
    if executor is None and not dry_run:
        address_of = o.address_of or make_resolver(config.addresses)
        built_executor, built = build_actuators(
            config, store, lambda: reloader.policies, address_of, catalog, clock, markets,
            notices_in_reconciler=False, kube_nodes=kube.node_records if kube is not None else None)
        executor, reconciler = built_executor, reconciler or built
        closers.append(built_executor.close)
        intake = build_intake(config, store, lambda: reloader.policies, clock, markets)
    loop = ServiceLoop(store=store, reloader=reloader, signals=signals, catalog=catalog,
                       metrics=ServiceMetrics(), leadership=leadership, prices=prices,
                       engine=config.engine, clock=clock, dry_run=dry_run,
                       interval_s=config.tick.interval.total_seconds(), executor=executor,
                       reconciler=reconciler, terraform_preview=config.terraform
                       if config.tick.preview == "terraform" else None,
                       preview_images=preview_images(config),
                       forecasts=build_forecasts(config, store),
                       state_limits=config.executor.state_limits, held=held,
                       plan_retention=config.store.plan_retention,
                       audit_retention=config.store.audit_retention,
                       images=o.images if o.images is not None else build_images(config, markets, clock),
                       warm_hashes=lambda policies: warm_pool_hashes(policies, config.terraform,
                                                                     config.ansible))
    notices = None
    if intake is not None and isinstance(executor, Executor):
        notices = NoticeLoop(intake, executor.drain_now, leadership.is_leader,
                             loop.count_step_errors, loop.metrics)
    service = Service(config, loop, store, catalog, closers, notices)
    if kube is not None:  # pending GPU pods on the watch wake a tick
        kube.on_demand = service.waker.wake
    if isinstance(executor, Executor) and isinstance(executor.runner, WorkerPools):
        executor.runner.on_done = service.work_finished
    if config.http.team_tokens:
        service.keep_requests(executor)
    return service
