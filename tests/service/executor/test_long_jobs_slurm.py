"""Slurm's own view of a READY node acted on, on a real slurmctld with two slurmd nodes.

lifetime.action: release, end to end: the Slurm reader sees the job's start time, decide()
finds it past max_job_runtime, the executor sends the checkpoint signal, waits
checkpoint_grace and requeues it; the job's trap writes its checkpoint, its first node is
freed (a job waiting for that node starts there) and the job restarts from its checkpoint
on the other node.

A node whose slurmd stops: slurmctld sets it DOWN ("Not responding") after SlurmdTimeout,
decide() replaces it once health.unready_grace has passed since Slurm's reason time, the
executor drains and terminates it, Slurm requeues its job, and the replacement joins.

The limits are seconds, not hours (max_job_runtime has no floor). Only the plan's long-job
reports are carried out: the same decide() also asks for capacity for the waiting job, and
this rig's cloud is a fake one.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from autoscaler.actuators.drain import PhasedDrainer
from autoscaler.actuators.drain.slurm import SlurmOps
from autoscaler.catalog import default_catalog
from autoscaler.engine import ReportJob, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import FleetView
from autoscaler.model.plan import Plan, Replace, Terminate
from autoscaler.model.snapshot import NodeObservation, Snapshot
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.slurm import SlurmCluster, SlurmNodeSpec
from autoscaler.schedulers.slurm.client import SlurmConfig
from autoscaler.signals.readings import pools_in_priority_order
from autoscaler.signals.slurm import SlurmReader
from tests.service.executor_rig import Rig, launch, make_rig, slurm_policy

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("slurmctld") is None, reason="slurmctld not installed"),
]
NODES = ("vision-gpu-1", "vision-gpu-2")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    # A silent slurmd is DOWN after 12 s instead of the default minute (pinged every 4 s).
    with SlurmCluster(tmp_path_factory.mktemp("slurm-long"),
                      [SlurmNodeSpec(n, gpus=1) for n in NODES], slurmd_timeout=12) as c:
        yield c


def ready_rig(tmp_path: Path, cluster: SlurmCluster, policy: TeamPolicy) -> Rig:
    """Both NODES launched (fake cloud and Ansible) and READY by the real Slurm drainer."""
    r = make_rig(tmp_path, policies={"vision": policy})
    r.slurm = PhasedDrainer(SlurmOps(  # type: ignore[assignment]
        SlurmConfig(env=cluster.env(), registration="declared")))
    r.clock.now = datetime.now(UTC)
    names = r.submit(launch(2))
    r.advance()
    r.advance()  # the real drainer finds both nodes idle in Slurm: READY
    assert sorted(names) == list(NODES) and {r.state(n).value for n in names} == {"READY"}
    return r


@pytest.fixture
def rig(tmp_path: Path, cluster: SlurmCluster) -> Iterator[Rig]:
    policy = slurm_policy(lifetime={"max_job_runtime": "6s", "action": "release"},
                          scale_down={"checkpoint_signal": "USR1", "checkpoint_grace": "3s"})
    r = ready_rig(tmp_path, cluster, policy)
    yield r
    r.store.close()


def checkpointing_job(jobs: Path) -> str:
    """Counts seconds; on SIGUSR1 saves the count; on start resumes from the saved count."""
    ck, log = jobs / "ckpt", jobs / "log"
    return (f"i=0; if [ -f {ck} ]; then i=$(cat {ck}); echo \"resumed $i on $SLURMD_NODENAME\" "
            f">> {log}; fi; trap 'echo $i > {ck}; echo \"checkpoint $i on $SLURMD_NODENAME\" "
            f">> {log}' USR1; touch {jobs}/trapping-${{SLURM_RESTART_COUNT:-0}}; "
            "while :; do i=$((i+1)); sleep 1; done")


def decide_now(rig: Rig, reader: SlurmReader) -> Plan:
    """decide() on what Slurm says now, at the real time Slurm's times are in."""
    rig.clock.now = now = datetime.now(UTC)
    refs = pools_in_priority_order(rig.policies, default_catalog(), "slurm")
    reading = reader.read(refs)
    assert reading.error is None, reading.error
    snapshot = Snapshot(taken_at=now, nodes={
        name: NodeObservation(scheduler=sched) for name, sched in reading.nodes.items()})
    return decide(rig.policies, FleetView(nodes=rig.store.nodes()), snapshot, now)


def tick(rig: Rig, reader: SlurmReader) -> None:
    """One service tick's long-job part."""
    rig.submit(*[a for a in decide_now(rig, reader).actions if isinstance(a, ReportJob)])
    rig.advance()


def node_of(cluster: SlurmCluster, job: str) -> str:
    out = cluster.scontrol("show", "job", job).stdout.replace("ReqNodeList", "")
    return out.split(" NodeList=", 1)[1].split()[0]


def test_long_job_checkpointed_requeued_and_resumed_on_the_other_node(
        cluster: SlurmCluster, rig: Rig) -> None:
    reader = SlurmReader(SlurmConfig(env=cluster.env()))
    jobs = cluster.jobs_dir
    job = cluster.submit(checkpointing_job(jobs), name="train", extra=["--requeue"])
    wait_until((jobs / "trapping-0").exists, 30, "the job's trap to be set")
    first = node_of(cluster, job)
    other = next(n for n in NODES if n != first)
    waiting = cluster.submit("sleep 300", nodelist=first, name="next-in-queue")
    try:
        def requeued() -> bool:
            tick(rig, reader)
            return rig.store.meta(first)["long_jobs"].get(job, {}).get("released_at") is not None

        wait_until(requeued, 30, "the long job to be signalled and requeued", interval=0.5)
        entry = rig.store.meta(first)["long_jobs"][job]
        waited = (datetime.fromisoformat(entry["released_at"])
                  - datetime.fromisoformat(entry["signalled_at"]))
        assert waited.total_seconds() >= 3  # checkpoint_grace
        log = (jobs / "log").read_text()
        assert f"on {first}" in log and log.startswith("checkpoint ")  # trapped, saved
        saved = int((jobs / "ckpt").read_text())
        assert saved >= 5 and entry["outcome"].startswith("requeued after ")
        [audit] = [a.detail for a in rig.store.audit_log() if a.event == "long-job-release"]
        assert audit.startswith(f"job {job} on {first}: requeued ") and "checkpoint_grace 3s" in audit
        [report] = [a.detail for a in rig.store.audit_log() if a.event == "long-job"]
        assert "past max_job_runtime 6s: checkpoint signal USR1, requeue after 3s grace" in report

        # Freed: the job waiting for exactly that node gets it, while Slurm holds the
        # requeued job back (its BeginTime, about 2 minutes after a requeue).
        cluster.wait_job_state(waiting, {"RUNNING"}, timeout=30)
        assert node_of(cluster, waiting) == first and rig.state(first).value == "READY"
        # The test does not wait out Slurm's hold: it makes the job eligible now.
        cluster.run(["scontrol", "update", f"jobid={job}", "StartTime=now"], check=True)
        wait_until((jobs / "trapping-1").exists, 30, "the requeued job to restart")
        assert node_of(cluster, job) == other
        assert f"resumed {saved} on {other}" in (jobs / "log").read_text()
    finally:
        cluster.run(["scancel", job, waiting])


def test_a_node_whose_slurmd_stops_is_replaced_and_its_job_requeued(
        cluster: SlurmCluster, tmp_path: Path) -> None:
    rig = ready_rig(tmp_path, cluster, slurm_policy(health={"unready_grace": "3s"}))
    reader = SlurmReader(SlurmConfig(env=cluster.env()))
    job = cluster.submit("sleep 300", name="on-a-dying-node", extra=["--requeue"])
    cluster.wait_job_state(job, {"RUNNING"}, timeout=30)
    lost = node_of(cluster, job)
    other = next(n for n in NODES if n != lost)
    replacement = "vision-gpu-3"
    try:
        cluster.stop_slurmd(lost)
        cluster.wait_node_state(lost, {"down*", "down+not_responding"}, timeout=60)
        # Slurm requeues the job of a node it sets DOWN; it waits for its BeginTime again.
        cluster.wait_job_state(job, {"PENDING"}, timeout=30)
        assert "Restarts=1" in cluster.scontrol("show", "job", job).stdout
        replaces: list[Replace] = []

        def replaced() -> bool:
            plan = decide_now(rig, reader)
            replaces[:] = [a for a in plan.actions if isinstance(a, Replace)]
            return bool(replaces)

        wait_until(replaced, 30, "decide() to replace the silent node", interval=1)
        [replace] = replaces
        assert (replace.node, replace.trigger, replace.instance_type) == (lost, "unhealthy",
                                                                          "p3.2xlarge")
        assert "the scheduler says NOT_RESPONDING by root: Not responding for " in replace.reason
        assert "> unready_grace 3s" in replace.reason
        assert rig.state(other) is NodeState.READY

        assert rig.submit(replace) == [replacement]

        def terminated() -> bool:  # the service's next ticks: decide() ends the drained node
            plan = decide_now(rig, reader)
            rig.submit(*[a for a in plan.actions if isinstance(a, Terminate) and a.node == lost])
            rig.advance()
            return rig.state(lost) is NodeState.TERMINATED

        wait_until(terminated, 60, f"{lost} drained and terminated", interval=1)
        why = {t.to_state: t.reason for t in rig.store.transitions(lost)}
        assert "Not responding" in why["DRAINING"], why  # the reason reaches the history
        # The replacement's instance (fake cloud) boots and its slurmd registers.
        cluster.add_nodes([SlurmNodeSpec(replacement, gpus=1)])

        def joined() -> bool:
            rig.clock.now = datetime.now(UTC)
            rig.advance()
            return rig.state(replacement) is NodeState.READY

        wait_until(joined, 60, f"{replacement} READY", interval=1)
        cluster.run(["scontrol", "update", f"jobid={job}", "StartTime=now"], check=True)
        cluster.wait_job_state(job, {"RUNNING"}, timeout=30)
        assert node_of(cluster, job) in (other, replacement)
        assert cluster.node_state(lost).startswith("down")  # forgotten: never given work again
    finally:
        cluster.run(["scancel", job])
        rig.store.close()
