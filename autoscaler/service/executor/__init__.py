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
            whose pool asks for it, DRAINED -> TERMINATING -> apply
            -> TERMINATED; failures -> PROVISION_FAILED / BOOTSTRAP_FAILED with the reason.
            Bounded in time (``advance_budget``); safe to call again after a crash at any
            point. ``AdvanceReport.capacity_errors`` go back to the price signals.
            With ``WorkerPools`` (the service) the applies, Ansible batches and drain steps
            run on bounded workers (``executor/operations.py``) and advance() returns at
            once: the report holds what finished since the last call and ``started``.'''

        def drain_now(self, names: list[str]) -> AdvanceReport:
            '''A drain step for each named node on the caller's thread (the spot-notice
            loop), unless a worker runs one for it.'''

        def running(self) -> list[Operation]: ...       # for /status
        def wait(self, timeout: float) -> bool: ...     # tests, shutdown
        def close(self) -> None: ...

    class Reconciler:                       # autoscaler.service.reconciler
        def run(self, snapshot: Snapshot | None = None) -> ReconcileReport: ...

Real collaborators: :class:`TerraformProvisioner` (``executor/terraform.py``, one
PoolWorkspace per pool), ``AnsibleActuator`` (``actuators/ansible``), drainers from
``actuators/drain`` (:func:`autoscaler.service.executor.wiring.drainers_for`).
Tests use the fakes in ``tests/fakes.py``, which implement the same Protocols.

Node states never change anywhere else: every move goes through
``FleetStore.transition`` (checked against ``fleet/lifecycle.py``, committed before the
call returns), and a crash between a write and its side effect is resumed by the next
advance() or by the reconciler (``tests/service/test_crash*.py`` stops the executor at
every such point).
"""

from autoscaler.service.executor.core import Executor
from autoscaler.service.executor.protocols import Bootstrapper, Drainer, Provisioner
from autoscaler.service.executor.report import AdvanceReport, Change, PoolApply
from autoscaler.service.executor.settings import ExecutorSettings

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
