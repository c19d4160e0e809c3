"""A pool's on-prem Slurm nodes (cluster.on_prem): which count, with what, and on a real
slurmctld, hybrid burst end to end through the reader and decide()."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.model.snapshot import SchedulerNode
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.slurm import SlurmCluster, SlurmNodeSpec
from autoscaler.schedulers.slurm.client import SlurmConfig
from autoscaler.signals.readings import pools_in_priority_order
from autoscaler.signals.slurm import SlurmNode, SlurmReader
from autoscaler.signals.slurm_onprem import on_prem_capacity
from tests.builders import make_policy

CLUSTER = {"kind": "slurm", "partition": "gpu"}


def refs(on_prem: dict[str, object]) -> list:
    policy = make_policy(instance_types=["p3.2xlarge", "p3.8xlarge"],
                         cluster={**CLUSTER, "on_prem": on_prem})
    return pools_in_priority_order({policy.team: policy}, default_catalog(), "slurm")


def node(name: str, gres: str = "gpu:v100:4", partitions: tuple[str, ...] = ("gpu",)) -> SlurmNode:
    return SlurmNode(name, "mixed", gres=gres, partitions=list(partitions))


def sched(state: str = "mixed", total: float = 4, allocated: float = 1, **kw: object) -> SchedulerNode:
    return SchedulerNode(state=state, gpus_total=total, gpus_allocated=allocated, **kw)  # type: ignore[arg-type]


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
def test_hybrid_jobs_fill_on_prem_first_and_only_the_overflow_bursts(hybrid: SlurmCluster) -> None:
    """Two static on-prem nodes, partly busy, in the partition a cloud pool serves: jobs
    that fit on-prem start there and buy nothing; a job that does not fit buys exactly one
    node; that node joins dynamically and runs it; the on-prem nodes are never touched."""
    from autoscaler.engine import decide
    from autoscaler.model.snapshot_parts import assemble
    from autoscaler.signals.config import SignalsConfig
    from autoscaler.signals.reader import SignalReader
    from tests.builders import NOW, fleet, make_node

    policy: TeamPolicy = make_policy(instance_types=["p3.2xlarge", "p3.8xlarge"],
                                     cluster={**CLUSTER, "on_prem": {"nodes": "gpu[01-02]"}})
    policies = {policy.team: policy}
    reader = SignalReader(SignalsConfig(scheduler=["slurm"]), default_catalog(),
                          slurm=SlurmReader(SlurmConfig(env=hybrid.env())))
    jobs = [hybrid.submit("sleep 600", gpus=3, nodelist="gpu01", name="busy"),
            hybrid.submit("sleep 600", gpus=2, nodelist="gpu02", name="busy")]
    try:
        for job in jobs:
            hybrid.wait_job_state(job, {"RUNNING"}, 30)
        fits = [hybrid.submit("sleep 600", gpus=1, gpu_type="v100", name=f"fits-{i}")
                for i in range(3)]  # the 3 free GPUs: 1 on gpu01, 2 on gpu02
        jobs += fits
        for job in fits:
            hybrid.wait_job_state(job, {"RUNNING"}, 30)
        observed = reader.read(policies, [], NOW)
        assert [(n.name, n.allocated) for n in observed.pools["vision/gpu"].on_prem or []] == [
            ("gpu01", 4), ("gpu02", 4)]
        plan = decide(policies, fleet(), assemble(observed), NOW, catalog=default_catalog())
        assert [a for a in plan.actions if a.kind == "launch"] == []

        big = hybrid.submit("sleep 600", gpus=4, gpu_type="v100", name="overflow")
        jobs.append(big)

        def pending_seen() -> bool:
            nonlocal observed
            observed = reader.read(policies, [], NOW)
            return [(j.id, j.reason) for j in observed.pools["vision/gpu"].pending] == [
                (big, "Resources")]

        wait_until(pending_seen, 30, "the 4-GPU job pending as demand")
        plan = decide(policies, fleet(), assemble(observed), NOW, catalog=default_catalog())
        launches = [a for a in plan.actions if a.kind == "launch"]
        assert [(a.instance_type, a.count) for a in launches] == [("p3.8xlarge", 1)], (
            observed.pools["vision/gpu"].pending, plan.actions)
        assert "0 of 1 pending job part(s) fit on-prem gpu[01-02] (0 of 8 GPUs free)" in \
            launches[0].reason

        # The cloud node joins as a dynamic node (weight 100, above the static nodes' 1).
        hybrid.start_dynamic_slurmd(SlurmNodeSpec("vision-gpu-1", gpus=4, gpu_type="v100",
                                                  cpus=8),
                                    features=["team-vision", "pool-gpu", "p3.8xlarge"])
        hybrid.wait_job_state(big, {"RUNNING"}, 60)
        assert "NodeList=vision-gpu-1" in hybrid.scontrol("show", "job", big).stdout
        cloud = make_node("vision-gpu-1", instance_type="p3.8xlarge")
        observed = reader.read(policies, [cloud], NOW)
        plan = decide(policies, fleet(cloud), assemble(observed), NOW, catalog=default_catalog())
        touched = {getattr(a, "node", None) for a in plan.actions} | {
            n for a in plan.actions for n in getattr(a, "nodes", [])}
        assert not touched & {"gpu01", "gpu02"}, plan.actions
        assert {hybrid.node_state(n) for n in ("gpu01", "gpu02")} <= {"mixed", "allocated"}
    finally:
        hybrid.run(["scancel", *jobs])
        hybrid.delete_dynamic("vision-gpu-1")
