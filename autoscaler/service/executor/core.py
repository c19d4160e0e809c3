"""The Executor: plans in, node states out, one store write before every side effect."""

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
from autoscaler.service.executor import bootstrap, drain, long_jobs, provision, submit
from autoscaler.service.executor.common import Step
from autoscaler.service.executor.operations import Inline, Operation, Runner
from autoscaler.service.executor.protocols import Bootstrapper, Provisioner
from autoscaler.service.executor.report import AdvanceReport
from autoscaler.service.executor.settings import ExecutorSettings


class Executor:
    def __init__(self, store: FleetStore, policies: Callable[[], dict[str, TeamPolicy]],
                 provisioner: Provisioner, bootstrapper: Bootstrapper,
                 drainers: Mapping[str, Drainer], address_of: Callable[[Node], str | None],
                 settings: ExecutorSettings, catalog: Catalog, clock: Callable[[], datetime],
                 runner: Runner | None = None):
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

    def _step(self, report: AdvanceReport) -> Step:
        return Step(self.store, self.settings, self.clock, self.policies(), self.drainers, report)

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
        provision.provision(step, self.provisioner, self.address_of, self.runner)
        bootstrap.bootstrap(step, self.bootstrapper, self.address_of, self.runner)
        bootstrap.promote(step, snapshot, self.runner)
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
        except Exception as exc:  # e.g. fenced: tried again at the next advance
            report.error("store", f"operations journal: {type(exc).__name__}: {exc}")
            return
        self._recovered = True

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

    def close(self) -> None:
        self.runner.close()
