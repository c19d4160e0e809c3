"""The service assembled from its config: loop, API, scheduler, signals, clean shutdown.

``build_service(config)`` wires the real components (tests and the demo inject fakes or
sandbox pieces through its keyword arguments); ``Service.run(stop)`` schedules the tick
job (``max_instances=1``, ``coalesce=True``: ticks never overlap, a late tick is run once,
not many times) and the lease job, serves the HTTP API, and on ``stop`` lets the current
step finish, releases the lease and closes everything.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from autoscaler.catalog import Catalog, load_catalog
from autoscaler.fleet.store import FleetStore
from autoscaler.service.addresses import AddressOf, make_resolver
from autoscaler.service.api import ApiHandlers, ApiServer, Health
from autoscaler.service.config import HttpSettings, ServiceConfig
from autoscaler.service.leader import Leadership
from autoscaler.service.loop import (
    ExecutorLike,
    PricesLike,
    ReconcilerLike,
    ServiceLoop,
    SignalsLike,
    utc_now,
)
from autoscaler.service.metrics import ServiceMetrics
from autoscaler.service.reload import PolicyReloader
from autoscaler.service.status import build_status, plan_json

log = logging.getLogger(__name__)
HEALTH_FACTOR = 3  # healthy while the last tick is younger than 3 intervals
STUCK_AFTER = timedelta(minutes=30)  # a tick running longer than this is unhealthy


def dashboard_links(http: HttpSettings) -> tuple[tuple[str, str], ...]:
    from autoscaler.dashboards.panels import DASHBOARDS
    from autoscaler.service.ui import dashboard_links as links

    return tuple(links(http.grafana_url, ((d.uid, d.title) for d in DASHBOARDS)))


class ServiceError(RuntimeError):
    pass


class Service:
    def __init__(self, config: ServiceConfig, loop: ServiceLoop, store: FleetStore,
                 catalog: Catalog, closers: list[Callable[[], None]] | None = None):
        self.config, self.loop, self.store, self.catalog = config, loop, store, catalog
        self.leadership, self.metrics = loop.leadership, loop.metrics
        self.api: ApiServer | None = None
        self._closers = closers or []
        self._tick_started: float | None = None
        self._started = time.monotonic()

    # -- what the API serves ----------------------------------------------------------
    def health(self) -> Health:
        interval = self.config.tick.interval.total_seconds()
        limit = HEALTH_FACTOR * interval
        now = time.monotonic()
        last = self.loop.state.last_tick_monotonic
        running = self._tick_started
        if running is not None and now - running < STUCK_AFTER.total_seconds():
            # A long step (a Terraform apply) is progress, not a hang.
            return Health(True, f"tick in progress for {now - running:.0f}s")
        if last is None:
            if now - self._started <= limit:
                return Health(True, "starting: first tick not finished yet")
            return Health(False, f"no tick finished in {now - self._started:.0f}s "
                          f"(limit {limit:.0f}s = {HEALTH_FACTOR} x tick interval)")
        age = now - last
        if age <= limit:
            return Health(True, f"last tick {age:.0f}s ago")
        return Health(False, f"last tick {age:.0f}s ago, more than {HEALTH_FACTOR} x the "
                      f"{interval:.0f}s interval")

    def status(self) -> dict[str, Any]:
        leader = dataclasses.asdict(self.leadership.info())
        if leader.get("lease_expires_at") is not None:
            leader["lease_expires_at"] = leader["lease_expires_at"].isoformat()
        return build_status(self.store, self.loop.state, leader, self.loop.reloader.errors(),
                            self.catalog, self.loop.last_snapshot, self.loop.clock())

    def plan(self) -> dict[str, Any] | None:
        return plan_json(self.store)

    # -- running ------------------------------------------------------------------------
    def tick(self) -> Any:
        """One tick, tracked for /healthz (what the scheduler job runs)."""
        started = self._tick_started = time.monotonic()
        try:
            return self.loop.tick()
        finally:
            self._tick_started = None
            took, interval = time.monotonic() - started, self.config.tick.interval.total_seconds()
            if took > interval:
                log.info("tick took %.0fs, longer than the %.0fs interval: the ticks due "
                         "meanwhile were skipped, never run in parallel", took, interval)

    def renew_lease(self) -> bool:
        """The lease job: renew (or try to take) the lease between ticks too."""
        leading = self.leadership.renew()
        self.metrics.leader.set(1 if leading else 0)
        return leading

    def start_api(self) -> ApiServer | None:
        http = self.config.http
        if not http.enabled:
            return None
        handlers = ApiHandlers(health=self.health, metrics=self.metrics.exposition,
                               status=self.status, plan=self.plan, links=dashboard_links(http))
        self.api = ApiServer(handlers, http.host, http.port, http.token()).start()
        return self.api

    def scheduler(self) -> BackgroundScheduler:
        interval = self.config.tick.interval.total_seconds()
        sched = BackgroundScheduler(timezone=UTC)
        sched.add_job(self.tick, "interval", seconds=interval, id="tick", name="tick",
                      next_run_time=datetime.now(UTC), max_instances=1, coalesce=True,
                      misfire_grace_time=max(1, int(interval)))
        if self.leadership.enabled:
            # Often enough that a follower takes over soon after the TTL runs out.
            every = max(0.5, self.config.leader.ttl.total_seconds() / 6)
            sched.add_job(self.renew_lease, "interval", seconds=every, id="lease",
                          name="lease", max_instances=1, coalesce=True,
                          next_run_time=datetime.now(UTC))
        return sched

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set; then finish the current step and shut down."""
        sched = self.scheduler()
        self.start_api()
        sched.start()
        log.info("service running: tick every %ss%s", self.config.tick.interval.total_seconds(),
                 " (dry run: nothing is changed)" if self.loop.dry_run else "")
        try:
            stop.wait()
        finally:
            log.info("stopping: waiting for the current step to finish")
            self.loop.request_stop()
            sched.shutdown(wait=True)
            self.leadership.release()
            self.close()
            log.info("stopped")

    def close(self) -> None:
        if self.api is not None:
            self.api.stop()
            self.api = None
        for close in reversed(self._closers):
            try:
                close()
            except Exception:
                log.exception("error while closing")
        self._closers = []


@dataclasses.dataclass
class Overrides:
    """Components to use instead of the ones the config describes (tests, demo)."""

    executor: ExecutorLike | None = None
    reconciler: ReconcilerLike | None = None
    signals: SignalsLike | None = None
    prices: PricesLike | None = None
    address_of: AddressOf | None = None
    store: FleetStore | None = None


def build_service(config: ServiceConfig, *, dry_run: bool = False,
                  clock: Callable[[], datetime] = utc_now,
                  overrides: Overrides | None = None) -> Service:
    from autoscaler.service.wiring import Markets, build_actuators, build_prices, build_signals

    o = overrides or Overrides()
    catalog = load_catalog(config.prices_file)
    markets = Markets(config, catalog)
    store = o.store or FleetStore(config.store.resolved_url())
    closers: list[Callable[[], None]] = [] if o.store else [store.close]
    reloader = PolicyReloader(config.policies_dir, catalog)
    signals = o.signals or build_signals(config, catalog, closers)
    prices = o.prices or build_prices(config, markets, clock)
    leadership = Leadership(store, config.leader, clock)
    executor, reconciler = o.executor, o.reconciler
    if executor is None and not dry_run:
        address_of = o.address_of or make_resolver(config.addresses)
        executor, built = build_actuators(config, store, lambda: reloader.policies, address_of,
                                          catalog, clock, markets)
        reconciler = reconciler or built
    loop = ServiceLoop(store=store, reloader=reloader, signals=signals, catalog=catalog,
                       metrics=ServiceMetrics(), leadership=leadership, prices=prices,
                       engine=config.engine, clock=clock, dry_run=dry_run,
                       interval_s=config.tick.interval.total_seconds(), executor=executor,
                       reconciler=reconciler, terraform_preview=config.terraform
                       if config.tick.preview == "terraform" else None)
    return Service(config, loop, store, catalog, closers)
