"""Linked Slurm jobs end only on positive evidence from ``scontrol show job``."""

from __future__ import annotations

from autoscaler.schedulers.slurm.client import SlurmCommandError, SlurmConfig
from autoscaler.schedulers.slurm.jobs import ended_jobs

OUT = {
    "11": "JobId=11 JobName=a JobState=COMPLETED Reason=None\n",
    "12": "JobId=12 JobName=b JobState=RUNNING Reason=None\n",
    "13": "JobId=13_1 JobState=COMPLETED\nJobId=13_2 JobState=RUNNING\n",
    "14": "JobId=14 JobState=CANCELLED Reason=None\n",
}


def runner(argv, timeout, env):
    assert argv[:4] == ["ssh", "login", "scontrol", "show"] and argv[4] == "job"
    job = argv[-1]
    if job not in OUT:
        raise SlurmCommandError("slurm_load_jobs error: Invalid job id specified")
    return OUT[job]


def test_only_ended_states_count():
    config = SlurmConfig(command_prefix=["ssh", "login"])
    got = ended_jobs(config, ["11", "12", "13", "14", "99", "1;reboot"], runner)
    assert got == {"11", "14"}  # an unknown job or an error is no evidence
