"""A real Slurm cluster (munged + slurmctld + two slurmd with fake GPU gres) on loopback."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.slurm import SlurmCluster, SlurmNodeSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("slurmctld") is None, reason="slurmctld not installed"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    workdir = tmp_path_factory.mktemp("slurm")
    nodes = [SlurmNodeSpec("gpu1", gpus=2), SlurmNodeSpec("gpu2", gpus=2),
             # Declared for a node that joins later (e.g. from a namespace test host).
             SlurmNodeSpec("gpu3", gpus=2, local=False)]
    with SlurmCluster(workdir, nodes) as c:
        yield c


def test_config_files_declare_nodes_gres_and_own_munge(cluster: SlurmCluster) -> None:
    conf = cluster.slurm_conf.read_text()
    assert f"AuthInfo=socket={cluster.munge_socket}" in conf
    assert "ReturnToService=2" in conf and "GresTypes=gpu" in conf
    assert "NodeName=gpu3 NodeAddr=127.0.0.1" in conf
    assert "PartitionName=gpu Nodes=gpu1,gpu2,gpu3" in conf
    gres = cluster.gres_conf.read_text()
    assert f"NodeName=gpu1 Name=gpu Type=t4 File={cluster.dev_dir}/gpu1/nvidia[0-1]" in gres
    assert (cluster.dev_dir / "gpu1" / "nvidia1").resolve() == Path("/dev/null")
    assert oct(cluster.munge_key.stat().st_mode & 0o777) == "0o400"
    assert cluster.env() == {"SLURM_CONF": str(cluster.slurm_conf)}
    assert cluster.slurmd_argv("gpu3")[:4] == ["slurmd", "-D", "-N", "gpu3"]


def test_two_nodes_idle_and_a_gpu_job_runs(cluster: SlurmCluster) -> None:
    assert cluster.node_state("gpu1") == "idle"
    assert cluster.node_state("gpu2") == "idle"
    # The undeclared-yet node is known but not responding.
    assert cluster.node_state("gpu3").startswith(("unknown", "down", "idle*"))
    job = cluster.submit("echo gpus=$CUDA_VISIBLE_DEVICES", gpus=2, nodelist="gpu2",
                         output=str(cluster.jobs_dir / "%j.out"))  # slurmd runs on this host
    cluster.wait_job_state(job, {"COMPLETED"}, timeout=60)
    assert (cluster.jobs_dir / f"{job}.out").read_text().strip() == "gpus=0,1"


def test_drain_while_running_then_drained_then_resume(cluster: SlurmCluster) -> None:
    job = cluster.submit("sleep 300", gpus=1, nodelist="gpu1")
    cluster.wait_job_state(job, {"RUNNING"}, timeout=60)
    cluster.drain("gpu1", reason="scale-down")
    assert cluster.wait_node_state("gpu1", {"mixed+drain"}, timeout=30) == "mixed+drain"
    cluster.run(["scancel", job], check=True)
    assert cluster.wait_node_state("gpu1", {"idle+drain"}, timeout=60) == "idle+drain"
    sinfo = cluster.run(["sinfo", "-h", "-n", "gpu1", "-o", "%T"], check=True).stdout.strip()
    assert sinfo == "drained"
    cluster.resume("gpu1")
    assert cluster.wait_node_state("gpu1", {"idle"}, timeout=30) == "idle"


def test_stop_slurmd_and_start_again(cluster: SlurmCluster) -> None:
    """A stopped slurmd is a dead node: the job it ran goes with it (slurmstepd would
    outlive slurmd, and the test, otherwise)."""
    job = cluster.submit("sleep 300", gpus=1, nodelist="gpu2")
    cluster.wait_job_state(job, {"RUNNING"}, timeout=60)
    steps: list[int] = []

    def launched() -> bool:  # RUNNING to slurmctld comes before slurmd forks the step
        steps[:] = cluster.job_processes("gpu2")
        return len(steps) >= 2  # slurmstepd and sleep

    wait_until(launched, 30, "the job's processes on gpu2")
    assert cluster.job_processes("gpu1") == []
    cluster.stop_slurmd("gpu2")
    assert cluster.job_processes("gpu2") == []
    assert not [p for p in steps if Path(f"/proc/{p}").exists()
                and Path(f"/proc/{p}/stat").read_text().split(") ")[-1][0] != "Z"]
    cluster.run(["scancel", job])
    cluster.start_slurmd("gpu2")
    assert cluster.wait_node_state("gpu2", {"idle"}, timeout=60) == "idle"
