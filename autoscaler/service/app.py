"""The running service: loop, API, scheduler, health, clean shutdown.

``service/wiring.py``'s ``build_service(config)`` assembles it; ``Service.run(stop)`` schedules the tick
job (``max_instances=1``, ``coalesce=True``: ticks never overlap, a late tick is run once,
not many times), the spot-notice job (``executor.notice_interval``; its own thread, so a
notice never waits for a tick) and the lease job, serves the HTTP API, and on ``stop``
lets the current step finish, releases the lease and closes everything.
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

from autoscaler.catalog import Catalog
from autoscaler.fleet.store import Fenced, FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.service import sd_notify
from autoscaler.service.config.models import HttpSettings, ServiceConfig
from autoscaler.service.control.interruptions import NoticeLoop
from autoscaler.service.control.loop import (
    ExecutorLike,
    ServiceLoop,
    TickReport,
    describe_stages,
)
from autoscaler.service.control.wake import TickWaker
from autoscaler.service.executor.advance import AdvanceReport
from autoscaler.service.http.api import ApiHandlers, ApiServer, Health
from autoscaler.service.http.status import build_status, plan_json

log = logging.getLogger(__name__)
HEALTH_FACTOR = 3  # healthy while the last tick is younger than 3 intervals
STUCK_AFTER = timedelta(minutes=30)  # a tick running longer than this is unhealthy
SHUTDOWN_WAIT = timedelta(seconds=60)  # for running applies/bootstraps at stop
FAILED_TICKS = 3  # unhealthy after this many failed ticks in a row


def dashboard_links(http: HttpSettings) -> tuple[tuple[str, str], ...]:
    from autoscaler.dashboards.panels import DASHBOARDS
    from autoscaler.service.http.ui import dashboard_links as links

    return tuple(links(http.grafana_url, ((d.uid, d.title) for d in DASHBOARDS)))


class ServiceError(RuntimeError):
    pass


class Service:
    def __init__(self, config: ServiceConfig, loop: ServiceLoop, store: FleetStore,
                 catalog: Catalog, closers: list[Callable[[], None]] | None = None,
                 notices: NoticeLoop | None = None):
        self.config, self.loop, self.store, self.catalog = config, loop, store, catalog
        self.notices = notices
        self.leadership, self.metrics = loop.leadership, loop.metrics
        self.api: ApiServer | None = None
        self.keeper: Any = None  # a RequestKeeper when capacity requests are enabled
        self._closers = closers or []
        self._tick_started: float | None = None
        self._started = time.monotonic()
        self._scheduler: BackgroundScheduler | None = None
        self.waker = TickWaker(config.tick.wake_after, self._tick_sooner, lambda: datetime.now(UTC),
                               follow_up=config.tick.follow_up)

    # -- what the API serves ----------------------------------------------------------
    def health(self) -> Health:
        health = self._liveness()
        return Health(True, health.reason + self._troubles()) if health.ok else health

    def _liveness(self) -> Health:
        interval = self.config.tick.interval.total_seconds()
        limit = HEALTH_FACTOR * interval
        now = time.monotonic()
        last = self.loop.state.last_tick_monotonic
        running = self._tick_started
        failing = self._failing()
        if failing is not None:
            return Health(False, failing)
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

    def _failing(self) -> str | None:
        """Ticks that run but fail are as dead as ticks that stopped."""
        state = self.loop.state
        if state.failed_in_a_row < FAILED_TICKS:
            return None
        return (f"the last {state.failed_in_a_row} ticks failed (limit {FAILED_TICKS}); last "
                f"error in {state.last_error_stage}: {state.last_error}")

    def _troubles(self) -> str:
        """What is wrong but does not stop the service: said, not failed, by /healthz."""
        state, errors = self.loop.state, self.loop.reloader.errors()
        parts = [f"{len(errors)} policy problem(s), first: {errors[0]}" if errors else "",
                 *(f"{pool}: {why}" for pool, why in sorted(state.pool_errors.items())),
                 *(f"{pool}: LOST marking frozen" for pool in sorted(state.lost_frozen))]
        said = "; ".join(p for p in parts if p)
        return f"; {said}" if said else ""

    def status(self) -> dict[str, Any]:
        leader = dataclasses.asdict(self.leadership.info())
        if leader.get("lease_expires_at") is not None:
            leader["lease_expires_at"] = leader["lease_expires_at"].isoformat()
        return build_status(self.store, self.loop.state, leader, self.loop.reloader.errors(),
                            self.catalog, self.loop.last_snapshot, self.loop.clock())

    def plan(self) -> dict[str, Any] | None:
        state = self.loop.state  # the engine's last plan, not a capacity request's own
        return plan_json(self.store, state.last_plan_id if state.is_leader else None)

    # -- running ------------------------------------------------------------------------
    def keep_requests(self, executor: ExecutorLike | None) -> None:
        """Move capacity requests one step before and after each tick (service/control/request_keeper.py)."""
        from autoscaler.fleet.requests import RequestBook
        from autoscaler.service.control.request_keeper import RequestKeeper

        if executor is None:
            return
        self.keeper = RequestKeeper(RequestBook(self.store), self.loop.policies,
                                    self.catalog, executor.submit, self.loop.clock)
        self.keeper.observed = lambda: self.loop.last_snapshot
        from autoscaler.signals.request_links import KubeLinks, LinkWatcher

        signals = self.config.signals
        kube = signals.kubernetes if "kubernetes" in signals.scheduler else None
        self.keeper.ended_links = LinkWatcher(
            signals.slurm if "slurm" in signals.scheduler else None,
            KubeLinks.connect(kube) if kube is not None else None)

    def _requests_step(self) -> None:
        if self.keeper is None:
            return
        try:
            self.keeper.run()
        except Fenced:
            log.debug("capacity requests: not the leader, nothing moved")
        except Exception:  # a request's trouble must not stop the fleet's tick
            log.exception("capacity requests: the step failed; retried next tick")

    def tick(self) -> TickReport:
        """One tick, tracked for /healthz (what the scheduler job runs)."""
        started = self._tick_started = time.monotonic()
        self.waker.started()
        report: TickReport | None = None
        keeping = TickReport(started_at=self.loop.clock())  # the request steps' time
        try:
            with keeping.timed("requests"):
                self._requests_step()
            report = self.loop.tick()
            # Again after the tick: a node its advance made READY completes the request now,
            # not one tick later.
            with keeping.timed("requests"):
                self._requests_step()
            return report
        finally:
            self._tick_started = None
            self.waker.ended()
            if report is not None and self.keeper is not None:
                report.stages["requests"] = keeping.stages["requests"]
            took, interval = time.monotonic() - started, self.config.tick.interval.total_seconds()
            if took > interval:
                where = describe_stages(report.stages) if report is not None else "?"
                log.info("tick took %.0fs, longer than the %.0fs interval: the ticks due "
                         "meanwhile were skipped, never run in parallel; stages: %s",
                         took, interval, where)

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
                               status=self.status, plan=self.plan, links=dashboard_links(http),
                               requests=self._requests_api())
        self.api = ApiServer(handlers, http.host, http.port, http.token()).start()
        return self.api

    def _requests_api(self) -> Callable[[str, str, str, bytes], tuple[int, Any]] | None:
        """/v1/requests, when the config names at least one team token."""
        from autoscaler.fleet.requests import RequestBook
        from autoscaler.service.http.requests_api import RequestsApi, service_admitter

        teams = self.config.http.teams()
        if not teams:
            return None
        book = RequestBook(self.store)

        def quotas() -> dict[str, Any]:  # the cluster's quotas as the last tick read them
            return dict(self.loop.last_snapshot.cluster_quotas) if self.loop.last_snapshot else {}

        admit = service_admitter(book, self.loop.policies, self.catalog, self.config.engine,
                                 quotas)
        api = RequestsApi(book, teams, admit, self.loop.clock, self.config.http.token())

        def handle(method: str, path: str, authorization: str, body: bytes) -> tuple[int, Any]:
            status, answer = api.handle(method, path, authorization, body)
            if method == "POST" and status == 201:  # a new request: the keeper moves it at the tick
                self.waker.wake(f"capacity request {answer.get('id', '?')} created")
            return status, answer

        return handle

    def scheduler(self) -> BackgroundScheduler:
        interval = self.config.tick.interval.total_seconds()
        sched = BackgroundScheduler(timezone=UTC)
        # misfire_grace_time=None: a run the scheduler starts late (a starved process,
        # a paused VM) still runs, once (coalesce); APScheduler would skip one more than
        # its grace late, and a lease renewal skipped that way lets the lease lapse.
        sched.add_job(self.tick, "interval", seconds=interval, id="tick", name="tick",
                      next_run_time=datetime.now(UTC), max_instances=1, coalesce=True,
                      misfire_grace_time=None)
        if self.notices is not None:
            # Spot notices do not wait for a tick (nor for the apply a tick started).
            every = self.config.executor.notice_interval.total_seconds()
            sched.add_job(self._notices_pass, "interval", seconds=every, id="notices",
                          name="notices", max_instances=1, coalesce=True,
                          misfire_grace_time=None, next_run_time=datetime.now(UTC))
        if self.leadership.enabled:
            # Often enough that a follower takes over soon after the TTL runs out.
            every = max(0.5, self.config.leader.ttl.total_seconds() / 6)
            sched.add_job(self.renew_lease, "interval", seconds=every, id="lease",
                          name="lease", max_instances=1, coalesce=True,
                          misfire_grace_time=None, next_run_time=datetime.now(UTC))
        return sched

    def work_finished(self, why: str, report: AdvanceReport) -> None:
        """An executor worker finished. Its nodes move on only at the next advance: an
        instance created or started (BOOTSTRAPPING) gets its bootstrap, a bootstrapped node
        its READY; for those, that tick comes sooner (``tick.follow_up``). So does a
        launch the cloud refused in a pool whose placement group has other pools: the
        next decide spills the work to one of them. A refused launch in a pool decided
        alone leaves its work unserved, which is demand (``tick.wake_after``, 10 s by
        default: the next decide tries the next zone sooner, which the simulator found
        helps most windows and not all, docs/designs/benchmark-misses.md#wait). Drain
        steps run every tick while they last."""
        if report.moved(NodeState.BOOTSTRAPPING) or report.bootstrapped:
            self.waker.follow_up(why)
        elif report.capacity_errors and (spill := self._grouped(report)):
            self.waker.follow_up(f"{why}: capacity refused in {', '.join(spill)}, whose "
                                 "placement group has other pools")
        elif report.capacity_errors:
            refused = sorted({a.pool for a in report.applies if not a.ok})
            self.waker.wake(f"{why}: capacity refused in {', '.join(refused) or 'a pool'}")

    def _grouped(self, report: AdvanceReport) -> list[str]:
        """The pools of the report's failed applies that have placement-group mates."""
        policies = self.loop.policies()
        out = []
        for apply in report.applies:
            team, _, name = apply.pool.partition("/")
            policy = policies.get(team)
            if not apply.ok and policy is not None and policy.group_mates(name):
                out.append(apply.pool)
        return out

    def _notices_pass(self) -> None:
        """The notice job: interrupted nodes' stand-ins are decided by the next tick, woken."""
        assert self.notices is not None
        report = self.notices.run_once()
        if report.interrupted:
            self.waker.wake(f"spot notice for {len(report.interrupted)} node(s)")

    def _tick_sooner(self, at: datetime) -> datetime | None:
        """Move the next tick to ``at`` if it is due later (the waker's reschedule)."""
        sched = self._scheduler
        job = sched.get_job("tick") if sched is not None else None
        due: datetime | None = job.next_run_time if job is not None else None
        if sched is None or due is None or due <= at:
            return None
        sched.modify_job("tick", next_run_time=at)
        return due

    def request_reload(self) -> None:
        """SIGHUP (``systemctl reload``): every policy file's content is compared at the next
        tick, which starts now unless one is running (then it is the next one)."""
        log.info("reload requested: every policy file is read again at the next tick")
        self.loop.reloader.reread()
        if self._tick_started is None:
            self._tick_sooner(datetime.now(UTC))

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set; then finish the current step and shut down."""
        sched = self._scheduler = self.scheduler()
        self.start_api()
        sched.start()
        log.info("service running: tick every %ss%s", self.config.tick.interval.total_seconds(),
                 " (dry run: nothing is changed)" if self.loop.dry_run else "")
        sd_notify.notify("READY=1")
        try:
            stop.wait()
        finally:
            sd_notify.notify("STOPPING=1")
            log.info("stopping: waiting for the current step to finish")
            self.loop.request_stop()
            sched.shutdown(wait=True)
            self._finish_operations()
            self.leadership.release()
            self.close()
            log.info("stopped")

    def _finish_operations(self) -> None:
        """Give the operations in the executor's workers (an apply, an Ansible run) a
        bounded time to finish before the lease goes; one cut short is resumed from the
        store by the next leader (its pool's Terraform lock keeps a second apply out)."""
        executor = self.loop.executor
        if executor is not None:
            executor.stop_bootstraps()
        if executor is not None and not executor.wait(SHUTDOWN_WAIT.total_seconds()):
            log.warning("stopping with operations still running: %s", ", ".join(
                f"{op.kind} {op.what}" for op in executor.running()))

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


def one_line(exc: BaseException) -> str:
    """An exception as one line for a start-up error (the driver's own message first)."""
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0]}" if text else type(cause).__name__
