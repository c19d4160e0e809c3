"""Time series of one replay, sampled every ``sample_every`` seconds, for report and plots."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autoscaler.model.lifecycle import SIM_BILLABLE, NodeState

if TYPE_CHECKING:
    from autoscaler.sim.replay import Replay


@dataclass
class Series:
    t: list[float] = field(default_factory=list)
    demand_gpus: list[float] = field(default_factory=list)  # shares asked by arrived, unfinished jobs
    running_gpus: list[float] = field(default_factory=list)  # shares of running jobs
    capacity_gpus: list[float] = field(default_factory=list)  # GPUs being paid for
    ready_gpus: list[float] = field(default_factory=list)  # GPUs that can take jobs
    ready_nodes: list[int] = field(default_factory=list)  # nodes that can take jobs
    cost_usd: list[float] = field(default_factory=list)  # cumulative
    pending_jobs: list[int] = field(default_factory=list)  # jobs waiting for GPUs

    def record(self, replay: Replay, now: float) -> None:
        cluster = replay.cluster
        running = cluster.running_gpus()
        capacity = ready = ready_nodes = 0
        for node in cluster.nodes.values():
            if node.state in SIM_BILLABLE and node.reason != "capacity-error":
                capacity += node.gpus
            if node.state is NodeState.READY:
                ready += node.gpus
                ready_nodes += 1
        open_usd, _ = cluster.open_bills(now)
        self.t.append(now)
        self.demand_gpus.append(running + cluster.pending_gpus())
        self.running_gpus.append(running)
        self.capacity_gpus.append(capacity)
        self.ready_gpus.append(ready)
        self.ready_nodes.append(ready_nodes)
        self.cost_usd.append(cluster.totals.cost_usd + open_usd)
        self.pending_jobs.append(cluster.pending_count())

    def as_dict(self) -> dict[str, list[float]]:
        return {k: [round(v, 4) for v in getattr(self, k)] for k in
                ("t", "demand_gpus", "running_gpus", "capacity_gpus", "ready_gpus", "ready_nodes",
                 "cost_usd", "pending_jobs")}
