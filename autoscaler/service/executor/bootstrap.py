"""Ansible for BOOTSTRAPPING nodes, then READY once the scheduler (and metrics) see them.

A node is bootstrapped when its address resolves (the resolver seam may not know a new
instance yet) and its retry backoff has passed. The attempt is counted in the store
*before* ansible runs, so a crash loop cannot retry forever; roles are idempotent, so a
run cut short is simply run again. After ``bootstrap_retries`` failed runs the node goes
to BOOTSTRAP_FAILED with the failed task and message (the engine then terminates it).

READY needs: cluster kind ``none``, or the scheduler reporting the node ready (Slurm:
responding, idle/mixed/allocated, not drained; Kubernetes: Ready and schedulable) and,
when advance() is given the tick's snapshot and ``ready_requires_metrics`` is on, GPU
metrics for the node. A node that stays unseen ``ready_wait_timeout`` after its
bootstrap went through is failed with what the scheduler said.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from autoscaler.actuators.ansible import BootstrapCancelled, BootstrapRun, HostStatus
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import BootstrapProgress, ProgressUpdate
from autoscaler.model.snapshot import Snapshot
from autoscaler.service.executor.advance import AdvanceReport, Step
from autoscaler.service.executor.collaborators import Bootstrapper
from autoscaler.service.executor.operations import Runner

S = NodeState


def _due(step: Step, node: Node, address_of: Callable[[Node], str | None]) -> bool:
    state = node.progress.bootstrap
    if state.ok_at is not None or (state.next_at is not None and state.next_at > step.now()):
        return False
    if step.pool(node) is None:
        return False  # no policy, no bootstrap settings: the engine decides what happens to it
    try:
        return bool(address_of(node))
    except Exception as exc:  # the resolver is a seam: its failure delays only this node
        step.error("resolver", f"{node.name}: address resolver failed: {exc}")
        return False


def boot_key(node: str) -> str:
    """The operation key of a node's bootstrap: never two Ansible runs on one node."""
    return f"boot:{node}"


def bootstrap(step: Step, bootstrapper: Bootstrapper, address_of: Callable[[Node], str | None],
              runner: Runner) -> None:
    due = [n for n in step.store.nodes(states=[S.BOOTSTRAPPING])
           if not runner.busy(boot_key(n.name)) and _due(step, n, address_of)]
    size = step.settings.bootstrap_batch_size
    for start in range(0, len(due), size):
        nodes = due[start:start + size]
        keys = [boot_key(n.name) for n in nodes]
        # The attempt is counted before the batch is handed over: a crash while Ansible
        # runs in a worker still counts it (a crash loop cannot retry forever).
        started = _count_attempts(step, nodes)

        def work(report: AdvanceReport, b: list[Node] = nodes, a: Started = started) -> None:
            _run_batch(replace(step, report=report), bootstrapper, b, a)

        if runner.start("bootstrap", keys, f"ansible {', '.join(n.name for n in nodes)}", work,
                        step.report):
            step.report.started += keys


Started = dict[str, BootstrapProgress]  # node -> its bootstrap record as this attempt began


def _count_attempts(step: Step, batch: list[Node]) -> Started:
    """Only the node's bootstrap operation writes its ``bootstrap`` record, so the one
    loaded with the node is current; each attempt's record is carried to its end."""
    now = step.now()
    started = {}
    for node in batch:
        state = node.progress.bootstrap.model_copy(
            update={"attempts": node.progress.bootstrap.attempts + 1, "started_at": now,
                    "next_at": None})
        _save(step, node.name, state)
        started[node.name] = state
    return started


def _save(step: Step, name: str, state: BootstrapProgress) -> None:
    step.patch(name, progress=ProgressUpdate(bootstrap=state))


def _run_batch(step: Step, bootstrapper: Bootstrapper, batch: list[Node], started: Started) -> None:
    step.store.fence()  # a deposed leader never runs Ansible
    try:
        run = bootstrapper.bootstrap(batch, dict(step.policies))
    except BootstrapCancelled:
        # A clean stop, not a failure: the attempt is given back (a crash keeps it
        # counted) and the next leader runs the idempotent roles again.
        for node in batch:
            _save(step, node.name, started[node.name].model_copy(
                update={"attempts": started[node.name].attempts - 1}))
        return
    except Exception as exc:  # the whole run failed: every node of the batch failed once
        for node in batch:
            _failed(step, node, started[node.name], f"ansible run failed: {exc}")
        return
    _settle(step, batch, run, started)


def _settle(step: Step, batch: list[Node], run: BootstrapRun, started: Started) -> None:
    for node in batch:
        result = run.hosts.get(node.name)
        if result is not None and result.status is HostStatus.OK:
            _save(step, node.name, started[node.name].model_copy(
                update={"ok_at": step.now(), "last_error": None}))
            step.report.bootstrapped.append(node.name)
            continue
        if result is None:
            why = f"run {run.run_id} has no result for the node ({run.status})"
        else:
            task = f" at task '{result.failed_task}'" if result.failed_task else ""
            why = f"{result.status.value}{task}: {result.message}"
        _failed(step, node, started[node.name], why)


def _failed(step: Step, node: Node, state: BootstrapProgress, why: str) -> None:
    step.report.bootstrap_failed[node.name] = why
    limit = step.settings.bootstrap_retries + 1
    if state.attempts >= limit:
        step.move(node.name, S.BOOTSTRAP_FAILED,
                  f"bootstrap failed {state.attempts} time(s); last: {why}")
        return
    _save(step, node.name, state.model_copy(update={
        "last_error": why, "next_at": step.now() + step.settings.bootstrap_retry_backoff}))


def promote(step: Step, snapshot: Snapshot | None, runner: Runner) -> None:
    """Bootstrapped nodes -> READY once their scheduler and metrics see them."""
    for node in step.store.nodes(states=[S.BOOTSTRAPPING]):
        if runner.busy(boot_key(node.name)):
            continue
        state = node.progress.bootstrap
        if state.ok_at is None:
            continue
        kind = step.cluster_kind(node)
        seen, why = _seen(step, node, kind, snapshot)
        if seen:
            step.move(node.name, S.READY, f"bootstrapped; {why}")
        elif step.now() - state.ok_at > step.settings.ready_wait_timeout:
            step.move(node.name, S.BOOTSTRAP_FAILED, f"bootstrapped at {state.ok_at:%H:%M:%S} but "
                      f"not ready after {step.settings.ready_wait_timeout}: {why}")


def _seen(step: Step, node: Node, kind: str, snapshot: Snapshot | None) -> tuple[bool, str]:
    if kind == "none":
        return True, "no scheduler to join"
    drainer = step.drainer(kind)
    if drainer is None:
        return False, f"no {kind} drainer configured to check the node"
    try:
        ready = drainer.readiness(node)
    except Exception as exc:
        return False, f"{kind}: {exc}"
    if not ready.ready:
        return False, ready.why
    if snapshot is not None and step.settings.ready_requires_metrics:
        obs = snapshot.nodes.get(node.name)
        if obs is None or obs.metrics is None:
            return False, f"{ready.why}; no GPU metrics yet"
        return True, f"{ready.why}; GPU metrics arriving"
    return True, ready.why


__all__ = ["bootstrap", "promote"]
