"""Draining a node out of its scheduler, as re-runnable steps (Karpenter's termination idea).

A drain is a small state machine whose progress (:class:`DrainProgress`) the executor
keeps in the store. Each :meth:`PhasedDrainer.step` looks at the node, does at most one
side effect and answers *done*, *retry* (with when) or *error*; running a step twice is
safe, so a crash at any point is resumed by running the step again. Phases:

``requested`` -> cordon (the scheduler stops placing work there) -> ``cordoned``: wait
for the work to end; before the deadline only unprotected work is nudged off (Kubernetes
evictions; nothing in Slurm) -> deadline reached: ``signalling`` -> the checkpoint signal
-> ``signalled``: wait ``grace`` -> ``requeueing`` -> requeue/evict what is left ->
``requeued`` -> done once nothing runs there.

Phases ending in *-ing* are intents: the step that enters them does nothing else and
answers "retry now", so the executor records the intent *before* the side effect that
follows (the lifecycle's write-before rule, applied inside a drain). A scheduler plugs in
through :class:`SchedulerOps`, a handful of idempotent primitives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from autoscaler.model.node import Node
from autoscaler.model.progress import DrainPhase, DrainProgress
from autoscaler.words import first_few

POLL = timedelta(seconds=10)
NOW = timedelta(0)


class DrainError(RuntimeError):
    """A scheduler command failed; the step is retried on the next advance."""


class DrainOutcome(StrEnum):
    DONE = "done"
    RETRY = "retry"
    ERROR = "error"


@dataclass(frozen=True)
class DrainStep:
    outcome: DrainOutcome
    progress: DrainProgress
    message: str = ""
    retry_after: timedelta = POLL
    work: list[str] = field(default_factory=list)  # jobs or pods still on the node


@dataclass(frozen=True)
class Work:
    """A job (Slurm) or pod (Kubernetes) on a node being drained."""

    id: str
    protected: bool = False  # gpu-autoscaler/do-not-disrupt: left alone until the deadline
    ending: bool = False  # already on its way out (COMPLETING job, terminating pod)


@dataclass(frozen=True)
class Readiness:
    ready: bool
    why: str = ""
    # GPUs the scheduler offers on the node (Slurm's Gres); None where the scheduler's own
    # check compares them with the instance type already (Kubernetes) or none are counted.
    gpus: float | None = None
    # False: the scheduler did not answer (unreachable, timed out, a server error), so
    # nothing is known about the node; the executor fails no node on it.
    known: bool = True


class SchedulerOps(Protocol):
    """What a scheduler offers a drain. Every call is idempotent."""

    kind: str

    def cordon(self, node: str, reason: str) -> bool:
        """Stop new work landing on ``node``; False when the scheduler has no such node."""
        ...

    def workload(self, node: str) -> list[Work]: ...

    def nudge(self, node: str, work: Sequence[Work], *, force: bool) -> list[str]:
        """Ask work to leave gracefully (evictions); returns refusals, e.g. PDB 429s."""
        ...

    def checkpoint(self, node: str, work: Sequence[Work], signal: str) -> None: ...

    def signal_jobs(self, node: str, job_ids: Sequence[str], signal: str) -> bool:
        """Send ``signal`` to running jobs that stay where they are (long jobs asked to
        checkpoint); False when the scheduler has no way to signal a job."""
        ...

    def evacuate(self, node: str, work: Sequence[Work]) -> None:
        """Take the remaining work off the node (requeue, delete)."""
        ...

    def release_jobs(self, node: str, job_ids: Sequence[str]) -> dict[str, str]:
        """Take running jobs off a node that stays in service (long jobs past their
        runtime): requeue (Slurm) or evict (Kubernetes). Returns the refused ones, job id
        -> why; a refused job keeps running (nothing is cancelled)."""
        ...

    def uncordon(self, node: str) -> None: ...

    def readiness(self, node: str) -> Readiness: ...

    def forget(self, node: str) -> None:
        """The node's instance is gone: keep the scheduler from waiting for it."""
        ...


class Drainer(Protocol):
    """What the executor needs of a scheduler (``FakeDrainer`` in tests implements it)."""

    kind: str

    def step(self, node: Node, progress: DrainProgress, now: datetime) -> DrainStep: ...

    def cancel(self, node: Node) -> None: ...

    def readiness(self, node: Node) -> Readiness: ...

    def readiness_many(self, nodes: Sequence[Node]) -> dict[str, Readiness]: ...

    def forget(self, node: Node) -> None: ...

    def signal_jobs(self, node: Node, job_ids: Sequence[str], signal: str) -> bool: ...

    def release_jobs(self, node: Node, job_ids: Sequence[str]) -> dict[str, str]: ...


class PhasedDrainer:
    """The drain phases over one scheduler's primitives."""

    def __init__(self, ops: SchedulerOps, poll: timedelta = POLL):
        self.ops = ops
        self.kind = ops.kind
        self.poll = poll

    def step(self, node: Node, progress: DrainProgress, now: datetime) -> DrainStep:
        try:
            return self._step(node.name, progress, now)
        except DrainError as exc:
            failed = progress.model_copy(update={"last_error": str(exc)})
            return DrainStep(DrainOutcome.ERROR, failed, str(exc), self.poll)

    def cancel(self, node: Node) -> None:
        self.ops.uncordon(node.name)

    def readiness(self, node: Node) -> Readiness:
        return self.ops.readiness(node.name)

    def readiness_many(self, nodes: Sequence[Node]) -> dict[str, Readiness]:
        """Every node's readiness, by name: in one read where the scheduler offers one
        (Kubernetes lists its nodes once instead of a GET per booting node)."""
        many = getattr(self.ops, "readiness_many", None)
        if many is not None:
            answers: dict[str, Readiness] = many([n.name for n in nodes])
            return answers
        return {n.name: self.ops.readiness(n.name) for n in nodes}

    def forget(self, node: Node) -> None:
        self.ops.forget(node.name)

    def signal_jobs(self, node: Node, job_ids: Sequence[str], signal: str) -> bool:
        return self.ops.signal_jobs(node.name, job_ids, signal)

    def release_jobs(self, node: Node, job_ids: Sequence[str]) -> dict[str, str]:
        return self.ops.release_jobs(node.name, job_ids)

    # -- the phases --------------------------------------------------------------------
    def _step(self, name: str, p: DrainProgress, now: datetime) -> DrainStep:
        if p.phase is DrainPhase.REQUESTED:
            if not self.ops.cordon(name, p.reason):
                return DrainStep(DrainOutcome.DONE, p, f"{self.kind} does not know {name}: "
                                 "nothing to drain")
            p = p.at(DrainPhase.CORDONED)
        work = self.ops.workload(name)
        ids = [w.id for w in work]
        if not work:
            return DrainStep(DrainOutcome.DONE, p, f"no work left on {name}")
        if p.phase is DrainPhase.CORDONED:
            return self._waiting(name, p, work, now)
        live = [w for w in work if not w.ending]
        if p.phase is DrainPhase.SIGNALLING:
            self.ops.checkpoint(name, live, p.signal)
            p = p.at(DrainPhase.SIGNALLED, signalled_at=now)
            return self._retry(p, f"sent SIG{p.signal} to {_few(ids)}", p.grace, ids)
        if p.phase is DrainPhase.SIGNALLED:
            until = (p.signalled_at or now) + p.grace
            if now < until:
                refused = self.ops.nudge(name, live, force=True)
                return self._retry(p, _waiting_text(ids, until, refused), min(until - now, self.poll), ids)
            return self._retry(p.at(DrainPhase.REQUEUEING), f"grace over; requeueing {_few(ids)}",
                               NOW, ids)
        # REQUEUEING, or REQUEUED with work still there: (re)issue it for what still runs.
        if live:
            self.ops.evacuate(name, live)
        return self._retry(p.at(DrainPhase.REQUEUED), f"requeued {_few(ids)}", self.poll, ids)

    def _waiting(self, name: str, p: DrainProgress, work: list[Work], now: datetime) -> DrainStep:
        ids = [w.id for w in work]
        if now >= p.deadline:
            return self._retry(p.at(DrainPhase.SIGNALLING),
                               f"drain deadline reached with {_few(ids)} still running; "
                               f"signalling SIG{p.signal}", NOW, ids)
        refused = self.ops.nudge(name, [w for w in work if not w.protected and not w.ending],
                                 force=False)
        protected = sum(1 for w in work if w.protected)
        text = _waiting_text(ids, p.deadline, refused)
        if protected:
            text += f"; {protected} marked do-not-disrupt"
        return self._retry(p, text, min(p.deadline - now, self.poll), ids)

    def _retry(self, p: DrainProgress, message: str, after: timedelta, ids: list[str]) -> DrainStep:
        return DrainStep(DrainOutcome.RETRY, p, message, max(after, NOW), ids)


def _few(ids: Sequence[str]) -> str:
    return f"{len(ids)} job(s) ({first_few(ids)})"


def _waiting_text(ids: Sequence[str], until: datetime, refused: Sequence[str]) -> str:
    text = f"waiting for {_few(ids)} until {until:%H:%M:%S}"
    if refused:
        text += f"; {len(refused)} eviction(s) refused: {refused[0]}"
    return text


class NoSchedulerOps:
    """Pools with ``cluster: {kind: none}``: nothing to drain, ready once bootstrapped."""

    kind = "none"

    def cordon(self, node: str, reason: str) -> bool:
        return False

    def workload(self, node: str) -> list[Work]:
        return []

    def nudge(self, node: str, work: Sequence[Work], *, force: bool) -> list[str]:
        return []

    def checkpoint(self, node: str, work: Sequence[Work], signal: str) -> None:
        return None

    def signal_jobs(self, node: str, job_ids: Sequence[str], signal: str) -> bool:
        return False

    def evacuate(self, node: str, work: Sequence[Work]) -> None:
        return None

    def release_jobs(self, node: str, job_ids: Sequence[str]) -> dict[str, str]:
        return dict.fromkeys(job_ids, "no scheduler to requeue it")

    def uncordon(self, node: str) -> None:
        return None

    def readiness(self, node: str) -> Readiness:
        return Readiness(True, "no scheduler to join")

    def forget(self, node: str) -> None:
        return None


def no_drainer() -> PhasedDrainer:
    return PhasedDrainer(NoSchedulerOps())
