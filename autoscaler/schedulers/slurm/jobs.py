"""Whether linked Slurm jobs have ended (``scontrol show job -o ID``): positive evidence only.

A capacity request linked to a job is released when the job ends. Only a job state that
says so counts (COMPLETED, FAILED, CANCELLED...); an error, a timeout or a job Slurm has
already forgotten is no evidence, and the request keeps its nodes until its ttl. The id
has a closed syntax (digits, an optional ``_task``) and is passed as one argument.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from autoscaler.schedulers.slurm.client import Runner, SlurmCommandError, SlurmConfig, run_command

ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                   "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})
_STATE = re.compile(r"\bJobState=([A-Z_]+)")
_ID = re.compile(r"^[1-9][0-9]{0,11}(_[0-9]{1,6})?$")


def ended_jobs(config: SlurmConfig, ids: Iterable[str],
               runner: Runner = run_command) -> frozenset[str]:
    """The ids among ``ids`` whose every record (an array has one per task) has ended."""
    out = set()
    for job in ids:
        if not _ID.match(job):
            continue
        try:
            text = runner(config.command("scontrol", "show", "job", "-o", job),
                          config.timeout.total_seconds(), config.env)
        except SlurmCommandError:
            continue  # no evidence either way
        states = _STATE.findall(text)
        if states and all(s in ENDED for s in states):
            out.add(job)
    return frozenset(out)


__all__ = ["ENDED", "ended_jobs"]
