"""One tick of the service: observe -> decide -> record -> act.

``ServiceLoop.tick()`` is what the scheduler runs every ``tick.interval`` (never two at
once: the job has ``max_instances=1``). In order:

1. renew the leader lease (a follower only reloads policies and refreshes its metrics);
2. reload changed policy files (a broken file keeps its team's last good policy);
3. read what Prometheus and Slurm/Kubernetes observe (``Observed``);
4. reconcile the store with Terraform state, the cloud and the scheduler (interruption
   notices become INTERRUPTED nodes here, before the engine looks at the fleet; the
   scheduler's observations keep a busy node from being called LOST);
5. read the fleet again and build the tick's Snapshot once, from the observations and the
   parts that follow the fleet as the reconciler left it: prices, launch backoffs,
   forecast floors, the nodes capacity requests hold and the baked pools' images
   (model/snapshot_parts.py);
6. ``decide()`` with ``now`` from the injected clock, on the fleet without the warm pools'
   nodes, then the warm pools' step (service/control/warm.py: launches start stopped warm
   nodes first; stale, old or surplus ones are retired and the pools refilled); record the
   plan and its reasons in the store and log one line per action; at most once an hour,
   prune the plans older than ``plan_retention`` (``FleetStore.prune_plans``: the newest
   ones and those with an action still open stay), the audit rows older than
   ``audit_retention`` (``FleetStore.prune_audit``) and the demand history bins past its
   retention, removed pools' included (``DemandHistory.prune_stale``);
7. hand the plan to the executor (``submit``, store writes only), then ``advance``: it
   hands the side effects (Terraform applies, Ansible batches, drain steps) to bounded
   workers and returns at once, so a tick keeps its cadence whatever they take (DESIGN.md
   "Deciding never waits for doing"); what finished since the last tick comes back in its
   report: capacity errors go into the price signals, errors caught inside actuation
   into ``gpu_autoscaler_step_errors_total{component}`` and /status. Spot notices are
   taken by their own fast loop (``interruptions.NoticeLoop``), not here.

A stage that raises ends the tick: it is logged with the stage and the exception, counted
in ``gpu_autoscaler_tick_errors{stage}``, and the next tick runs as usual. A reconciler
failure does not end the tick (it is a safety net; scaling must not wait for it).
``--dry-run`` skips step 4, stops after step 6 (the plan is stored as a dry run) and
changes nothing.
A stop request (SIGTERM) lets the current step finish and skips the rest of the tick.

Every stage is timed (``TickReport.stages``: wall and this thread's CPU seconds, summed
when a stage runs twice), so a slow tick says where its time went: a tick longer than the
interval logs the breakdown (service/app.py), and the scale benchmarks print it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from autoscaler.actuators.terraform.settings import TerraformSettings
from autoscaler.catalog import Catalog
from autoscaler.engine import EngineSettings, Plan, decide
from autoscaler.engine.pricing import Prices
from autoscaler.fleet.queries import next_seq_by_pool
from autoscaler.fleet.store import FleetStore
from autoscaler.model.clock import utc_now
from autoscaler.model.lifecycle import BILLABLE, StateLimits
from autoscaler.model.node import FleetView
from autoscaler.model.plan import Hold
from autoscaler.model.snapshot import ForecastFloor, ImageObservation, Snapshot
from autoscaler.model.snapshot_parts import Observed, assemble
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.config.reload import PolicyReloader
from autoscaler.service.control import warm
from autoscaler.service.control.backoff import launch_backoffs
from autoscaler.service.control.collaborators import (
    ExecutorLike,
    HeldNodes,
    ImagesLike,
    PreviewImages,
    PricesLike,
    ReconcilerLike,
    SignalsLike,
)
from autoscaler.service.control.leader import Leadership
from autoscaler.service.control.preview import preview
from autoscaler.service.control.reconciler import Finding, ReconcileReport
from autoscaler.service.control.tick_report import (
    StageTime,
    TickError,
    TickReport,
    advance_lines,
    describe_stages,
    run_stage,
)
from autoscaler.service.executor.advance import AdvanceReport
from autoscaler.service.executor.settings import ExecutorSettings
from autoscaler.service.http.status import LoopState, describe_action, public_text
from autoscaler.service.observe.forecasts import PoolForecasts
from autoscaler.service.observe.metrics import ServiceMetrics
from autoscaler.service.observe.metrics_fleet import FleetObserver

log = logging.getLogger(__name__)
ACTIVITY = 20  # activity lines kept for /status and the demo's view
# Recorded plans: a row per tick (~6 KB with 20 pools), read back only for the newest one
# (/status, the page, the CLI) and by a resubmission; kept a week for people to look back.
PLAN_RETENTION = timedelta(days=7)
# Audit rows: a few per interruption, failed health check, long job or operation; read only
# by people, who look back further than at plans.
AUDIT_RETENTION = timedelta(days=90)
KEEP_PLANS = 100  # the newest plans, kept whatever their age (a service stopped for weeks)
PRUNE_EVERY = timedelta(hours=1)
PRUNE_BATCH = 2000  # plans, audit rows or demand bins deleted by one prune (one transaction)

# Its public names before tick_report.py and collaborators.py took their code: importers keep them.
__all__ = ["ACTIVITY", "ExecutorLike", "HeldNodes", "ImagesLike", "PreviewImages", "PricesLike",
           "ReconcilerLike", "ServiceLoop", "SignalsLike", "StageTime", "TickError", "TickReport",
           "advance_lines", "describe_stages"]


def _finding_line(finding: Finding) -> str:
    """A reconciler finding for /status and /ui: its kind, what it is about and why."""
    about = finding.node or finding.instance_id or finding.pool
    return public_text(f"{finding.kind}{f' {about}' if about else ''}: {finding.detail}")


class ServiceLoop:
    """Everything one tick needs; every collaborator is injected (tests pass fakes)."""

    def __init__(self, *, store: FleetStore, reloader: PolicyReloader, signals: SignalsLike,
                 catalog: Catalog, metrics: ServiceMetrics, leadership: Leadership,
                 executor: ExecutorLike | None = None, reconciler: ReconcilerLike | None = None,
                 prices: PricesLike | None = None, engine: EngineSettings | None = None,
                 clock: Callable[[], datetime] = utc_now, dry_run: bool = False,
                 interval_s: float = 30.0, terraform_preview: TerraformSettings | None = None,
                 forecasts: PoolForecasts | None = None, state_limits: StateLimits | None = None,
                 held: HeldNodes | None = None,
                 preview_images: PreviewImages | None = None,
                 images: ImagesLike | None = None, warm_hashes: warm.WarmHashes | None = None,
                 plan_retention: timedelta = PLAN_RETENTION,
                 audit_retention: timedelta = AUDIT_RETENTION):
        if executor is None and not dry_run:
            raise ValueError("a live loop needs an executor (or run with dry_run=True)")
        self.store, self.reloader, self.signals = store, reloader, signals
        self.catalog, self.metrics, self.leadership = catalog, metrics, leadership
        self.executor, self.reconciler, self.prices = executor, reconciler, prices
        self.engine = engine or EngineSettings()
        self.clock, self.dry_run = clock, dry_run
        self.terraform_preview = terraform_preview
        self.preview_images = preview_images  # baked pools' images for terraform_preview
        self.forecasts = forecasts  # demand history + forecasts (service/observe/forecasts.py)
        self.held = held  # None: no capacity requests (no team tokens)
        self.images = images  # baked pools' images (signals/images.py); None: not read
        self.warm_hashes = warm_hashes  # warm pools' bootstrap hashes (their refresh)
        self.plan_retention, self.audit_retention = plan_retention, audit_retention
        self._pruned_at: datetime | None = None  # the last prune of the plans and audit tables
        self._images_error: str | None = None  # the last failure logged
        # The reconciler's settings (``executor:``), so the state-timeout ratio it exports
        # divides by the limit the reconciler acts on.
        self.state_limits = state_limits or ExecutorSettings().state_limits
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._state_lock = threading.RLock()  # self.state is also written by the notice loop
        self._holds: set[str] = set()  # logged at INFO when they start, DEBUG while they last
        self._unserved: set[tuple[str, str]] = set()  # (job, why) as _holds
        self._backoffs: set[str] = set()  # launch back-offs in force, logged when they start
        self.last_snapshot: Snapshot | None = None
        self._observer = FleetObserver(store)
        self.state = LoopState(started_at=clock(), interval_s=interval_s, dry_run=dry_run)

    # -- control ------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def policies(self) -> dict[str, TeamPolicy]:
        """The current effective policies (what the executor reads for bootstrap settings)."""
        return self.reloader.policies

    # -- the tick -------------------------------------------------------------------
    def tick(self) -> TickReport:
        """Run one tick; never raises (errors are logged, counted and reported)."""
        with self._lock:  # belt and braces: the scheduler already forbids overlap
            started = time.monotonic()
            report = TickReport(started_at=self.clock())
            try:
                self._run(report)
            except TickError as exc:
                report.error = exc
                self.metrics.tick_errors.labels(exc.stage).inc()
                log.error("tick failed in %s: %s", exc.stage, exc, exc_info=exc.cause)
            finally:
                with report.timed("metrics"):
                    self._finish(report, time.monotonic() - started)
            return report

    def _run(self, report: TickReport) -> None:
        stage = run_stage
        report.leader = stage(report, "leader", self.leadership.renew)
        self.metrics.leader.set(1 if report.leader else 0)
        reload = stage(report, "reload", self.reloader.refresh)
        self.metrics.set_policy_errors(reload.errors)
        if not report.leader:
            return
        policies = self.reloader.policies
        fleet = stage(report, "fleet", self.store.fleet_view)
        now = self.clock()
        observed = stage(report, "signals",
                         lambda: self.signals.read(policies, fleet.nodes, now))
        if not self.dry_run and self.reconciler is not None:
            with report.timed("reconcile"):
                report.reconcile = self._reconcile(observed)
            fleet = stage(report, "fleet", self.store.fleet_view)  # interruptions, LOST nodes
        snapshot = stage(report, "signals", lambda: self._snapshot(
            policies, fleet, observed, now, record=True), timed_as="snapshot")
        plan = stage(report, "decide", lambda: self.decide(policies, fleet, snapshot, now))
        report.plan = plan
        report.plan_id = stage(report, "record",
                               lambda: self.store.record_plan(plan, dry_run=self.dry_run))
        with report.timed("record"):
            self._prune(now)
        with report.timed("report"):
            self._log_plan(report.plan_id, plan)
            self.metrics.count_plan(plan, self.dry_run)
            self.metrics.set_pools(plan)
            self._observe(snapshot, plan)
        with report.timed("preview"):
            self._preview(plan, fleet, policies, snapshot, now)
        if self.dry_run or self._should_stop(report):
            return
        executor = self.executor
        if executor is None:  # guarded in __init__; keeps type checkers honest
            return
        report.created = stage(report, "submit", lambda: executor.submit(plan, report.plan_id))
        if self._should_stop(report):
            return
        report.advance = stage(report, "advance", lambda: executor.advance(snapshot))
        self._feed_capacity_errors(report.advance)
        self._note(advance_lines(report.advance))
        self.count_step_errors(report.advance.step_errors, report.advance.errors)

    def decide(self, policies: dict[str, TeamPolicy], fleet: FleetView, snapshot: Snapshot,
               now: datetime) -> Plan:
        """decide() on the fleet without its warm-pool nodes, then the warm pools' step."""
        engine_fleet, warm_nodes = warm.split(fleet)
        plan = decide(policies, engine_fleet, snapshot, now, catalog=self.catalog,
                      settings=self.engine)
        views = self.forecasts.views if self.forecasts is not None else {}
        floors = {k: v.warm_floor for k, v in views.items() if v.warm_floor is not None}
        return warm.apply(plan, policies, engine_fleet, warm_nodes,
                          Prices(self.catalog, snapshot, now), floors, self.warm_hashes, now,
                          self.engine, snapshot.missing)

    def _should_stop(self, report: TickReport) -> bool:
        if self.stopping:
            report.stopped_early = True
            log.info("stop requested: skipping the rest of this tick")
            return True
        if not self.leadership.is_leader():
            report.stopped_early = True
            log.warning("leader lease lost during the tick: not acting on this plan")
            return True
        return False

    def _reconcile(self, observed: Observed) -> ReconcileReport | None:
        reconciler = self.reconciler
        if reconciler is None:
            return None
        try:
            found = reconciler.run(observed)
            self.count_step_errors({"reconcile": len(found.errors)}, found.errors)
            frozen = dict(found.frozen)  # the alert: metric and /status
            self.metrics.set_lost_frozen(frozen)
            # Replaced each run, not appended: a finding that lasts (a stuck drain) is found
            # again every run, so the list is what is true now.
            self._set_state(lost_frozen=frozen, reconciled_at=found.at, reconcile_error=None,
                            reconcile_findings=tuple(map(_finding_line, found.findings)))
            return found
        except Exception as exc:
            self.metrics.tick_errors.labels("reconcile").inc()
            log.exception("reconciler failed; deciding on the store as it is")
            # The findings stay those of the last run that ended, and say so: a stuck drain
            # is not over because the reconciler could not look this time.
            self._set_state(reconcile_error=public_text(f"{type(exc).__name__}: {exc}"))
            return None

    def read_snapshot(self, policies: dict[str, TeamPolicy], fleet: FleetView,
                      now: datetime) -> Snapshot:
        """What a tick would decide from at ``now`` on ``fleet``, without reconciling and
        without writing the demand history (``gpu-autoscaler plan --config``)."""
        observed = self.signals.read(policies, fleet.nodes, now)
        return self._snapshot(policies, fleet, observed, now, record=False)

    def _snapshot(self, policies: dict[str, TeamPolicy], fleet: FleetView, observed: Observed,
                  now: datetime, record: bool) -> Snapshot:
        """The Snapshot of ``observed`` and of the parts that follow ``fleet``: prices,
        launch backoffs, forecast floors, held nodes and baked pools' images
        (``record=False``: the demand history is read, not written)."""
        market = self.prices.observe(policies) if self.prices is not None else None
        if market is not None:
            self.metrics.set_spot_scores(market.spot_scores)
        backoffs = launch_backoffs(self.store, policies, now)
        self.metrics.set_backoffs({(b.pool, b.instance_type, b.zone or "", b.market.value): b.count
                                   for b in backoffs})
        described = tuple(b.describe() for b in backoffs)
        self._set_state(launch_backoffs=described)
        if record:  # a tick, not `plan --config`: log each back-off (or its next step) once
            for line in described:
                if line not in self._backoffs:
                    log.info("launch back-off: %s", line)
            self._backoffs = set(described)
        return assemble(observed, market=market,
                        backoffs=[b.as_capacity_error() for b in backoffs],
                        forecasts=self._forecast(policies, fleet, observed, now, record),
                        held=self.held(fleet.nodes, now) if self.held is not None else None,
                        images=self._images(policies))

    def _images(self, policies: dict[str, TeamPolicy]) -> dict[str, ImageObservation]:
        """The baked pools' images; a failure leaves them all unknown (the engine then
        decides as usual, the Terraform plan's own check guards) and is logged once until
        it changes."""
        if self.images is None:
            return {}
        try:
            found = dict(self.images.observe(policies))
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            if text != self._images_error:
                self._images_error = text
                log.warning("baked images not read (decided as if not known): %s", text,
                            exc_info=exc)
            return {}
        if self._images_error is not None:
            self._images_error = None
            log.info("baked images read again")
        return found

    def _forecast(self, policies: dict[str, TeamPolicy], fleet: FleetView, observed: Observed,
                  now: datetime, record: bool) -> dict[str, ForecastFloor]:
        """The forecast floors (mode scale); a failure costs the tick its floors only, never
        the tick (it is counted as a step error and shown)."""
        if self.forecasts is None:
            return {}
        try:
            floors = self.forecasts.update(policies, fleet, observed, now, record=record)
        except Exception as exc:
            log.exception("forecasts failed")
            self.count_step_errors({"forecast": 1}, [f"forecast: {type(exc).__name__}: {exc}"])
            return {}
        self.metrics.set_forecasts(self.forecasts.views, self.forecasts.actual)
        self._set_state(forecasts={k: v.json() for k, v in sorted(self.forecasts.views.items())})
        return floors

    def _prune(self, now: datetime) -> None:
        """The plans older than ``plan_retention``, the audit rows older than
        ``audit_retention`` and the demand history bins past its retention (of every pool:
        one removed from the policies is never refitted), at most once per PRUNE_EVERY (a
        batch of each a call: a backlog goes a batch a tick). A failure costs nothing but
        that prune: it is counted as a step error and tried again next hour."""
        due = self._pruned_at is None or not (
            self._pruned_at <= now < self._pruned_at + PRUNE_EVERY)  # a clock step back too
        if not due:
            return
        plans_before, audit_before = now - self.plan_retention, now - self.audit_retention
        prunes: list[tuple[str, datetime, Callable[[], int]]] = [
            ("plans", plans_before, lambda: self.store.prune_plans(
                plans_before, KEEP_PLANS, limit=PRUNE_BATCH)),
            ("audit rows", audit_before, lambda: self.store.prune_audit(
                audit_before, limit=PRUNE_BATCH))]
        if self.forecasts is not None:
            history = self.forecasts.history
            prunes.append(("demand bins", now - history.retention,
                           lambda: history.prune_stale(now, limit=PRUNE_BATCH)))
        more = False
        for what, before, prune in prunes:
            try:
                gone = prune()
            except Exception as exc:
                log.exception("pruning old %s failed", what)
                self.count_step_errors({"prune": 1},
                                       [f"prune {what}: {type(exc).__name__}: {exc}"])
                continue
            if gone:
                log.info("pruned %d %s from before %s", gone, what, before)
            more = more or gone >= PRUNE_BATCH
        # A full batch leaves more: the next tick goes on, else the next hour.
        self._pruned_at = None if more else now

    def _feed_capacity_errors(self, advance: AdvanceReport) -> None:
        if self.prices is None:
            return
        for err in advance.capacity_errors:
            self.prices.record_capacity_error(err)

    def count_step_errors(self, by_component: Mapping[str, int], texts: Sequence[str]) -> None:
        """Errors caught inside actuation: the step_errors metric and /status (the
        spot-notice loop reports its own here too, from its thread)."""
        counts = {k: v for k, v in by_component.items() if v}
        if not counts:
            return
        with self._state_lock:
            totals = dict(self.state.step_errors)
            for component, count in counts.items():
                self.metrics.step_errors.labels(component).inc(count)
                totals[component] = totals.get(component, 0) + count
            recent = (self.state.recent_errors + tuple(public_text(t) for t in texts))[-ACTIVITY:]
            self._set_state(step_errors=totals, recent_errors=recent)

    # -- reporting ------------------------------------------------------------------
    def _log_plan(self, plan_id: int, plan: Plan) -> None:
        mode = "dry-run plan" if self.dry_run else "plan"
        holds = set()
        for action in plan.actions:
            line = f"{mode} {plan_id}: {action.kind} {describe_action(action)}: {action.reason}"
            if isinstance(action, Hold):
                holds.add(action.reason)
                # A hold repeats every tick while its cause lasts: log it when it starts.
                log.log(logging.DEBUG if action.reason in self._holds else logging.INFO, "%s", line)
            else:
                log.info("%s", line)
        self._holds = holds
        unserved = {(j.id, j.reason) for j in plan.unserved}
        for job in plan.unserved:  # never bought for: logged like a hold, when it starts
            log.log(logging.DEBUG if (job.id, job.reason) in self._unserved else logging.INFO,
                    "%s %d: unserved %s (%s): %s", mode, plan_id, job.id, job.constraint, job.reason)
        self._unserved = unserved
        for choice in plan.placements:  # they change every tick while jobs wait
            log.debug("%s %d: placement %s", mode, plan_id, choice.reason)
        if not plan.changes():
            log.debug("%s %d: no changes", mode, plan_id)

    def _preview(self, plan: Plan, fleet: FleetView, policies: dict[str, TeamPolicy],
                 snapshot: Snapshot, now: datetime) -> None:
        try:
            images = (self.preview_images(policies)
                      if self.preview_images and self.terraform_preview else None)
            deltas = preview(plan, fleet, policies, self.catalog, snapshot, now,
                             self.terraform_preview, next_seq=next_seq_by_pool(self.store),
                             images=images)
        except Exception as exc:  # a preview is for people; it never stops the tick
            log.exception("preview failed")
            self.count_step_errors({"preview": 1}, [f"preview: {type(exc).__name__}: {exc}"])
            return
        lines = tuple(d.line() for d in deltas)
        for line in lines:
            log.info("%s", line)
        views = self.forecasts.views if self.forecasts is not None else {}
        # Forecast lines repeat every tick: in the preview, not in the activity log.
        self._set_state(previews=lines + tuple(views[k].line() for k in sorted(views)))
        self._note(lines)

    def _note(self, lines: Iterable[str]) -> None:
        stamp = f"{self.clock():%H:%M:%S}"
        fresh = tuple(f"{stamp} {line}" for line in lines)
        if fresh:
            with self._state_lock:
                self._set_state(activity=(self.state.activity + fresh)[-ACTIVITY:])

    def _observe(self, snapshot: Snapshot, plan: Plan) -> None:
        missing = {k: s.data_missing for k, s in plan.pools.items() if s.data_missing}
        self._set_state(missing_sources=tuple(snapshot.missing), data_missing=missing,
                        pool_errors={k: s.error for k, s in plan.pools.items() if s.error})
        self.last_snapshot = snapshot

    def _finish(self, report: TickReport, seconds: float) -> None:
        self.metrics.ticks.inc()
        self.metrics.tick_duration.observe(seconds)
        self.metrics.last_tick.set(time.time())
        try:
            self._fleet_metrics(report.leader)
        except Exception as exc:
            log.exception("cannot refresh fleet metrics from the store")
            self.count_step_errors({"metrics": 1}, [f"fleet metrics: {type(exc).__name__}: {exc}"])
        err = report.error
        running = self.executor.running() if self.executor is not None else []
        self._set_state(
            operations=tuple(f"{op.kind} {op.what} since {op.started_at:%H:%M:%S}" for op in running),
            ticks=self.state.ticks + 1, last_tick_at=self.clock(),
            last_tick_monotonic=time.monotonic(), last_duration_s=round(seconds, 3),
            last_ok_at=self.state.last_ok_at if err else self.clock(),
            last_error=public_text(str(err), None) if err else None,
            last_error_stage=err.stage if err else None,
            failed_in_a_row=self.state.failed_in_a_row + 1 if err else 0,
            is_leader=report.leader,
            last_plan_id=report.plan_id if report.plan_id is not None else self.state.last_plan_id)

    def _set_state(self, **changes: object) -> None:
        with self._state_lock:
            self.state = replace(self.state, **changes)  # type: ignore[arg-type]

    def _fleet_metrics(self, leader: bool) -> None:
        nodes = self.store.nodes()
        snapshot = self.last_snapshot or Snapshot(taken_at=self.clock())
        prices = Prices(self.catalog, snapshot, self.clock())
        per_pool: dict[str, float] = {}
        for node in nodes:
            if node.state in BILLABLE:
                per_pool[node.pool_key] = per_pool.get(node.pool_key, 0.0) + prices.node_hourly(node)
        self.metrics.set_fleet(nodes, {k: round(v, 4) for k, v in per_pool.items()})
        self._observer.refresh(self.metrics, nodes, self.reloader.policies, self.state_limits,
                               prices, snapshot, self.clock(), leader)
