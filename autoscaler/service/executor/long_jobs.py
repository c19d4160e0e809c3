"""Jobs past ``max_job_runtime`` whose pool sets ``lifetime.signal_long_jobs``: one
checkpoint signal each (the pool's ``checkpoint_signal``), through the node's scheduler.

The attempt is written to the node's progress before the signal goes out, so a crash in
between leaves the job unsignalled rather than signalled twice (a second signal would
start a second checkpoint). Kubernetes cannot signal a pod's process through its API:
such jobs stay reported only, and the progress says so.
"""

from __future__ import annotations

from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import LongJob, ProgressUpdate
from autoscaler.service.executor.advance import Step

S = NodeState


def signal_long_jobs(step: Step) -> None:
    for node in step.store.nodes(states=[S.READY, S.DRAINING]):
        jobs = dict(node.progress.long_jobs)
        owed = sorted(j for j, entry in jobs.items() if entry.signal and entry.signalled_at is None)
        if owed:
            _signal(step, node, jobs, owed, step.cluster_kind(node))


def _signal(step: Step, node: Node, jobs: dict[str, LongJob], owed: list[str], kind: str) -> None:
    now = step.now()
    pool = step.pool(node)
    signal = pool.scale_down.checkpoint_signal if pool else step.settings.checkpoint_signal
    for job in owed:
        jobs[job] = jobs[job].model_copy(update={"signalled_at": now, "outcome": "sending"})
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
        jobs[job] = jobs[job].model_copy(update={"outcome": outcome})
    step.patch(node.name, progress=ProgressUpdate(long_jobs=jobs))
    step.store.audit("long-job-signal", f"{', '.join(owed)} on {node.name}: {outcome}", now,
                     pool=f"{node.team}/{node.pool}", node=node.name)
