"""Slurm drain commands are argv lists whose values cannot become extra arguments or
options: hostile node names and job ids (squeue's output is data too) are refused before
anything runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from autoscaler.actuators.drain.base import DrainError, Work
from autoscaler.actuators.drain.slurm import SlurmOps
from tests.hostile import SPLIT


class Recorder:
    def __init__(self, out: str = "") -> None:
        self.argvs: list[list[str]] = []
        self.out = out

    def __call__(self, argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> str:
        self.argvs.append(list(argv))
        return self.out


def test_every_value_is_one_argument_with_its_option() -> None:
    run = Recorder("12 RUNNING\n13_2 COMPLETING\n")
    ops = SlurmOps(runner=run)
    ops.cordon("vision-gpu-1", f"idle for 15m; {SPLIT}\nnext line")
    work = ops.workload("vision-gpu-1")
    ops.checkpoint("vision-gpu-1", work, "USR1")
    assert run.argvs[0] == ["scontrol", "update", "nodename=vision-gpu-1", "state=DRAIN",
                            f"reason=idle for 15m; {SPLIT} next line"]
    assert run.argvs[1] == ["squeue", "-h", "--nodelist=vision-gpu-1",
                            "--states=RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STOPPED",
                            "--format=%i %T"]
    assert [w.id for w in work] == ["12", "13_2"]
    assert run.argvs[2:] == [["scancel", "--signal=USR1", "--batch", "12"],
                             ["scancel", "--signal=USR1", "--batch", "13_2"]]


@pytest.mark.parametrize("node", [SPLIT, "-h", "--all", "a,b", "x\ny", ""])
def test_a_node_name_that_is_not_one_is_refused_before_any_command(node: str) -> None:
    run = Recorder()
    ops = SlurmOps(runner=run)
    for call in (lambda: ops.cordon(node, "r"), lambda: ops.uncordon(node),
                 lambda: ops.workload(node), lambda: ops.forget(node)):
        with pytest.raises(DrainError, match="not a Slurm node name"):
            call()
    assert run.argvs == []


def test_job_ids_from_squeue_and_signals_are_checked() -> None:
    ops = SlurmOps(runner=Recorder("--full RUNNING\n"))
    with pytest.raises(DrainError, match="not a job id"):
        ops.workload("vision-gpu-1")
    run = Recorder()
    ops = SlurmOps(runner=run)
    with pytest.raises(DrainError, match="not a Slurm job id"):
        ops.evacuate("vision-gpu-1", [Work("1 --all")])
    with pytest.raises(DrainError, match="not a signal name"):
        ops.checkpoint("vision-gpu-1", [Work("1")], "KILL --full")
    assert run.argvs == []


class Refusing(Recorder):
    """scontrol's answers per job id: an exception is raised."""

    def __init__(self, answers: Mapping[str, Exception]) -> None:
        super().__init__()
        self.answers = answers

    def __call__(self, argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> str:
        self.argvs.append(list(argv))
        if argv[-1] in self.answers:
            raise self.answers[argv[-1]]
        return ""


def test_releasing_long_jobs_requeues_each_and_leaves_refused_ones_running() -> None:
    from autoscaler.schedulers.slurm.client import SlurmCommandError

    run = Refusing({
        "13": SlurmCommandError("scontrol: error: Requested operation is presently disabled"),
        "14": SlurmCommandError("scontrol: error: Job has already finished"),
    })
    refused = SlurmOps(runner=run).release_jobs("vision-gpu-1", ["12", "1 --all", "13", "14"])
    assert run.argvs == [["scontrol", "requeue", "12"], ["scontrol", "requeue", "13"],
                         ["scontrol", "requeue", "14"]]  # never scancel: the node stays
    assert sorted(refused) == ["1 --all", "13"]
    assert "not a Slurm job id" in refused["1 --all"] and "presently disabled" in refused["13"]


def held(obj: object) -> int:
    """Entries in an object's lists, dicts and sets: what it keeps between calls."""
    return sum(len(v) for v in vars(obj).values() if isinstance(v, list | dict | set))


def test_the_drainer_keeps_nothing_per_command() -> None:
    """The service's one SlurmOps runs readiness and workload polls for every node, every
    tick, for the life of the process: nothing may pile up per command."""
    ops = SlurmOps(runner=lambda argv, timeout, env: "NodeName=x State=IDLE Gres=gpu:8")

    def lifecycle(name: str) -> None:
        ops.readiness(name)
        ops.cordon(name, "idle")
        ops.uncordon(name)
        ops.forget(name)

    lifecycle("vision-gpu-0")
    first = held(ops)
    for i in range(1, 300):
        lifecycle(f"vision-gpu-{i}")
    assert held(ops) == first
