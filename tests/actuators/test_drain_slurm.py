"""The Slurm drainer against a real slurmctld/slurmd pair: drain, checkpoint signal,
requeue, resume, readiness and forget, of declared nodes and of dynamic ones."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from autoscaler.actuators.drain import (
    DrainError,
    DrainOutcome,
    DrainPhase,
    DrainProgress,
    PhasedDrainer,
)
from autoscaler.actuators.drain.slurm import SlurmOps
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.slurm import SlurmCluster, SlurmNodeSpec
from autoscaler.schedulers.slurm.client import SlurmConfig
from tests.builders import make_node

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("slurmctld") is None, reason="slurmctld not installed"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    nodes = [SlurmNodeSpec("vision-gpu-1", gpus=1), SlurmNodeSpec("vision-gpu-2", gpus=1)]
    # Fewer dynamic slots than the dynamic test registers: a deleted node's slot is reused.
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes, dynamic_partitions=["gpu"],
                      max_nodes=3) as c:
        yield c


@pytest.fixture
def drainer(cluster: SlurmCluster) -> PhasedDrainer:
    return PhasedDrainer(SlurmOps(SlurmConfig(env=cluster.env(), registration="declared")))


@pytest.fixture
def dynamic(cluster: SlurmCluster) -> PhasedDrainer:
    return PhasedDrainer(SlurmOps(SlurmConfig(env=cluster.env())))  # dynamic: the default


def progress(now: datetime, deadline_in: float = 600, grace: float = 30) -> DrainProgress:
    return DrainProgress(reason="vision/gpu: idle for 15m", started_at=now,
                         deadline=now + timedelta(seconds=deadline_in),
                         grace=timedelta(seconds=grace), signal="USR1")


def node(name: str) -> Node:
    return make_node(name, state=NodeState.DRAINING)


def trapping_job(cluster: SlurmCluster, on: str, name: str) -> tuple[str, Path]:
    """A running job that appends to the returned marker file on SIGUSR1."""
    marker = cluster.jobs_dir / f"{name}-checkpointed"
    trapping = cluster.jobs_dir / f"{name}-trapping"
    script = (f"trap 'echo USR1 >> {marker}' USR1; touch {trapping}; "
              "for i in $(seq 600); do sleep 1; done")
    job = cluster.submit(script, gpus=1, nodelist=on, name=name)
    # RUNNING comes before the batch shell has set its trap; a signal before that kills it.
    wait_until(trapping.exists, 60, "the job's trap to be set")
    return job, marker


def test_idle_node_drains_at_once_and_resumes(cluster: SlurmCluster, drainer: PhasedDrainer) -> None:
    now = datetime.now(UTC)
    step = drainer.step(node("vision-gpu-2"), progress(now), now)
    assert step.outcome is DrainOutcome.DONE and step.progress.phase is DrainPhase.CORDONED
    assert cluster.node_state("vision-gpu-2") in {"idle+drain", "drained"}
    assert "idle for 15m" in cluster.scontrol("show", "node", "vision-gpu-2").stdout
    assert not drainer.readiness(node("vision-gpu-2")).ready
    again = drainer.step(node("vision-gpu-2"), progress(now), now)  # re-runnable
    assert again.outcome is DrainOutcome.DONE
    drainer.cancel(node("vision-gpu-2"))
    cluster.wait_node_state("vision-gpu-2", {"idle"}, 30)
    drainer.cancel(node("vision-gpu-2"))  # resuming a node that is not drained is fine
    assert drainer.readiness(node("vision-gpu-2")).ready


def test_busy_node_signalled_at_the_deadline_then_requeued(cluster: SlurmCluster,
                                                          drainer: PhasedDrainer) -> None:
    job, marker = trapping_job(cluster, "vision-gpu-1", "train")
    name = "vision-gpu-1"
    now = datetime.now(UTC)
    p = progress(now, deadline_in=600)
    step = drainer.step(node(name), p, now)
    assert step.outcome is DrainOutcome.RETRY and step.work == [job]
    assert "waiting for 1 job(s)" in step.message
    assert cluster.node_state(name).endswith("+drain")  # slurm: DRAINING while the job runs

    later = now + timedelta(seconds=601)  # the drain deadline passed
    step = drainer.step(node(name), step.progress, later)
    assert step.progress.phase is DrainPhase.SIGNALLING and step.retry_after == timedelta(0)
    assert not marker.exists()  # an intent step does nothing else
    step = drainer.step(node(name), step.progress, later)
    assert step.progress.phase is DrainPhase.SIGNALLED and step.progress.signalled_at == later
    wait_until(marker.exists, 30, "the job to trap SIGUSR1")
    assert cluster.job_state(job) == "RUNNING"  # it checkpoints, it is not killed

    step = drainer.step(node(name), step.progress, later + timedelta(seconds=10))
    assert step.outcome is DrainOutcome.RETRY and step.progress.phase is DrainPhase.SIGNALLED
    after_grace = later + timedelta(seconds=31)
    step = drainer.step(node(name), step.progress, after_grace)
    assert step.progress.phase is DrainPhase.REQUEUEING
    step = drainer.step(node(name), step.progress, after_grace)
    assert step.progress.phase is DrainPhase.REQUEUED

    def drained() -> bool:
        return drainer.step(node(name), step.progress, after_grace).outcome is DrainOutcome.DONE

    wait_until(drained, 60, "the requeued job to leave the node")
    assert cluster.job_state(job) in {"PENDING", "REQUEUED", "RUNNING", "CONFIGURING"}
    out = cluster.scontrol("show", "job", job).stdout
    assert "Restarts=1" in out and "NodeList=vision-gpu-1" not in out.replace("ReqNodeList", "")
    cluster.run(["scancel", job])
    drainer.cancel(node(name))
    cluster.wait_node_state(name, {"idle"}, 30)


def test_long_job_is_signalled_in_place(cluster: SlurmCluster, drainer: PhasedDrainer) -> None:
    job, marker = trapping_job(cluster, "vision-gpu-2", "long")
    assert drainer.signal_jobs(make_node("vision-gpu-2"), [job], "USR1") is True
    wait_until(marker.exists, 30, "the job to trap SIGUSR1")
    assert cluster.job_state(job) == "RUNNING"  # asked to checkpoint, not stopped
    assert not cluster.node_state("vision-gpu-2").endswith("drain")  # and not drained
    cluster.run(["scancel", job])


def test_unknown_nodes_have_nothing_to_drain_and_are_not_ready(drainer: PhasedDrainer) -> None:
    now = datetime.now(UTC)
    ghost = node("vision-gpu-77")
    step = drainer.step(ghost, progress(now), now)
    assert step.outcome is DrainOutcome.DONE and "does not know" in step.message
    assert drainer.readiness(ghost).why == "slurm does not know vision-gpu-77"
    drainer.cancel(ghost)
    drainer.forget(ghost)


def test_forget_marks_the_node_down(cluster: SlurmCluster, drainer: PhasedDrainer) -> None:
    # forget() runs once the instance is destroyed: its slurmd is gone too. A live slurmd
    # re-registering (after a ping missed on a busy machine) would return the node to
    # service under ReturnToService=2 before the assertion.
    cluster.stop_slurmd("vision-gpu-2")
    drainer.forget(node("vision-gpu-2"))
    assert cluster.node_state("vision-gpu-2").startswith("down")
    assert "terminated by gpu-autoscaler" in cluster.scontrol("show", "node", "vision-gpu-2").stdout
    cluster.start_slurmd("vision-gpu-2")  # a new instance under the same name registers
    cluster.wait_node_state("vision-gpu-2", {"idle"}, 60)


def test_dynamic_nodes_join_and_leave_without_declared_names(cluster: SlurmCluster,
                                                             dynamic: PhasedDrainer) -> None:
    """15 nodes of one pool, one after another (more than MaxNodeCount's 3 dynamic slots and
    the 12 names the sandbox used to declare): each registers itself with slurmd -Z, is in
    the partition through its Nodeset, runs a job, and is deleted by forget(); slurmctld
    then lists only the declared nodes."""
    declared = sorted(cluster.nodes)
    for i in range(1, 16):
        name = f"vision-train-{i}"
        cluster.start_dynamic_slurmd(SlurmNodeSpec(name, gpus=1, gpu_type="t4"),
                                     features=["team-vision", "pool-train", "spot"])
        cluster.wait_node_state(name, {"idle"}, 30)
        shown = cluster.scontrol("--oneliner", "show", "node", name).stdout
        assert "Partitions=gpu" in shown and "Gres=gpu:t4:1" in shown and "Weight=100" in shown
        assert "AvailableFeatures=partition-gpu,team-vision,pool-train,spot" in shown
        assert dynamic.readiness(make_node(name)).ready
        if i in (1, 15):  # Slurm schedules on it: a job asking for that node runs there
            job = cluster.submit("true", gpus=1, nodelist=name, name=f"on-{name}")
            cluster.wait_job_state(job, {"COMPLETED"}, 30)
        assert sorted(cluster.node_names()) == sorted([*declared, name])
        cluster.stop_slurmd(name)  # the instance is gone
        dynamic.forget(make_node(name))
        assert sorted(cluster.node_names()) == declared
        assert not dynamic.readiness(make_node(name)).ready
    dynamic.forget(make_node("vision-train-1"))  # already deleted: nothing to do


def test_a_dynamic_node_slurm_will_not_delete_is_set_down_and_said(
        cluster: SlurmCluster, dynamic: PhasedDrainer) -> None:
    name = "vision-train-busy"
    cluster.start_dynamic_slurmd(SlurmNodeSpec(name, gpus=1))
    cluster.wait_node_state(name, {"idle"}, 30)
    job = cluster.submit("sleep 600", gpus=1, nodelist=name, name="pinned")
    cluster.wait_job_state(job, {"RUNNING"}, 30)
    # The instance is gone (forget's premise), its job still counted by slurmctld. A live
    # slurmd would re-register and ReturnToService=2 would make the node idle again (this
    # test was flaky under load while the slurmd ran on).
    cluster.stop_slurmd(name)
    with pytest.raises(DrainError, match=f"{name} set DOWN; slurmctld refused to delete it"):
        dynamic.forget(make_node(name))
    assert cluster.node_state(name).startswith("down")  # nothing new is scheduled there
    cluster.run(["scancel", job], check=True)
    wait_until(lambda: cluster.job_state(job) in {"CANCELLED", "UNKNOWN"}, 30, "the job to end")
    dynamic.forget(make_node(name))  # a later forget deletes it
    assert name not in cluster.node_names()
