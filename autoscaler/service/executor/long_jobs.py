"""Jobs past ``max_job_runtime`` that their pool asks more of than a report, through the
node's scheduler:

* ``lifetime.signal_long_jobs`` or ``lifetime.action: release``: one checkpoint signal
  each (the pool's ``checkpoint_signal``);
* ``lifetime.action: release``: once the pool's ``checkpoint_grace`` has passed since the
  signal, the job is requeued (Slurm) or its pod evicted (Kubernetes), once, so its GPUs
  go back to the queue while the node stays in service.

Each attempt is written to the node's progress before it goes out, so a crash in between
leaves the job unsignalled (unreleased) rather than signalled (requeued) twice: a second
signal would start a second checkpoint, a second requeue could kill the job's next run.
A requeue the scheduler refuses (a PodDisruptionBudget, a job that cannot be requeued) or
that fails is cleared and tried again a grace (at least 30s) later; the job keeps running
meanwhile.
"""

from __future__ import annotations

from datetime import timedelta

from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import LongJob, ProgressUpdate
from autoscaler.policy.duration import format_duration
from autoscaler.service.executor.advance import Step

S = NodeState
RETRY_AFTER = timedelta(seconds=30)  # at least, between refused requeues of one job


def signal_long_jobs(step: Step) -> None:
    now = step.now()
    for node in step.store.nodes(states=[S.READY, S.DRAINING]):
        jobs = dict(node.progress.long_jobs)
        if not jobs:
            continue
        owed = sorted(j for j, entry in jobs.items() if entry.owes_signal)
        kind = step.cluster_kind(node)
        if owed:
            _signal(step, node, jobs, owed, kind)
        grace = _grace(step, node)
        due = sorted(j for j, entry in jobs.items() if entry.owes_release(now, grace))
        if due:
            _release(step, node, jobs, due, kind, grace)


def _grace(step: Step, node: Node) -> timedelta:
    pool = step.pool(node)
    return pool.scale_down.checkpoint_grace if pool else step.settings.checkpoint_grace


def _signal(step: Step, node: Node, jobs: dict[str, LongJob], owed: list[str], kind: str) -> None:
    now = step.now()
    pool = step.pool(node)
    signal = pool.scale_down.checkpoint_signal if pool else step.settings.checkpoint_signal
    for job in owed:
        jobs[job] = jobs[job].signalling(now)
    step.patch(node.name, progress=ProgressUpdate(long_jobs=jobs))
    drainer = step.drainer(kind)
    step.store.fence()
    try:
        sent = drainer is not None and drainer.signal_jobs(node, owed, signal)
        outcome = f"SIG{signal} sent" if sent else f"{kind} cannot signal jobs: reported only"
    except Exception as exc:  # not retried: a job that got half a signal must not get two
        outcome = f"SIG{signal} failed: {exc}"
        step.error("long-jobs", f"{node.name}: signalling long jobs {', '.join(owed)}: {exc}")
    for job in owed:
        jobs[job] = jobs[job].with_outcome(outcome)
    step.patch(node.name, progress=ProgressUpdate(long_jobs=jobs))
    step.store.audit("long-job-signal", f"{', '.join(owed)} on {node.name}: {outcome}", now,
                     pool=f"{node.team}/{node.pool}", node=node.name)


def _release(step: Step, node: Node, jobs: dict[str, LongJob], due: list[str], kind: str,
             grace: timedelta) -> None:
    now = step.now()
    what, done = ("evict", "evicted") if kind == "kubernetes" else ("requeue", "requeued")
    # Released even when its signal failed (the limit is the rule), but the audit says so.
    signalled = {job: jobs[job].outcome or "" for job in due}
    for job in due:
        jobs[job] = jobs[job].releasing(now, outcome=f"{what} sending")
    step.patch(node.name, progress=ProgressUpdate(long_jobs=jobs))
    drainer = step.drainer(kind)
    step.store.fence()
    try:
        failed = (drainer.release_jobs(node, due) if drainer is not None
                  else dict.fromkeys(due, f"no {kind} scheduler to {what} it"))
    except Exception as exc:  # a failed requeue took nothing off the node: try again later
        failed = dict.fromkeys(due, str(exc))
        step.error("long-jobs", f"{node.name}: releasing long jobs {', '.join(due)}: {exc}")
    for job in due:
        entry = jobs[job]
        waited = format_duration(now - (entry.signalled_at or now))
        if job in failed:  # cleared: tried again after a pause, not at every advance
            retry = now + max(grace, RETRY_AFTER)
            jobs[job] = entry.release_refused(retry_at=retry, outcome=f"{what} refused: {failed[job]}")
            detail = (f"job {job} on {node.name}: {what} refused ({failed[job]}); tried again "
                      f"at {retry:%H:%M:%S}")
        else:
            jobs[job] = entry.with_outcome(f"{done} after {waited}")
            detail = (f"job {job} on {node.name}: {done} {waited} after its checkpoint signal "
                      f"(checkpoint_grace {format_duration(grace)}); its GPUs are free")
            if not signalled[job].endswith(" sent"):
                detail += f"; the signal was not sent ({signalled[job]})"
        step.store.audit("long-job-release", detail, now, pool=f"{node.team}/{node.pool}",
                         node=node.name)
    step.patch(node.name, progress=ProgressUpdate(long_jobs=jobs))

