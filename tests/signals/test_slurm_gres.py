"""Slurm jobs asking for a MIG slice (``--gres=gpu:3g.40gb:1``) or shards (``--gres=shard:2``)
count as a share of a GPU of the pool that offers them, as pods asking for
``nvidia.com/mig-3g.40gb`` or ``nvidia.com/gpu.shared`` do; the nodes' and running jobs'
slices and shards count the same way."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.sandbox.services.slurm import SlurmCluster, SlurmNodeSpec
from autoscaler.schedulers.slurm.client import SlurmConfig
from autoscaler.schedulers.slurm.parse import Gres, parse_gres
from autoscaler.signals import slurm_gres
from autoscaler.signals.readings import SchedulerReading, pools_in_priority_order
from autoscaler.signals.slurm import SQUEUE_FORMAT, SlurmReader
from tests.builders import make_policy
from tests.hostile import SPLIT, TF_FILE, jinja

ON_DEMAND = {"on_demand_base": 0, "spot_percent": 0}


def spool(name: str, types: list[str], bootstrap: Mapping[str, Any] | None = None,
          **cluster: Any) -> dict[str, Any]:
    return {"name": name, "cloud": "aws", "region": "us-east-1", "instance_types": types,
            "max_nodes": 4, "capacity": dict(ON_DEMAND), "bootstrap": dict(bootstrap or {}),
            "cluster": {"kind": "slurm", "partition": "gpu", **cluster}}


POLICIES = {
    "ml": make_policy("ml", priority="high", pools=[
        spool("v100", ["p3.8xlarge"]),
        spool("mig", ["p4de.24xlarge"], {"sharing": "mig", "mig_profiles": ["3g.40gb", "3g.40gb"]}),
        spool("mps", ["g4dn.12xlarge"], {"sharing": "mps", "mps": {"replicas": 4}}),
        spool("ts", ["g4dn.12xlarge"], {"sharing": "time-slicing", "time_slicing_replicas": 8},
              accounts=["inference"]),
    ]),
}
REFS = pools_in_priority_order(POLICIES, default_catalog(), "slurm")
POOLS = {ref.pool.name: ref.pool for ref in REFS}


@pytest.mark.parametrize(("pool", "gres", "gpus"), [
    ("mig", "gpu:3g.40gb:1", 0.5),
    ("mig", "gpu:a100_3g.40gb:2", 1.0),  # NVML autodetection's spelling
    ("mig", "gpu:1g.10gb:1", None),  # not in the pool's layout
    ("mig", "gpu:1", None),  # the pool offers no whole GPU
    ("mps", "shard:2", 0.5),
    ("mps", "gpu:t4:1,shard:2", 1.5),
    ("ts", "shard:2", 0.25),
    ("v100", "shard:2", None),
    ("v100", "gpu:3g.40gb:1", None),
    ("v100", "gpu:v100:2", 2.0),
])
def test_a_request_in_gpus_of_a_pools_node(pool: str, gres: str, gpus: float | None) -> None:
    assert slurm_gres.gpus_on(POOLS[pool], parse_gres(gres)) == gpus


def test_what_each_pool_offers() -> None:
    assert [slurm_gres.offered(POOLS[p]) for p in ("v100", "mig", "mps", "ts")] == [
        ["gpu"], ["gpu:3g.40gb"], ["gpu", "shard"], ["gpu", "shard"]]


@pytest.mark.parametrize(("gres", "why"), [
    ([Gres("shard", None, float("nan"))], "a shard count that is not a number"),
    ([Gres("shard", None, float("inf"))], "a shard count that is not a number"),
    ([Gres("shard", None, 1e9)], "a shard count that is not a number"),
    ([Gres("gpu", jinja("gres"), 1)], "a gpu type that is not a Slurm name"),
    ([Gres("gpu", SPLIT, 1)], "a gpu type that is not a Slurm name"),
    ([Gres("gpu", TF_FILE, 1)], "a gpu type that is not a Slurm name"),
    ([Gres("gpu", "3g.40gb", 1)], None),
])
def test_unreadable_requests_are_named_without_quoting_them(gres: list[Gres], why: str | None) -> None:
    got = slurm_gres.unreadable(gres)
    assert (got is None) if why is None else (got is not None and got.startswith(why))
    assert got is None or ("{" not in got and "$" not in got)


def pending(jid: int, tres: str, **kw: Any) -> dict[str, Any]:
    return {"job_id": jid, "job_state": "PENDING", "state_reason": "Resources",
            "partition": "gpu", "node_count": 1, "tres_per_node": tres, "submit_time": 0,
            "account": "", "qos": "", "user_name": "root", "features": "", **kw}


def running(jid: int, tres: str, node: str, detail: str) -> dict[str, Any]:
    return {**pending(jid, tres), "job_state": "RUNNING", "nodes": node,
            "gres_detail": [detail], "start_time": 1}


def read(jobs: Sequence[dict[str, Any]], nodes: Sequence[dict[str, Any]] = ()) -> SchedulerReading:
    answers = {"squeue --json": json.dumps({"jobs": list(jobs)}),
               "sinfo --all": json.dumps({"nodes": list(nodes)})}

    def runner(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> str:
        return answers[" ".join(argv[:2])]

    reading = SlurmReader(SlurmConfig(), runner).read(REFS)
    assert reading.error is None
    return reading


def test_mig_and_shard_jobs_are_demand_of_the_pool_that_offers_them() -> None:
    reading = read([pending(1, "gres:gpu:3g.40gb:1"), pending(2, "gres:shard:2"),
                    pending(3, "gres:shard:4", account="inference"),
                    pending(4, "gres/shard=2"), pending(5, "gres:gpu:v100:1")])
    got = {key: [(j.id, j.gpus, j.gpu_model) for j in jobs]
           for key, jobs in reading.pending.items() if jobs}
    assert got == {"ml/mig": [("1", 0.5, None)],
                   "ml/mps": [("2", 0.5, None), ("4", 0.5, None)],
                   "ml/ts": [("3", 0.5, None)],
                   "ml/v100": [("5", 1.0, "V100")]}
    assert not reading.unserved and not reading.unattributed


def test_a_slice_no_pool_has_is_unserved_with_what_the_pools_offer() -> None:
    reading = read([pending(1, "gres:gpu:1g.10gb:1"),
                    pending(2, "gres:shard:" + "9" * 400), pending(3, f"gres:shard:{jinja('s')}:1")])
    assert not any(reading.pending.values())
    why = {u.id: (u.team, u.constraint, u.reason) for u in reading.unserved}
    assert why["1"] == ("ml", "gres gpu:1g.10gb:1", (
        "no pool's nodes offer gpu:1g.10gb:1: ml/v100 offers gpu; ml/mig offers gpu:3g.40gb; "
        "ml/mps offers gpu, shard"))  # ml/ts takes account inference only
    assert why["2"][1] == "gres (unreadable)" and "9999" not in why["2"][2]
    assert why["3"][1] == "gres (unreadable)" and "lookup" not in why["3"][2]


def test_nodes_and_running_jobs_count_slices_and_shards_at_their_share() -> None:
    jobs = [running(1, "gres:gpu:3g.40gb:1", "ml-mig-1", "gpu:3g.40gb:1(IDX:0)"),
            running(2, "gres:shard:3", "ml-mps-1", "shard:3(IDX:0)"),
            running(3, "gres:gpu:v100:2", "ml-v100-1", "gpu:v100:2(IDX:0-1)")]
    nodes = [  # Slurm 22.05's own answers (the shard count in gres_used is not the jobs')
        {"name": "ml-mig-1", "state": "mixed", "gres": "gpu:3g.40gb:16",
         "gres_used": "gpu:3g.40gb:1(IDX:0),shard:0"},
        {"name": "ml-mps-1", "state": "mixed", "gres": "gpu:t4:4,shard:t4:16",
         "gres_used": "gpu:t4:0(IDX:N/A),shard:t4:1(IDX:0)"},
        {"name": "ml-v100-1", "state": "mixed", "gres": "gpu:v100:4",
         "gres_used": "gpu:v100:2(IDX:0-1)"},
    ]
    seen = {name: (n.gpus_total, n.gpus_allocated, [(j.id, j.gpus) for j in n.jobs])
            for name, n in read(jobs, nodes).nodes.items()}
    assert seen == {"ml-mig-1": (8.0, 0.5, [("1", 0.5)]),
                    "ml-mps-1": (4.0, 0.75, [("2", 0.75)]),
                    "ml-v100-1": (4.0, 2.0, [("3", 2.0)])}


def test_formatted_output_reads_slices_and_shards_too() -> None:
    squeue = "\n".join([
        "7|gpu|PENDING|Resources|gres:gpu:3g.40gb:1|1|2026-11-30T12:00:00|N/A|||||root| mig-job",
        "8|gpu|PENDING|Resources|gres:shard:1|1|2026-11-30T12:00:00|N/A|||||root| shard-job",
    ])
    assert SQUEUE_FORMAT.count("|") == 13
    answers = {"squeue -h": squeue, "sinfo --all": ""}

    def runner(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> str:
        assert list(argv[:3]) == ["env", "TZ=UTC", "SLURM_TIME_FORMAT=standard"], argv
        return answers[" ".join(argv[3:5])]

    reading = SlurmReader(SlurmConfig(use_json=False), runner).read(REFS)
    assert {k: [(j.id, j.gpus) for j in v] for k, v in reading.pending.items() if v} == {
        "ml/mig": [("7", 0.5)], "ml/mps": [("8", 0.25)]}


# ------------------------------------------------------------ real Slurm


@pytest.mark.slow
def test_real_slurm_runs_a_mig_job_and_a_shard_job_on_nodes_advertising_them(
        tmp_path: Path) -> None:
    """slurmctld and two local slurmd whose gres.conf names fake MIG devices (nvidia-caps)
    and shards: each pending job is its pool's demand at its share of a GPU, then runs on
    a slice of the node that advertises it, is counted there, and completes."""
    if shutil.which("slurmctld") is None:
        pytest.skip("slurmctld not installed")
    nodes = [SlurmNodeSpec("ml-mig-1", gpus=1, mig_profiles=("3g.40gb", "3g.40gb")),
             SlurmNodeSpec("ml-mps-1", gpus=2, shards_per_gpu=4)]
    with SlurmCluster(tmp_path / "slurm", nodes) as cluster:
        advertised = cluster.run(["sinfo", "-h", "-N", "-o", "%N %G"], check=True).stdout
        assert sorted(advertised.split("\n")[:2]) == [
            "ml-mig-1 gpu:3g.40gb:2", "ml-mps-1 gpu:t4:2,shard:t4:8"]
        out = cluster.jobs_dir
        mig = cluster.submit("sleep 4", gpus=1, gpu_type="3g.40gb", extra=["--hold"],
                             output=f"{out}/%j.out")
        shard = cluster.submit("sleep 4", gpus=0, extra=["--hold", "--gres=shard:2"],
                               output=f"{out}/%j.out")
        reader = SlurmReader(SlurmConfig(env=cluster.env()))
        reading = reader.read(REFS)
        assert {k: [(j.id, j.gpus) for j in v] for k, v in reading.pending.items() if v} == {
            "ml/mig": [(mig, 0.5)], "ml/mps": [(shard, 0.5)]}
        cluster.run(["scontrol", "release", f"{mig},{shard}"], check=True)
        for job in (mig, shard):
            cluster.wait_job_state(job, {"RUNNING", "COMPLETED"}, timeout=30)
        on = {name: (n.gpus_total, n.gpus_allocated, [(j.id, j.gpus) for j in n.jobs])
              for name, n in reader.read(REFS).nodes.items()}
        assert on == {"ml-mig-1": (1.0, 0.5, [(mig, 0.5)]),
                      "ml-mps-1": (2.0, 0.5, [(shard, 0.5)])}
        for job in (mig, shard):
            cluster.wait_job_state(job, {"COMPLETED"}, timeout=30)
