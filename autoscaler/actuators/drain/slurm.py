"""Draining Slurm nodes with scontrol, squeue and scancel.

* cordon: ``scontrol update nodename=X state=DRAIN reason=...`` (Slurm shows the node
  DRAINING while jobs run, DRAINED once they are gone);
* checkpoint at the drain deadline: ``scancel --signal=SIG --batch JOB`` (the batch shell,
  which is where a job traps its checkpoint signal, like ``#SBATCH --signal=B:USR1@60``),
  or ``--full`` (every step too) with ``scope="full"``;
* evacuate after the grace period: ``scontrol requeue JOB``; a job Slurm refuses to
  requeue (not batch, ``--no-requeue``) is cancelled, since it would die with the node;
* release a long job (``lifetime.action: release``): ``scontrol requeue JOB`` too, but a
  refused one keeps running, since its node stays;
* cancel: ``state=RESUME``; forget, once the instance is destroyed: ``scontrol delete
  nodename=X`` for a dynamic node, ``state=DOWN`` for a declared one.

Slurm node names are fleet node names. Commands run through the same runner, prefix,
environment and timeout as the Slurm signal reader (:class:`SlurmConfig`).

Every command is an argv list, never a shell line, and every value in it is one argument
that cannot be read as an option: node names and job ids (job ids come from squeue's
output) are checked against Slurm's syntax first, options carry their value after '='.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from autoscaler.actuators.drain.base import (
    DrainError,
    PhasedDrainer,
    Readiness,
    Work,
)
from autoscaler.schedulers.slurm.client import Runner, SlurmCommandError, SlurmConfig, run_command
from autoscaler.schedulers.slurm.parse import NODE_NAME, whole_gpu_count

RUNNING = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STOPPED"
_UNKNOWN_NODE = ("Invalid node name", "not found", "Invalid nodelist")
# The job left the node meanwhile (finished, or already requeued and pending again).
_JOB_GONE = ("already completing or completed", "Invalid job id", "Job has already finished",
             "Job is pending execution")
_NOT_DRAINED = ("Invalid node state specified",)
_BAD_STATES = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "NO_RESPOND", "POWER", "FUTURE",
               "MAINT", "REBOOT", "INVAL")
_SERVING = ("IDLE", "MIXED", "ALLOCATED", "COMPLETING")
_REASON_MAX = 120
_JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?(\+[0-9]+)?$")  # 123, an array task 123_4, het 123+1
_SIGNALS = frozenset({"USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM", "CONT", "KILL"})


def _matches(exc: Exception, needles: Sequence[str]) -> bool:
    text = str(exc)
    return any(n.lower() in text.lower() for n in needles)


def _reason(text: str) -> str:
    """scontrol takes the reason as one argument; keep it short and on one line."""
    flat = " ".join(text.split()) or "gpu-autoscaler"
    return flat[:_REASON_MAX]


class SlurmOps:
    kind = "slurm"

    def __init__(self, config: SlurmConfig | None = None, *, scope: Literal["batch", "full"] = "batch",
                 runner: Runner = run_command):
        self.config = config or SlurmConfig()
        self.scope = scope
        self._run = runner

    def _cmd(self, name: str, *args: str) -> str:
        for arg in args:
            if "\n" in arg or "\0" in arg:
                raise DrainError(f"slurm: refusing an argument with a line break or NUL: {arg!r}")
        argv = self.config.command(name, *args)
        return self._run(argv, self.config.timeout.total_seconds(), self.config.env)

    def _update(self, node: str, *fields: str) -> None:
        self._cmd("scontrol", "update", f"nodename={_node(node)}", *fields)

    # -- SchedulerOps --------------------------------------------------------------------
    def cordon(self, node: str, reason: str) -> bool:
        try:
            self._update(node, "state=DRAIN", f"reason={_reason(reason)}")
        except SlurmCommandError as exc:
            if _matches(exc, _UNKNOWN_NODE):
                return False
            raise DrainError(f"slurm: cannot drain {node}: {exc}") from None
        return True

    def workload(self, node: str) -> list[Work]:
        try:
            out = self._cmd("squeue", "-h", f"--nodelist={_node(node)}", f"--states={RUNNING}",
                            "--format=%i %T")
        except SlurmCommandError as exc:
            if _matches(exc, _UNKNOWN_NODE):
                return []
            raise DrainError(f"slurm: cannot list jobs on {node}: {exc}") from None
        work = []
        for line in out.splitlines():
            job, _, state = line.strip().partition(" ")
            if not job:
                continue
            if not _JOB_ID.match(job):
                raise DrainError(f"slurm: squeue listed {job[:40]!r} on {node}, not a job id")
            work.append(Work(job, ending=state.strip().upper() == "COMPLETING"))
        return work

    def nudge(self, node: str, work: Sequence[Work], *, force: bool) -> list[str]:
        return []  # Slurm jobs are not asked to leave before the deadline

    def checkpoint(self, node: str, work: Sequence[Work], signal: str) -> None:
        if signal not in _SIGNALS:
            raise DrainError(f"slurm: {signal!r} is not a signal name scancel is given")
        for job in work:
            try:
                self._cmd("scancel", f"--signal={signal}", f"--{self.scope}", _job(job.id))
            except SlurmCommandError as exc:
                if not _matches(exc, _JOB_GONE):
                    raise DrainError(f"slurm: cannot signal job {job.id} on {node}: {exc}") from None

    def signal_jobs(self, node: str, job_ids: Sequence[str], signal: str) -> bool:
        self.checkpoint(node, [Work(j) for j in job_ids], signal)
        return True

    def evacuate(self, node: str, work: Sequence[Work]) -> None:
        for job in work:
            try:
                self._cmd("scontrol", "requeue", _job(job.id))
            except SlurmCommandError as exc:
                if _matches(exc, _JOB_GONE):
                    continue
                self._cancel(node, job, exc)

    def release_jobs(self, node: str, job_ids: Sequence[str]) -> dict[str, str]:
        """``scontrol requeue`` each job; unlike a drain's evacuation, a job Slurm refuses
        to requeue is left running (the node stays), and the refusal is returned."""
        refused = {}
        for job in job_ids:
            try:
                self._cmd("scontrol", "requeue", _job(job))
            except DrainError as exc:  # not a job id: nothing ran
                refused[job] = str(exc)
            except SlurmCommandError as exc:
                if not _matches(exc, _JOB_GONE):
                    refused[job] = " ".join(str(exc).split())[:200]
        return refused

    def _cancel(self, node: str, job: Work, why: Exception) -> None:
        try:
            self._cmd("scancel", _job(job.id))
        except SlurmCommandError as exc:
            if not _matches(exc, _JOB_GONE):
                raise DrainError(f"slurm: job {job.id} on {node} could not be requeued ({why}) "
                                 f"nor cancelled: {exc}") from None

    def uncordon(self, node: str) -> None:
        try:
            self._update(node, "state=RESUME")
        except SlurmCommandError as exc:
            if not _matches(exc, _UNKNOWN_NODE + _NOT_DRAINED):
                raise DrainError(f"slurm: cannot resume {node}: {exc}") from None

    def readiness(self, node: str) -> Readiness:
        try:
            out = self._cmd("scontrol", "--oneliner", "show", "node", _node(node))
        except SlurmCommandError as exc:
            if _matches(exc, _UNKNOWN_NODE):
                return Readiness(False, f"slurm does not know {node}")
            return Readiness(False, f"slurm: {exc}", known=False)
        return slurm_readiness(out)

    def forget(self, node: str) -> None:
        """The instance is gone. A dynamic node is deleted from slurmctld, so the cluster
        lists only live nodes; a declared one is set DOWN (its name stays in slurm.conf).
        If slurmctld refuses the delete (it still counts a job there, or a reservation
        holds the node), the node is set DOWN so nothing is scheduled on it and the
        refusal is raised for the operator."""
        refused: SlurmCommandError | None = None
        if self.config.registration == "dynamic":
            try:
                self._cmd("scontrol", "delete", f"nodename={_node(node)}")
                return
            except SlurmCommandError as exc:
                if _matches(exc, _UNKNOWN_NODE):
                    return
                refused = exc
        try:
            self._update(node, "state=DOWN", "reason=instance terminated by gpu-autoscaler")
        except SlurmCommandError as exc:
            if not _matches(exc, _UNKNOWN_NODE):
                raise DrainError(f"slurm: cannot mark {node} down: {exc}") from None
        if refused is not None:
            raise DrainError(f"slurm: {node} set DOWN; slurmctld refused to delete it: {refused}")


def _node(name: str) -> str:
    if not NODE_NAME.match(name):
        raise DrainError(f"slurm: {name[:80]!r} is not a Slurm node name; not passed to Slurm")
    return name


def _job(job_id: str) -> str:
    if not _JOB_ID.match(job_id):
        raise DrainError(f"slurm: {job_id[:40]!r} is not a Slurm job id; not passed to Slurm")
    return job_id


def slurm_readiness(show_node: str) -> Readiness:
    """From ``scontrol show node X --oneliner``: serving, responding, not drained; and the
    GPUs its Gres offers (a dynamic node offers what its slurmd found), which the executor
    holds against the instance type."""
    match = re.search(r"\bState=(\S+)", show_node)
    if not match:
        return Readiness(False, "slurm shows no state")
    state = match.group(1).upper()
    gres = re.search(r"\bGres=(\S*)", show_node)
    gpus = whole_gpu_count(gres.group(1)) if gres else 0.0
    if state.endswith("*"):
        return Readiness(False, f"slurmd not responding ({state})", gpus)
    parts = state.split("+")
    if parts[0] not in _SERVING or any(p.startswith(_BAD_STATES) for p in parts):
        # Slurm's own reason, e.g. "gres/gpu count reported lower than configured (0 < 1)"
        why = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?(?= \w+=|$)", show_node)
        said = f": {why.group(1).strip()[:200]}" if why and why.group(1).strip() else ""
        return Readiness(False, f"slurm state {state}{said}", gpus)
    if gpus is None:
        return Readiness(False, f"slurm state {state}, but its Gres has a GPU count that is not "
                         "a whole number from 0 up")
    return Readiness(True, f"slurm state {state}", gpus)


def slurm_drainer(config: SlurmConfig | None = None, *, scope: Literal["batch", "full"] = "batch",
                  runner: Runner = run_command) -> PhasedDrainer:
    return PhasedDrainer(SlurmOps(config, scope=scope, runner=runner))
