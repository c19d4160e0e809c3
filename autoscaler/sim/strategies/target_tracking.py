"""Target tracking on measured GPU utilization, like an AWS auto-scaling group policy.

One instance type: the smallest of the pool that fits the trace's largest job (an ASG has
one launch template). The metric is the mean GPU utilization of in-service instances past
their warm-up (300 s, the default instance warm-up), one datapoint a minute, target 70%.
As the CloudWatch alarms that target tracking creates: scale out when the last 3
datapoints are above the target, to ``ceil(in_service x metric / target)`` plus instances
still warming up; scale in when the last 15 datapoints are below 90% of the target, to
``ceil(in_service x metric / target)``, at most once per 300 s (scale-in cooldown), never
below ``min_capacity`` (1: with no instance there is no metric to scale out on).
Scale-in removes in-flight instances first, then the instances with the fewest allocated
GPUs (generous: a real ASG picks by zone balance and age); their jobs are requeued.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass

from autoscaler.catalog import Catalog
from autoscaler.model.lifecycle import IN_FLIGHT, NodeState
from autoscaler.policy.models import Pool
from autoscaler.sim.cluster import SimNode
from autoscaler.sim.replay import Replay
from autoscaler.sim.strategies.base import Strategy
from autoscaler.sim.strategies.common import Buyer, Limits, active_nodes, mix_for, reap
from autoscaler.traces import Workload

S = NodeState


@dataclass(frozen=True)
class TtSettings:
    target: float = 70.0
    period: float = 60.0
    scale_out_points: int = 3
    scale_in_points: int = 15
    scale_in_ratio: float = 0.9
    warmup: float = 300.0
    scale_in_cooldown: float = 300.0
    min_capacity: int = 1


def fitting_type(workload: Workload, pool: Pool, catalog: Catalog) -> str:
    biggest = max((j.gpus for j in workload.jobs), default=1.0)
    types = sorted((catalog.get(pool.cloud.value, n) for n in pool.instance_types),
                   key=lambda t: (t.gpus, t.on_demand_usd or 0))
    for itype in types:
        if itype.gpus >= math.ceil(biggest - 1e-9):
            return itype.name
    return types[-1].name


class TargetTracking(Strategy):
    name = "target_tracking"
    description = "AWS-style target tracking on measured GPU utilization (target 70%)"

    def __init__(self, type_name: str, quota_gpus: int | None = None, settings: TtSettings | None = None):
        self.settings = settings or TtSettings()
        self.interval = self.settings.period
        self.type_name, self.quota_gpus = type_name, quota_gpus
        self.buyer = Buyer()
        self.points: deque[float] = deque(maxlen=max(self.settings.scale_in_points,
                                                     self.settings.scale_out_points))
        self.desired = self.settings.min_capacity
        self.last_scale_in: float | None = None

    def capacity_error(self, replay: Replay, node: SimNode, now: float) -> None:
        self.buyer.refused(replay, node, now)

    def parameters(self) -> dict[str, object]:
        return {**asdict(self.settings), "instance_type": self.type_name}

    def begin(self, replay: Replay, now: float) -> None:
        self._converge(replay, now)

    def tick(self, replay: Replay, now: float) -> None:
        reap(replay, now)
        s = self.settings
        in_service = [n for n in replay.cluster.serving()
                      if n.ready_at is not None and now - n.ready_at >= s.warmup]
        warming = len(active_nodes(replay)) - len(in_service)
        if in_service:
            self.points.append(sum(replay.node_util(n, now) for n in in_service) / len(in_service))
        else:
            self.points.clear()  # INSUFFICIENT_DATA: the alarms do not fire
        last = list(self.points)
        if len(last) >= s.scale_out_points and all(p > s.target for p in last[-s.scale_out_points:]):
            metric = sum(last[-s.scale_out_points:]) / s.scale_out_points
            self.desired = max(self.desired, math.ceil(len(in_service) * metric / s.target) + warming)
        elif (len(last) >= s.scale_in_points
              and all(p < s.target * s.scale_in_ratio for p in last[-s.scale_in_points:])
              and (self.last_scale_in is None or now - self.last_scale_in >= s.scale_in_cooldown)):
            metric = sum(last[-s.scale_in_points:]) / s.scale_in_points
            wanted = max(s.min_capacity, math.ceil(len(in_service) * metric / s.target) + warming)
            if wanted < self.desired:
                self.desired, self.last_scale_in = wanted, now
                self.points.clear()  # the alarm re-evaluates on fresh datapoints
        self._converge(replay, now)

    def _converge(self, replay: Replay, now: float) -> None:
        nodes = active_nodes(replay)
        gpus = replay.itype(self.type_name).gpus
        cap = len(nodes) + Limits.of(replay, self.quota_gpus).room(nodes, gpus)
        self.desired = max(self.settings.min_capacity, min(self.desired, cap))
        if len(nodes) < self.desired:
            mix = mix_for(replay)
            for _ in range(self.desired - len(nodes)):
                if self.buyer.buy(replay, self.type_name, mix, now) is None:
                    break
        elif len(nodes) > self.desired:
            order = sorted(nodes, key=lambda n: (n.state not in IN_FLIGHT, n.allocated, -n.created_at))
            for node in order[: len(nodes) - self.desired]:
                replay.terminate(node, now, "scale-in")
