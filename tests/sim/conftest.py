"""Builders for simulator tests: synthetic traces in tmp_path, policies, replays."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.model.lifecycle import NodeState
from autoscaler.policy.models import Market, Pool, TeamPolicy
from autoscaler.sim.cluster import SimJob, SimNode
from autoscaler.sim.replay import Replay, SimConfig
from autoscaler.sim.spot import SpotMarket
from autoscaler.sim.strategies.base import Strategy
from autoscaler.traces import Job, Workload

CATALOG = default_catalog()
POD_HEADER = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
              "creation_time", "deletion_time", "scheduled_time"]
# No jitter and short delays keep hand-computed expectations exact.
EXACT = SimConfig(tick=30, boot_delay=240, boot_jitter=0.0, sample_every=300)


def pod(name: str, created: float, scheduled: float | None, deleted: float, num_gpu: int = 1,
        milli: int = 1000, spec: str = "", qos: str = "LS", phase: str = "Running") -> dict[str, Any]:
    return {"name": name, "cpu_milli": 4000, "memory_mib": 8192, "num_gpu": num_gpu, "gpu_milli": milli,
            "gpu_spec": spec, "qos": qos, "pod_phase": phase, "creation_time": created,
            "deletion_time": deleted, "scheduled_time": "" if scheduled is None else scheduled}


def write_pods(path: Path, pods: Iterable[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=POD_HEADER)
        writer.writeheader()
        writer.writerows(pods)
    return path


def write_spot(path: Path, data: list[int], gap: float = 60) -> Path:
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))
    return path


def policy(team: str = "sim", **pool_kw: Any) -> TeamPolicy:
    pool = {
        "name": "v100", "cloud": "aws", "region": "us-east-1",
        "instance_types": ["p3.2xlarge"], "max_nodes": 20,
        "capacity": {"on_demand_base": 0, "spot_percent": 0},
        # util never exceeds 100%, so no utilization-driven launches unless a test asks
        "scale_up": {"gpu_utilization_above": 100, "max_step": 10},
        "scale_down": {"idle_for": "10m", "cooldown": "1s"},
    }
    pool.update(pool_kw)
    return TeamPolicy.model_validate({"team": team, "pools": [pool]})


def workload(jobs: list[Job], end: float = 86400.0, start: float = 0.0) -> Workload:
    return Workload(jobs=sorted(jobs, key=lambda j: (j.arrival, j.id)), start=start, end=end, trace_end=end)


class Idle(Strategy):
    """A strategy that does nothing: tests drive the cluster by hand."""

    name = "idle"
    interval = 3600.0

    def tick(self, replay: Replay, now: float) -> None:
        return None


def replay_for(jobs: list[Job], strategy: Strategy | None = None, pool: Pool | None = None,
               config: SimConfig = EXACT, spot: SpotMarket | None = None, end: float = 86400.0) -> Replay:
    return Replay(workload(jobs, end=end), pool or policy().pools[0], CATALOG, config, strategy or Idle(),
                  spot=spot)


def ready_node(replay: Replay, type_name: str = "p3.2xlarge", now: float = 0.0,
               market: Market = Market.ON_DEMAND, zone: str | None = None) -> SimNode:
    """A node that is already serving (bypasses the boot delay)."""
    itype = CATALOG.get("aws", type_name)
    node = replay.cluster.new_node(itype, market, zone, replay.hourly(itype, market), now)
    replay.cluster.move(node, NodeState.BOOTSTRAPPING, now)
    replay.cluster.move(node, NodeState.READY, now)
    return node


def run_job(replay: Replay, job: Job, node: SimNode, now: float) -> SimJob:
    sim = next(j for j in replay.jobs if j.job.id == job.id)
    replay.cluster.arrive(sim, now)
    replay.cluster.schedule(now)
    if sim.node is not node:
        raise AssertionError(f"{job.id} went to {sim.node and sim.node.name}, not {node.name}")
    return sim


@pytest.fixture
def pods_csv(tmp_path: Path) -> Path:
    """A small pod list with every kind of row the loader must handle."""
    day = 86400
    return write_pods(tmp_path / "pods.csv", [
        pod("early-long", 0, 0, 3 * day + 500),                         # carried into day 3
        pod("early-done", 100, 100, 2 * day),                           # ends before day 3
        pod("cpu", 3 * day + 10, 3 * day + 10, 3 * day + 900, num_gpu=0, milli=0),
        pod("share", 3 * day + 60, 3 * day + 62, 3 * day + 662, milli=460),
        pod("eight", 3 * day + 120, 3 * day + 180, 3 * day + 3780, num_gpu=8),
        pod("pending", 3 * day + 200, None, 3 * day + 290, phase="Pending"),
        pod("spec", 3 * day + 300, 3 * day + 300, 3 * day + 900, spec="V100M16|V100M32"),
        pod("late", 4 * day + 5, 4 * day + 5, 4 * day + 100),
        pod("zero", 3 * day + 400, 3 * day + 400, 3 * day + 400),
    ])
