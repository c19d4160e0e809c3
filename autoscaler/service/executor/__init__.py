"""The node lifecycle executor: turns a Plan into reality, one stored state at a time.

Contract (the service loop of issue 7 codes against it)::

    class Executor:
        def __init__(self, store: FleetStore, policies: Callable[[], dict[str, TeamPolicy]],
                     provisioner: Provisioner,      # Protocol over the Terraform actuator
                     bootstrapper: Bootstrapper,    # Protocol over the Ansible actuator
                     drainers: Mapping[str, Drainer],  # "slurm" | "kubernetes" | "none"
                     address_of: Callable[[Node], str | None],  # DESIGN.md resolver seam
                     settings: ExecutorSettings, catalog: Catalog,
                     clock: Callable[[], datetime],
                     runner: Runner | None = None): ...  # Inline (default) or WorkerPools

        def submit(self, plan: Plan, plan_id: int | None = None) -> list[str]:
            '''Record the plan's intents in the store (REQUESTED nodes for Launch/Replace,
            DRAINING for Drain, READY for CancelDrain, TERMINATING for Terminate, mark
            replacement_requested...). Returns names of nodes created. Fast, no side
            effects outside the store. With ``plan_id`` (the id record_plan returned) a
            resubmission after a crash creates nothing twice.'''

        def advance(self, snapshot: Snapshot | None = None) -> AdvanceReport:
            '''Do the side effects that the stored states call for, each state change
            written to the store BEFORE its side effect: terraform apply of every pool
            whose desired node map changed (REQUESTED -> PROVISIONING -> instance id and
            address recorded -> BOOTSTRAPPING), ansible for nodes ready to bootstrap,
            READY once the scheduler sees the node and (given the tick's snapshot) its
            metrics arrive, or at once for cluster kind none; drain steps (re-runnable,
            never blocking: done / retry-after / error), one checkpoint signal per long job
            whose pool asks for it, the periodic GPU health check of READY nodes whose
            pool sets health.check_interval, DRAINED -> TERMINATING -> apply
            -> TERMINATED; failures -> PROVISION_FAILED / BOOTSTRAP_FAILED with the reason.
            Bounded in time (``advance_budget``); safe to call again after a crash at any
            point. ``AdvanceReport.capacity_errors`` go back to the price signals.
            With ``WorkerPools`` (the service) the applies, Ansible batches and drain steps
            run on bounded workers (``executor/operations.py``) and advance() returns at
            once: the report holds what finished since the last call and ``started``.'''

        def drain_now(self, names: list[str]) -> AdvanceReport:
            '''A drain step for each named node on the caller's thread (the spot-notice
            loop), unless a worker runs one for it.'''

        def repair(self) -> AdvanceReport:
            '''Promised replacements a crash left uncreated (the reconciler's first step).'''

        def running(self) -> list[Operation]: ...       # for /status
        def wait(self, timeout: float) -> bool: ...     # tests, shutdown
        def stop_bootstraps(self) -> None: ...          # shutdown: Ansible runs stop now
        def close(self) -> None: ...

    class Reconciler:                       # autoscaler.service.control.reconciler
        def run(self, snapshot: Snapshot | None = None) -> ReconcileReport: ...

Real collaborators: :class:`TerraformProvisioner` (``actuators/terraform/provisioner.py``, one
PoolWorkspace per pool), ``AnsibleActuator`` (``actuators/ansible``), drainers from
``actuators/drain`` (:func:`autoscaler.service.executor.collaborators.drainers_for`).
Tests use the fakes in ``tests/fakes.py``, which implement the same Protocols.

Where things are: this file holds the Executor; ``advance.py`` the Step every phase works
with and the AdvanceReport it fills; ``collaborators.py`` the Protocols of what the
executor needs and the real drainers; one module per phase (``submit``, ``provision``,
``bootstrap``, ``drain``, ``long_jobs``); ``operations.py`` runs them inline or on
workers; what a node carries between advances is its typed ``Node.progress``
(``model/progress.py``).

Node states never change anywhere else: every write is a typed change applied by
``FleetStore.apply`` (moves checked against ``model/lifecycle.py``, committed before the
call returns), and a crash between a write and its side effect is resumed by the next
advance() or by the reconciler (``tests/service/executor/test_crash*.py`` stops the executor at
every such point).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime

from autoscaler.actuators.drain import Drainer
from autoscaler.catalog import Catalog
from autoscaler.fleet.operations import OperationLog
from autoscaler.fleet.store import FleetStore
from autoscaler.model.node import Node
from autoscaler.model.plan import Plan
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.executor import bootstrap, drain, health, long_jobs, provision, submit
from autoscaler.service.executor.advance import AdvanceReport, Change, PoolApply, Step
from autoscaler.service.executor.collaborators import Bootstrapper, Provisioner
from autoscaler.service.executor.operations import Inline, Operation, Runner
from autoscaler.service.executor.settings import ExecutorSettings
from autoscaler.service.executor.steady import SteadyTimeline

__all__ = [
    "AdvanceReport",
    "Bootstrapper",
    "Change",
    "Drainer",
    "Executor",
    "ExecutorSettings",
    "PoolApply",
    "Provisioner",
]


class Executor:
    def __init__(self, store: FleetStore, policies: Callable[[], dict[str, TeamPolicy]],
                 provisioner: Provisioner, bootstrapper: Bootstrapper,
                 drainers: Mapping[str, Drainer], address_of: Callable[[Node], str | None],
                 settings: ExecutorSettings, catalog: Catalog, clock: Callable[[], datetime],
                 runner: Runner | None = None, monotonic: Callable[[], float] | None = None):
        self.store = store
        self.policies = policies
        self.provisioner = provisioner
        self.bootstrapper = bootstrapper
        self.drainers = dict(drainers)
        self.address_of = address_of
        self.settings = settings
        self.catalog = catalog
        self.clock = clock
        self.runner = runner if runner is not None else Inline(clock)
        self.journal = OperationLog(store)
        self.runner.journal = self.journal
        self._recovered = False
        # How long each drain has waited; the monotonic clock once a drain is seen (None:
        # the caller's clock alone, as a test's or the simulator's).
        self.timeline = SteadyTimeline(monotonic)

    def _step(self, report: AdvanceReport) -> Step:
        return Step(self.store, self.settings, self.clock, self.policies(), self.drainers, report,
                    self.catalog, self.timeline)

    def submit(self, plan: Plan, plan_id: int | None = None) -> list[str]:
        """Record the plan's intents in the store; returns the names of nodes created."""
        step = self._step(AdvanceReport(started_at=self.clock()))
        return submit.submit(step, plan, plan_id)

    def advance(self, snapshot: Snapshot | None = None) -> AdvanceReport:
        """Do the side effects the stored states call for (see the package docstring).

        With the service's :class:`WorkerPools` the applies, Ansible batches and drain
        steps are handed to workers and this returns at once; the report then holds what
        the operations finished since the last advance did, and which ones it started."""
        started = time.monotonic()
        report = AdvanceReport(started_at=self.clock())
        if not self._recovered:
            self._recover(report)
        self.runner.collect(report)
        step = self._step(report)
        submit.repair_replacements(step)
        drain.resume_cancelled(step, self.runner)
        drain.drain_nodes(step, self.runner)
        long_jobs.signal_long_jobs(step)
        provision.provision(step, self.provisioner, self.address_of, self.runner,
                            self.bootstrapper.forget)
        bootstrap.bootstrap(step, self.bootstrapper, self.address_of, self.runner)
        bootstrap.promote(step, snapshot, self.runner)
        health.check_ready_nodes(step, self.bootstrapper, self.runner)
        report.seconds = round(time.monotonic() - started, 3)
        return report

    def _recover(self, report: AdvanceReport) -> None:
        """At the first advance (only the leader advances): operations a previous process
        left running were cut short; their rows are closed and audited. What they owed is
        in the store, and this advance starts it again."""
        now = self.clock()
        try:
            for row in self.journal.interrupt_running(now):
                self.store.audit("operation-interrupted", f"{row.kind} {row.what} (started "
                                 f"{row.started_at:%Y-%m-%d %H:%M:%S}) was cut short by a "
                                 "restart; resumed from the store", now)
            live = [n.name for n in self.store.nodes()]
        except Exception as exc:  # e.g. fenced: tried again at the next advance
            report.error("store", f"operations journal: {type(exc).__name__}: {exc}")
            return
        # Before any run: what is kept of nodes that ended while no leader ran (or whose
        # forget failed) goes; pins of live nodes move out of the old single file.
        try:
            self.bootstrapper.forget_all_but(live)
        except Exception as exc:  # left for the next start; runs still check every pin
            report.error("ansible", f"pinned host keys not swept: {type(exc).__name__}: {exc}")
        self._recovered = True

    def repair(self) -> AdvanceReport:
        """Finish what a crash left half done in the store without any side effect outside
        it: replacements promised but not created. The reconciler calls it before the
        engine counts the pools (or it would launch a second node for the same gap)."""
        report = AdvanceReport(started_at=self.clock())
        report.created = submit.repair_replacements(self._step(report))
        return report

    def drain_now(self, names: list[str]) -> AdvanceReport:
        """A drain step for each named node now, on the caller's thread (the spot-notice
        loop: an interrupted node's drain starts within seconds of its notice)."""
        report = AdvanceReport(started_at=self.clock())
        drain.drain_now(self._step(report), names, self.runner)
        return report

    def running(self) -> list[Operation]:
        """Operations in flight (for /status)."""
        return self.runner.running()

    def wait(self, timeout: float) -> bool:
        """Until no operation runs; False on timeout (tests, shutdown)."""
        return self.runner.wait(timeout)

    def stop_bootstraps(self) -> None:
        """At shutdown: Ansible runs stop now and are run again by the next leader (the
        roles are idempotent); an apply is never cut short (its state lock and instances)."""
        self.bootstrapper.cancel()

    def close(self) -> None:
        self.runner.close()
