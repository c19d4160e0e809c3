"""A pool's on-prem Slurm nodes (cluster.on_prem): which count, with what, and on a real
slurmctld, the cloud node's part of hybrid burst (the on-prem fill and the launch decision
run on booted hosts: tests/playbooks/test_gpu_node.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.model.snapshot import SchedulerNode
from autoscaler.model.snapshot_parts import assemble
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.slurm import SlurmCluster, SlurmNodeSpec
from autoscaler.schedulers.slurm.client import SlurmConfig
from autoscaler.signals.config import SignalsConfig
from autoscaler.signals.reader import SignalReader
from autoscaler.signals.readings import ClusterPool, pools_in_priority_order
from autoscaler.signals.slurm import SlurmNode, SlurmReader
from autoscaler.signals.slurm_onprem import on_prem_capacity
from tests.builders import NOW, fleet, make_node, make_policy

CLUSTER = {"kind": "slurm", "partition": "gpu"}


def refs(on_prem: dict[str, object]) -> list[ClusterPool]:
    policy = make_policy(instance_types=["p3.2xlarge", "p3.8xlarge"],
                         cluster={**CLUSTER, "on_prem": on_prem})
    return pools_in_priority_order({policy.team: policy}, default_catalog(), "slurm")


def node(name: str, gres: str = "gpu:v100:4", partitions: tuple[str, ...] = ("gpu",)) -> SlurmNode:
    return SlurmNode(name, "mixed", gres=gres, partitions=list(partitions))


def sched(state: str = "mixed", total: float = 4, allocated: float = 1, **kw: object) -> SchedulerNode:
    return SchedulerNode(state=state, gpus_total=total, gpus_allocated=allocated, **kw)


def test_on_prem_nodes_by_hostlist_or_partition_only_while_they_take_jobs() -> None:
    nodes = [node("gpu01"), node("gpu02", partitions=("gpu", "onprem")), node("gpu03"),
             node("vision-gpu-1", gres="gpu:v100:1")]
    seen = {"gpu01": sched(), "gpu02": sched(allocated=4, state="allocated"),
            "gpu03": sched(state="drained", cordoned=True), "vision-gpu-1": sched(total=1)}
    by_list = on_prem_capacity(refs({"nodes": "gpu[01-03]"}), nodes, seen)["vision/gpu"]
    assert [(n.name, n.gpus, n.allocated, n.gpu_model) for n in by_list] == [
        ("gpu01", 4, 1, "V100"), ("gpu02", 4, 4, "V100")]  # gpu03 is drained: no room
    by_part = on_prem_capacity(refs({"partition": "onprem"}), nodes, seen)["vision/gpu"]
    assert [n.name for n in by_part] == ["gpu02"]
    down = {**seen, "gpu01": sched(state="down", ready=False, unusable="DOWN: Not responding")}
    assert [n.name for n in on_prem_capacity(refs({"nodes": "gpu01"}), nodes, down)["vision/gpu"]] == []


@pytest.mark.parametrize("report", [sched(total=500), sched(total=4, allocated=9),
                                    sched(total=float("nan"))])
def test_an_on_prem_node_whose_numbers_are_not_possible_is_left_out(report: SchedulerNode) -> None:
    assert on_prem_capacity(refs({"nodes": "gpu01"}), [node("gpu01")], {"gpu01": report}) == {
        "vision/gpu": []}


def test_a_name_slurm_would_not_give_is_left_out() -> None:
    odd = node("gpu01;rm -rf /")
    assert on_prem_capacity(refs({"partition": "gpu"}), [odd], {odd.name: sched()}) == {
        "vision/gpu": []}


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    if shutil.which("slurmctld") is None:
        pytest.skip("slurmctld not installed")
    # CPUs enough for a job per GPU (each takes one): GPUs are what is short here.
    static = [SlurmNodeSpec(n, gpus=4, gpu_type="v100", cpus=8) for n in ("gpu01", "gpu02")]
    with SlurmCluster(tmp_path_factory.mktemp("hybrid"), static, dynamic_partitions=["gpu"]) as c:
        yield c


@pytest.mark.slow
def test_the_overflow_runs_on_the_cloud_node_that_joins_and_on_prem_is_left_alone(
        hybrid: SlurmCluster) -> None:
    """What the booted hybrid test (tests/playbooks/test_gpu_node.py, on-prem fill and
    the launch decision on real booted hosts) cannot show, since its partition takes no
    dynamic node: with the static on-prem nodes full, the bought node joins partition gpu
    dynamically, Slurm runs the overflow job there, and the next plan, with that node in
    the fleet, names neither on-prem node and leaves them serving."""
    policy: TeamPolicy = make_policy(instance_types=["p3.2xlarge", "p3.8xlarge"],
                                     cluster={**CLUSTER, "on_prem": {"nodes": "gpu[01-02]"}})
    policies = {policy.team: policy}
    reader = SignalReader(SignalsConfig(scheduler=["slurm"]), default_catalog(),
                          slurm=SlurmReader(SlurmConfig(env=hybrid.env())))
    jobs: list[str] = []
    try:
        jobs += [hybrid.submit("sleep 600", gpus=4, nodelist=n, name="busy")
                 for n in ("gpu01", "gpu02")]
        for job in jobs:
            hybrid.wait_job_state(job, {"RUNNING"}, 30)
        big = hybrid.submit("sleep 600", gpus=4, gpu_type="v100", name="overflow")
        jobs.append(big)
        wait_until(lambda: hybrid.run(["squeue", "-h", "-j", big, "-o", "%r"]).stdout.strip()
                   == "Resources", 30, "the 4-GPU job pending for Resources", interval=0.5)

        # The cloud node joins as a dynamic node (weight 100, above the static nodes' 1).
        hybrid.start_dynamic_slurmd(SlurmNodeSpec("vision-gpu-1", gpus=4, gpu_type="v100",
                                                  cpus=8),
                                    features=["team-vision", "pool-gpu", "p3.8xlarge"])
        hybrid.wait_job_state(big, {"RUNNING"}, 60)
        assert "NodeList=vision-gpu-1" in hybrid.scontrol("show", "job", big).stdout
        cloud = make_node("vision-gpu-1", instance_type="p3.8xlarge")
        observed = reader.read(policies, [cloud], NOW)
        assert [(n.name, n.allocated) for n in observed.pools["vision/gpu"].on_prem or []] == [
            ("gpu01", 4), ("gpu02", 4)]
        plan = decide(policies, fleet(cloud), assemble(observed), NOW, catalog=default_catalog())
        touched = {getattr(a, "node", None) for a in plan.actions} | {
            n for a in plan.actions for n in getattr(a, "replaces", [])}
        assert not touched & {"gpu01", "gpu02"}, plan.actions
        assert [a for a in plan.actions if a.kind == "launch"] == [], plan.actions
        assert {hybrid.node_state(n) for n in ("gpu01", "gpu02")} <= {"mixed", "allocated"}
    finally:
        if jobs:
            hybrid.run(["scancel", *jobs])
        hybrid.delete_dynamic("vision-gpu-1")
