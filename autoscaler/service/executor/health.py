"""The periodic GPU health check of READY nodes (a pool's ``health.check_interval``).

Every interval, the READY nodes of such a pool are checked in one Ansible run of
``playbooks/health-check.yml`` (the bootstrap's own check: GPU count and model,
uncorrectable ECC errors, temperatures, DCGM's diagnostic where it runs), on the Ansible
workers, never beside another Ansible run on the same node. Each node's verdict is written
to its progress (:class:`~autoscaler.model.progress.HealthCheck`); the signal reader hands a
failed one to the engine as the node's ``health_check_failed``, which replaces it
(``health.replace_on_failed_health_check``), under the fleet-wide budget for broken nodes.

A check that could not reach the node is no verdict: the node is not failed for it (a dead
node is found by its silence or by its scheduler), and it is tried again an interval later.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from autoscaler.actuators.ansible import BootstrapCancelled, BootstrapRun, HostStatus
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import HealthCheck, ProgressUpdate
from autoscaler.service.executor.advance import AdvanceReport, Step
from autoscaler.service.executor.bootstrap import boot_key
from autoscaler.service.executor.collaborators import Bootstrapper
from autoscaler.service.executor.operations import Runner

S = NodeState


def _due(step: Step, node: Node, now: datetime) -> bool:
    pool = step.pool(node)
    interval = pool.health.check_interval if pool is not None else None
    if interval is None:
        return False
    last = node.progress.health.checked_at or node.ready_at or node.state_since
    return now - last >= interval


def check_ready_nodes(step: Step, bootstrapper: Bootstrapper, runner: Runner) -> None:
    now = step.now()
    due = [n for n in step.store.nodes(states=[S.READY])
           if not n.progress.health.failed and not runner.busy(boot_key(n.name))
           and _due(step, n, now)]
    size = step.settings.bootstrap_batch_size
    for start in range(0, len(due), size):
        nodes = due[start:start + size]
        keys = [boot_key(n.name) for n in nodes]

        def work(report: AdvanceReport, batch: list[Node] = nodes) -> None:
            _run(replace(step, report=report), bootstrapper, batch)

        if runner.start("bootstrap", keys, f"health check {', '.join(n.name for n in nodes)}",
                        work, step.report):
            step.report.started += keys


def _run(step: Step, bootstrapper: Bootstrapper, batch: list[Node]) -> None:
    step.store.fence()  # a deposed leader runs nothing on the nodes
    try:
        run = bootstrapper.health_check(batch, dict(step.policies))
    except BootstrapCancelled:
        return  # the service is stopping: checked again after the restart
    except Exception as exc:  # the run itself failed: no verdict on any node
        for node in batch:
            _save(step, node, error=f"health check run failed: {exc}")
        step.error("health", f"health check of {', '.join(n.name for n in batch)}: {exc}")
        return
    _settle(step, batch, run)


def _settle(step: Step, batch: list[Node], run: BootstrapRun) -> None:
    for node in batch:
        result = run.hosts.get(node.name)
        if result is not None and result.status is HostStatus.OK:
            _save(step, node, failed=None)
        elif result is not None and result.status is HostStatus.FAILED:
            task = f" at task '{result.failed_task}'" if result.failed_task else ""
            failed = f"{result.message[:400]}{task} (run {run.run_id})"
            _save(step, node, failed=failed)
            step.store.audit("health-check-failed", f"{node.name}: {failed}", step.now(),
                             pool=node.pool_key, node=node.name)
        else:
            why = result.message if result is not None else f"no result in run {run.run_id}"
            _save(step, node, error=f"health check did not reach the node: {why}")


def _save(step: Step, node: Node, *, failed: str | None = None, error: str | None = None) -> None:
    # checked_at is the attempt, verdict or not: the next one is an interval later.
    checked = HealthCheck(checked_at=step.now(), failed=failed, last_error=error)
    try:
        step.patch(node.name, progress=ProgressUpdate(health=checked))
    except Exception as exc:  # the node left meanwhile (drained, gone): nothing to keep
        step.error("store", f"{node.name}: health check not recorded: {exc}")


__all__ = ["check_ready_nodes"]
