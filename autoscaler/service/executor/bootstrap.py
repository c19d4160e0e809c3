"""Ansible for BOOTSTRAPPING nodes, then READY once the scheduler (and metrics) see them.

A node is bootstrapped when its address resolves (the resolver seam may not know a new
instance yet) and its retry backoff has passed. The attempt is counted in the store
*before* ansible runs, so a crash loop cannot retry forever; roles are idempotent, so a
run cut short is simply run again. After ``bootstrap_retries`` failed runs the node goes
to BOOTSTRAP_FAILED with the failed task and message (the engine then terminates it).
A node launched from its pool's baked image (``progress.baked_image``, recorded by
provision.py) runs only the node-time part of the playbook; batches never mix such nodes
with full-bootstrap ones (:func:`batches`).

READY needs: cluster kind ``none``, or the scheduler reporting the node ready (Slurm:
responding, idle/mixed/allocated, not drained, its Gres offering every GPU of its type;
Kubernetes: Ready and schedulable, its device plugin advertising them) and, when advance()
is given the tick's snapshot and ``ready_requires_metrics`` is on, GPU metrics for the
node. A node that stays unseen after its bootstrap went through is failed with what the
scheduler said and its type and zone (the GPU-initialisation watchdog); the wait is
derived from how long the pool's last nodes took (:func:`ready_wait`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from autoscaler.actuators.ansible import BootstrapCancelled, BootstrapRun, HostStatus, batch_part
from autoscaler.actuators.ansible.runner import BAKED, FULL, WARM_ENTRY, WARM_START, node_part
from autoscaler.actuators.drain import Readiness
from autoscaler.model.changes import Move, Patch
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import BootstrapProgress, ProgressUpdate
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.duration import format_duration
from autoscaler.service.executor.advance import AdvanceReport, Step
from autoscaler.service.executor.collaborators import Bootstrapper
from autoscaler.service.executor.operations import Runner
from autoscaler.service.executor.settings import ExecutorSettings

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


def bootstrap_part(baked_image: str | None) -> str:
    """What a node's bootstrap runs, for its reasons: the node-time part on a baked image."""
    if baked_image is None:
        return "full bootstrap"
    return f"baked image {baked_image} (node-time bootstrap)"


def boot_key(node: str) -> str:
    """The operation key of a node's bootstrap: never two Ansible runs on one node."""
    return f"boot:{node}"


def bootstrap(step: Step, bootstrapper: Bootstrapper, address_of: Callable[[Node], str | None],
              runner: Runner) -> None:
    due = [n for n in step.store.nodes(states=[S.BOOTSTRAPPING])
           if not runner.busy(boot_key(n.name)) and _due(step, n, address_of)]
    for nodes in batches(due, step.settings.bootstrap_batch_size):
        keys = [boot_key(n.name) for n in nodes]
        # The attempt is counted before the batch is handed over: a crash while Ansible
        # runs in a worker still counts it (a crash loop cannot retry forever).
        started = _count_attempts(step, nodes)

        def work(report: AdvanceReport, b: list[Node] = nodes, a: Started = started) -> None:
            _run_batch(replace(step, report=report), bootstrapper, b, a)

        options = batch_part(nodes).describe()  # homogeneous: never raises here
        what = f"ansible {options}" if options else "ansible"
        if runner.start("bootstrap", keys, f"{what} {', '.join(n.name for n in nodes)}", work,
                        step.report):
            step.report.started += keys


def batches(due: list[Node], size: int) -> list[list[Node]]:
    """``due`` in batches of at most ``size`` nodes, each homogeneous in the part of the
    playbook it runs (``node_part``): the whole of it, the node-time part (baked image),
    a warm-pool node's entry (all but the start part, before it is stopped) or its start."""
    out: list[list[Node]] = []
    for part in (FULL, BAKED, WARM_START, WARM_ENTRY):
        group = [n for n in due if node_part(n) == part]
        out += [group[start:start + size] for start in range(0, len(group), size)]
    return out


Started = dict[str, BootstrapProgress]  # node -> its bootstrap record as this attempt began


def _count_attempts(step: Step, batch: list[Node]) -> Started:
    """Only the node's bootstrap operation writes its ``bootstrap`` record, so the one
    loaded with the node is current; each attempt's record is carried to its end."""
    now = step.now()
    started = {node.name: node.progress.bootstrap.begun(now) for node in batch}
    step.patch_all([Patch(name, progress=ProgressUpdate(bootstrap=state))  # one write
                    for name, state in started.items()])
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
            _save(step, node.name, started[node.name].given_back())
        return
    except Exception as exc:  # the whole run failed: every node of the batch failed once
        for node in batch:
            _failed(step, node, started[node.name], f"ansible run failed: {exc}")
        return
    _settle(step, batch, run, started)


def _settle(step: Step, batch: list[Node], run: BootstrapRun, started: Started) -> None:
    ok = [node.name for node in batch if (result := run.hosts.get(node.name)) is not None
          and result.status is HostStatus.OK]
    now = step.now()
    step.patch_all([Patch(name, progress=ProgressUpdate(bootstrap=started[name].succeeded(now)))
                    for name in ok])  # one write
    step.report.bootstrapped += ok
    for node in batch:
        result = run.hosts.get(node.name)
        if result is not None and result.status is HostStatus.OK:
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
    _save(step, node.name, state.failed(why, retry_at=step.now() + step.settings.bootstrap_retry_backoff))


def promote(step: Step, snapshot: Snapshot | None, runner: Runner) -> None:
    """Bootstrapped nodes -> READY once their scheduler offers them with all their type's
    GPUs (and metrics arrive); failed when that takes longer than the pool's nodes took (the
    GPU-initialisation watchdog: a GPU that never came up is a fault of the instance, so
    its type and zone are in the reason)."""
    booting = [n for n in step.store.nodes(states=[S.BOOTSTRAPPING])
               if n.progress.bootstrap.ok_at is not None and not runner.busy(boot_key(n.name))]
    # A warm-pool node never joins before it is stopped: all but its start part is done.
    step.move_all([Move(n.name, S.STOPPING, "bootstrap done but for the start part (the join "
                        "held off); the next apply stops the instance for the warm pool")
                   for n in booting if n.progress.in_warm_pool])
    booting = [n for n in booting if not n.progress.in_warm_pool]
    if not booting:
        return
    waits = measured_waits(step.store.nodes())
    ready: list[Move] = []  # written together, after the loop
    unknown: list[str] = []
    answers = _answers(step, booting)
    for node in booting:
        ok_at = node.progress.bootstrap.ok_at
        assert ok_at is not None
        seen = _seen(step, node, step.cluster_kind(node), snapshot, answers.get(node.name))
        why = seen.why
        if seen.ready:
            part = ("started from the warm pool (its start part: --tags start)"
                    if node.progress.warm is not None
                    else bootstrap_part(node.progress.baked_image))
            ready.append(Move(node.name, S.READY, f"bootstrapped, {part}; {why}"))
            continue
        if not seen.known:
            # No answer is no evidence against the node (at 1,000 nodes the API server's
            # timeouts failed nodes that had joined); BOOTSTRAPPING's own limit bounds this.
            unknown.append(f"{node.name} ({why[:200]})")
            continue
        limit, how = ready_wait(step.settings, waits.get((node.team, node.pool), []))
        if step.now() - ok_at > limit:
            where = node.zone or node.region
            step.move(node.name, S.BOOTSTRAP_FAILED, f"bootstrapped at {ok_at:%H:%M:%S} but not "
                      f"ready after {format_duration(limit)} ({how}): {why}; {node.instance_type} "
                      f"in {where}")
    step.move_all(ready)
    if unknown:
        step.error("readiness", f"{len(unknown)} bootstrapped node(s) kept waiting, the "
                   f"scheduler did not answer for them: {', '.join(unknown[:3])}"
                   + (" ..." if len(unknown) > 3 else ""))


# The last this many READY nodes of a pool measure its wait, and a node gets this many
# times the slowest of them.
MEASURED_NODES = 5
WAIT_FACTOR = 4


def measured_waits(nodes: list[Node]) -> dict[tuple[str, str], list[timedelta]]:
    """Per pool, bootstrap done -> READY of its most recently READY nodes."""
    seen: dict[tuple[str, str], list[tuple[datetime, timedelta]]] = {}
    for n in nodes:
        ok_at = n.progress.bootstrap.ok_at
        if n.ready_at is not None and ok_at is not None and n.ready_at >= ok_at:
            seen.setdefault((n.team, n.pool), []).append((n.ready_at, n.ready_at - ok_at))
    return {pool: [w for _, w in sorted(found)[-MEASURED_NODES:]] for pool, found in seen.items()}


def ready_wait(settings: ExecutorSettings, waits: list[timedelta]) -> tuple[timedelta, str]:
    """How long a bootstrapped node may take to be seen, and how that was set."""
    ceiling = settings.ready_wait_timeout
    if not waits:
        return ceiling, "ready_wait_timeout; no node of the pool measured yet"
    slowest = max(waits)
    limit = min(ceiling, max(settings.ready_wait_floor, slowest * WAIT_FACTOR))
    return limit, (f"{WAIT_FACTOR} x the slowest of the pool's last {len(waits)} node(s), "
                   f"{format_duration(slowest)}, within {format_duration(settings.ready_wait_floor)}"
                   f"..{format_duration(ceiling)}")


def _answers(step: Step, booting: list[Node]) -> dict[str, Readiness]:
    """Readiness of the booting nodes in one read per scheduler where there are several."""
    by_kind: dict[str, list[Node]] = {}
    for node in booting:
        by_kind.setdefault(step.cluster_kind(node), []).append(node)
    out: dict[str, Readiness] = {}
    for kind, nodes in by_kind.items():
        drainer = step.drainers.get(kind) if kind != "none" else None
        if drainer is None or len(nodes) < 2:
            continue
        try:
            out.update(drainer.readiness_many(nodes))
        except Exception as exc:  # each node is asked on its own below
            step.error("readiness", f"{kind}: reading {len(nodes)} nodes at once failed: {exc}")
    return out


def _seen(step: Step, node: Node, kind: str, snapshot: Snapshot | None,
          answer: Readiness | None = None) -> Readiness:
    if kind == "none":
        return Readiness(True, "no scheduler to join")
    drainer = step.drainer(kind)
    if drainer is None:
        return Readiness(False, f"no {kind} drainer configured to check the node")
    try:
        ready = answer if answer is not None else drainer.readiness(node)
    except Exception as exc:
        return Readiness(False, f"{kind}: {exc}", known=False)
    if not ready.ready:
        return ready
    want = step.type_gpus(node)
    # not >=: a NaN count (from any drainer) is not enough GPUs
    if ready.gpus is not None and want is not None and not ready.gpus >= want:
        return Readiness(False, f"{ready.why}, but {kind} offers {ready.gpus:g} of the {want} "
                         f"GPU(s) of {node.instance_type}")
    if snapshot is not None and step.settings.ready_requires_metrics:
        obs = snapshot.nodes.get(node.name)
        if obs is None or obs.metrics is None:
            return Readiness(False, f"{ready.why}; no GPU metrics yet")
        return Readiness(True, f"{ready.why}; GPU metrics arriving")
    return ready


__all__ = ["bootstrap", "promote"]
