"""Drain steps: DRAINING -> DRAINED, INTERRUPTED -> TERMINATING, cancelled drains resumed.

One step per draining node per advance, never waiting: the drainer answers done, retry
(after) or error, and its progress is saved after every step. A step that enters an
intent phase (signalling, requeueing) answers "retry now": the intent is saved, then the
step runs again and does the side effect, so a crash in between repeats the side effect
rather than skipping it. Interrupted spot nodes drain the same way with the short
deadline set when the notice arrived, and go to TERMINATING when drained or when the
cloud's own deadline has passed (the instance is going away regardless).

A CancelDrain writes READY first and owes the scheduler a resume: the node carries
``drain_trigger = "cancelled"`` until the resume went through.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from autoscaler.actuators.drain import Drainer, DrainOutcome, DrainStep
from autoscaler.model.changes import NodeFields
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import DrainProgress, InterruptionRecord, ProgressUpdate
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Pool
from autoscaler.service.executor.advance import AdvanceReport, Step
from autoscaler.service.executor.operations import Runner
from autoscaler.service.executor.settings import ExecutorSettings

S = NodeState
log = logging.getLogger(__name__)
UNDRAIN = "cancelled"  # drain_trigger of a READY node whose scheduler resume is owed
CHAIN = 4  # "retry now" steps run back to back in one advance


def resume_cancelled(step: Step, runner: Runner) -> None:
    for node in step.store.nodes(states=[S.READY]):
        if node.drain_trigger != UNDRAIN or runner.busy(drain_key(node.name)):
            continue  # a drain step still running would cordon it again: resume after it
        drainer = step.drainer(step.cluster_kind(node))
        if drainer is None:
            continue
        step.store.fence()
        try:
            drainer.cancel(node)
        except Exception as exc:  # retried next advance
            step.error("drain", f"{node.name}: resume in the scheduler failed: {exc}")
            continue
        step.patch(node.name, fields=NodeFields(drain_trigger=None))


def drain_key(node: str) -> str:
    """The operation key of a node's drain step: one step of a node at a time."""
    return f"drain:{node}"


def drain_nodes(step: Step, runner: Runner) -> None:
    nodes = step.store.nodes(states=[S.DRAINING, S.INTERRUPTED])
    step.timeline.keep_only(timeline_key(n) for n in nodes)
    for node in nodes:

        def work(report: AdvanceReport, n: Node = node) -> None:
            drain_step(replace(step, report=report), n)

        if runner.start("drain", [drain_key(node.name)], f"drain step {node.name}", work, step.report):
            step.report.started.append(drain_key(node.name))


def drain_now(step: Step, names: list[str], runner: Runner) -> None:
    """The spot-notice path: a drain step for each named node on the caller's thread,
    unless a worker is running one for that node already."""
    for name in names:
        node = step.store.get(name)
        if node is None or node.state not in (S.DRAINING, S.INTERRUPTED):
            continue
        with runner.claim([drain_key(name)]) as mine:
            if mine:
                drain_step(step, node)


def drain_step(step: Step, node: Node) -> None:
    # Read when the step starts, with its progress: a worker may start later than it was
    # asked to, and the spot-notice loop may have written the node meanwhile.
    fresh = step.store.get(node.name)
    if fresh is None or fresh.state not in (S.DRAINING, S.INTERRUPTED):
        return
    try:
        _drain_one(step, fresh)
    except Exception as exc:  # one node's scheduler trouble must not stop the others
        step.error("drain", f"{node.name}: drain step failed: {type(exc).__name__}: {exc}")


def interruption_progress(settings: ExecutorSettings, pool: Pool | None,
                          notice: InterruptionRecord, now: datetime) -> DrainProgress:
    """A drain that must end before the cloud takes the instance back."""
    deadline = now + settings.interruption_drain_deadline
    grace = settings.interruption_checkpoint_grace
    if notice.deadline is not None:
        # Leave the checkpoint its grace before the instance disappears.
        deadline = max(now, min(deadline, notice.deadline - grace))
    return DrainProgress(reason=f"spot interruption notice ({notice.source or notice.kind})",
                         started_at=now, deadline=deadline, grace=grace,
                         signal=pool.scale_down.checkpoint_signal if pool else settings.checkpoint_signal)


def timeline_key(node: Node) -> tuple[str, str, datetime]:
    """One drain's key in the executor's timeline: a node back in DRAINING later (or
    moved to INTERRUPTED) starts a new one."""
    return (node.name, node.state.value, node.state_since)


def _drain_one(step: Step, node: Node) -> None:
    wall = step.now()
    now = step.timeline.now(timeline_key(node), wall)
    stored = progress = node.progress.drain
    notice = node.progress.interruption
    if progress is None:
        if notice is not None and node.state is S.INTERRUPTED:
            progress = interruption_progress(step.settings, step.pool(node), notice, now)
        else:
            progress = step.drain_progress(node, node.reason, node.state_since, node.drain_trigger)
    if (moved := progress.not_after(now)) != progress:
        log.info("%s: drain times written %s ahead of now (a backward step of the clock); "
                 "counted from now", node.name, format_duration(progress.started_at - moved.started_at))
        progress = moved
    if progress != stored:
        step.patch(node.name, progress=ProgressUpdate(drain=progress))
    if node.state is S.INTERRUPTED and notice is not None and notice.deadline is not None \
            and wall >= notice.deadline:  # the cloud's time: compared with the wall clock
        step.move(node.name, S.TERMINATING, f"spot interruption deadline {notice.deadline:%H:%M:%S} "
                  "reached before the drain finished")
        return
    if progress.not_before is not None and progress.not_before > now:
        return
    drainer = step.drainer(step.cluster_kind(node))
    if drainer is None:
        return
    result = _run(step, drainer, node, progress, now)
    step.report.drain_steps[node.name] = f"{result.outcome.value}: {result.message}"
    if result.outcome is DrainOutcome.ERROR:
        step.error("drain", f"{node.name}: drain: {result.message}")
    elif result.outcome is DrainOutcome.DONE:
        if node.state is S.DRAINING:
            step.move(node.name, S.DRAINED, f"drained: {result.message}")
        else:
            step.move(node.name, S.TERMINATING, f"interrupted node drained: {result.message}")


def _run(step: Step, drainer: Drainer, node: Node, progress: DrainProgress, now: datetime) -> DrainStep:
    for _ in range(CHAIN):
        step.store.fence()  # a deposed leader never drains
        result = drainer.step(node, progress, now)
        not_before = now + result.retry_after if result.outcome is not DrainOutcome.DONE else None
        saved = result.progress.waiting_until(not_before)
        if saved != progress:
            step.patch(node.name, progress=ProgressUpdate(drain=saved))
        progress = saved
        if result.outcome is not DrainOutcome.RETRY or result.retry_after.total_seconds() > 0:
            return result
    return result
