"""The Executor: plans in, node states out, one store write before every side effect."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime

from autoscaler.actuators.drain import Drainer
from autoscaler.catalog import Catalog
from autoscaler.engine.plan import Plan
from autoscaler.engine.snapshot import Snapshot
from autoscaler.fleet.node import Node
from autoscaler.fleet.store import FleetStore
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.executor import bootstrap, drain, long_jobs, provision, submit
from autoscaler.service.executor.common import Step
from autoscaler.service.executor.protocols import Bootstrapper, Provisioner
from autoscaler.service.executor.report import AdvanceReport
from autoscaler.service.executor.settings import ExecutorSettings


class Executor:
    def __init__(self, store: FleetStore, policies: Callable[[], dict[str, TeamPolicy]],
                 provisioner: Provisioner, bootstrapper: Bootstrapper,
                 drainers: Mapping[str, Drainer], address_of: Callable[[Node], str | None],
                 settings: ExecutorSettings, catalog: Catalog, clock: Callable[[], datetime]):
        self.store = store
        self.policies = policies
        self.provisioner = provisioner
        self.bootstrapper = bootstrapper
        self.drainers = dict(drainers)
        self.address_of = address_of
        self.settings = settings
        self.catalog = catalog
        self.clock = clock

    def _step(self, report: AdvanceReport) -> Step:
        return Step(self.store, self.settings, self.clock, self.policies(), self.drainers, report)

    def submit(self, plan: Plan, plan_id: int | None = None) -> list[str]:
        """Record the plan's intents in the store; returns the names of nodes created."""
        step = self._step(AdvanceReport(started_at=self.clock()))
        return submit.submit(step, plan, plan_id)

    def advance(self, snapshot: Snapshot | None = None) -> AdvanceReport:
        """Do the side effects the stored states call for (see the package docstring)."""
        started = time.monotonic()
        report = AdvanceReport(started_at=self.clock())
        step = self._step(report)
        submit.repair_replacements(step)
        drain.resume_cancelled(step)
        drain.drain_nodes(step)
        long_jobs.signal_long_jobs(step)
        provision.provision(step, self.provisioner, self.address_of)
        bootstrap.bootstrap(step, self.bootstrapper, self.address_of)
        bootstrap.promote(step, snapshot)
        report.seconds = round(time.monotonic() - started, 3)
        return report
