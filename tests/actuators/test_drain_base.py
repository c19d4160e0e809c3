"""The drain phases over a fake scheduler, and the Slurm commands without a cluster."""

from __future__ import annotations

from datetime import timedelta

import pytest

from autoscaler.actuators.drain import (
    DrainOutcome,
    DrainPhase,
    DrainProgress,
    Work,
    no_drainer,
)
from autoscaler.actuators.drain.slurm import SlurmOps, slurm_readiness
from autoscaler.model.lifecycle import NodeState
from autoscaler.schedulers.slurm.client import SlurmCommandError
from tests.builders import NOW, make_node
from tests.fakes import FakeDrainer

NODE = make_node("vision-gpu-1", state=NodeState.DRAINING)


def progress(deadline_in: float = 600, grace: float = 60) -> DrainProgress:
    return DrainProgress(reason="idle", started_at=NOW, deadline=NOW + timedelta(seconds=deadline_in),
                         grace=timedelta(seconds=grace), signal="USR1")


@pytest.fixture
def drainer() -> FakeDrainer:
    d = FakeDrainer("slurm")
    d.scheduler.join(NODE.name)
    return d


def test_every_phase_in_order_with_intents_first(drainer: FakeDrainer) -> None:
    sched = drainer.scheduler
    sched.run(NODE.name, "1", "2")
    p = progress()
    seen = []
    now = NOW
    for dt in (0, 599, 601, 0, 30, 62, 0, 1):
        now = now + timedelta(seconds=dt)
        step = drainer.step(NODE, p, now)
        seen.append((step.outcome, step.progress.phase, step.retry_after))
        p = step.progress
        if p.phase is DrainPhase.REQUEUED:
            sched.finish(NODE.name)
    R, D = DrainOutcome.RETRY, DrainOutcome.DONE
    assert [(o, ph) for o, ph, _ in seen] == [
        (R, DrainPhase.CORDONED), (R, DrainPhase.CORDONED), (R, DrainPhase.SIGNALLING),
        (R, DrainPhase.SIGNALLED), (R, DrainPhase.SIGNALLED), (R, DrainPhase.REQUEUEING),
        (R, DrainPhase.REQUEUED), (D, DrainPhase.REQUEUED)]
    assert seen[0][2] == timedelta(seconds=10) and seen[1][2] == timedelta(seconds=1)
    assert seen[2][2] == timedelta(0) and seen[5][2] == timedelta(0)  # intents: retry at once
    kinds = [c[0] for c in sched.calls if c[0] in ("cordon", "checkpoint", "evacuate")]
    assert kinds == ["cordon", "checkpoint", "evacuate"]
    assert ("checkpoint", NODE.name, ["1", "2"], "USR1") in sched.calls


def test_protected_and_ending_work_is_not_nudged_before_the_deadline() -> None:
    d = FakeDrainer("kubernetes")
    d.scheduler.join(NODE.name)
    d.scheduler.run(NODE.name, "ns/a")
    d.scheduler.run(NODE.name, "ns/keep", protected=True)
    d.scheduler.work[NODE.name].append(Work("ns/going", ending=True))
    d.scheduler.refuse["ns/a"] = 1
    step = d.step(NODE, progress(), NOW)
    assert "1 eviction(s) refused" in step.message and "1 marked do-not-disrupt" in step.message
    step = d.step(NODE, step.progress, NOW + timedelta(seconds=10))  # the PDB allows it now
    assert [w.id for w in d.scheduler.work[NODE.name]] == ["ns/keep", "ns/going"]
    nudged = [c[2] for c in d.scheduler.calls if c[0] == "nudge"]
    assert nudged == [["ns/a"], ["ns/a"]]


def test_errors_keep_the_phase_and_say_why(drainer: FakeDrainer) -> None:
    drainer.next_error = RuntimeError("slurmctld unreachable")
    step = drainer.step(NODE, progress(), NOW)
    assert step.outcome is DrainOutcome.ERROR and step.progress.phase is DrainPhase.REQUESTED
    assert step.progress.last_error == "slurmctld unreachable"
    assert drainer.step(NODE, step.progress, NOW).outcome is DrainOutcome.DONE


def test_no_scheduler_is_done_at_once_and_always_ready() -> None:
    d = no_drainer()
    assert d.step(NODE, progress(), NOW).outcome is DrainOutcome.DONE
    assert d.readiness(NODE).ready


@pytest.mark.parametrize(("show", "ready"), [
    ("NodeName=a State=IDLE ThreadsPerCore=1", True),
    ("NodeName=a State=MIXED Partitions=gpu", True),
    ("NodeName=a State=IDLE* Partitions=gpu", False),
    ("NodeName=a State=IDLE+DRAIN Partitions=gpu", False),
    ("NodeName=a State=DOWN+NOT_RESPONDING", False),
    ("NodeName=a State=ALLOCATED+COMPLETING", True),
    ("NodeName=a Arch=x86_64", False),
])
def test_slurm_readiness_parsing(show: str, ready: bool) -> None:
    assert slurm_readiness(show).ready is ready


def test_slurm_readiness_counts_the_offered_gpus_and_says_slurms_reason() -> None:
    ready = slurm_readiness("NodeName=a Gres=gpu:t4:4(S:0) State=IDLE Partitions=gpu")
    assert ready.ready and ready.gpus == 4
    assert slurm_readiness("NodeName=a Gres=(null) State=IDLE").gpus == 0  # found no GPU
    assert slurm_readiness("NodeName=a State=IDLE").gpus == 0
    low = slurm_readiness("NodeName=a Gres=gpu:t4:1 State=IDLE+DRAIN+INVALID_REG Partitions=gpu "
                          "Reason=gres/gpu count reported lower than configured (0 < 1) "
                          "[slurm@2026-12-02T10:00:00]")
    assert not low.ready and low.why == ("slurm state IDLE+DRAIN+INVALID_REG: gres/gpu count "
                                         "reported lower than configured (0 < 1)")
    down = slurm_readiness("NodeName=a State=DOWN Reason=Not responding [slurm@x] Comment=(null)")
    assert down.why == "slurm state DOWN: Not responding"


@pytest.mark.parametrize("gres", ["gpu:nan", "gpu:1e400", "gpu:v100:inf", "gpu:-4", "gpu:1.5",
                                  "gpu:v100:4,gpu:nan"])
def test_a_gres_count_that_is_no_number_of_gpus_is_not_ready(gres: str) -> None:
    """NaN compared false with the type's GPUs, so Gres=gpu:nan read as a ready node."""
    ready = slurm_readiness(f"NodeName=a State=IDLE Gres={gres} Reason=none")
    assert (ready.ready, ready.gpus) == (False, None)
    assert ready.why == "slurm state IDLE, but its Gres has a GPU count that is not a whole number from 0 up"


def test_slurm_command_failures_are_drain_errors() -> None:
    def broken(argv, timeout, env):  # type: ignore[no-untyped-def]
        raise SlurmCommandError(f"{' '.join(argv)} failed (1): Unable to contact slurm controller")

    d = FakeDrainer()
    d.ops = SlurmOps(runner=broken)
    step = d.step(NODE, progress(), NOW)
    assert step.outcome is DrainOutcome.ERROR and "Unable to contact" in (step.progress.last_error or "")
    assert not d.readiness(NODE).ready


def test_slurm_scope_full_and_a_refused_requeue_cancels_the_job() -> None:
    calls: list[list[str]] = []

    def runner(argv, timeout, env):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        if argv[:2] == ["scontrol", "requeue"] and argv[2] == "5":
            raise SlurmCommandError("scontrol requeue 5 failed (1): Only batch jobs are accepted")
        if argv[:2] == ["scontrol", "requeue"]:
            raise SlurmCommandError("scontrol requeue 6 failed (1): Job is pending execution")
        return "5 RUNNING\n6 COMPLETING\n" if argv[0] == "squeue" else ""

    ops = SlurmOps(scope="full", runner=runner)
    assert ops.workload("n1") == [Work("5"), Work("6", ending=True)]
    ops.checkpoint("n1", [Work("5")], "TERM")
    ops.evacuate("n1", [Work("5"), Work("6")])
    assert calls[1:] == [["scancel", "--signal=TERM", "--full", "5"], ["scontrol", "requeue", "5"],
                         ["scancel", "5"], ["scontrol", "requeue", "6"]]
