"""Builders for engine inputs, so tests state only what matters to them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import FleetView, Node, PoolHistory
from autoscaler.model.snapshot import (
    CapacityError,
    GpuMetrics,
    NodeObservation,
    PendingJob,
    PoolObservation,
    RunningJob,
    SchedulerNode,
    Snapshot,
)
from autoscaler.policy.models import Market, TeamPolicy

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def make_policy(team: str = "vision", priority: str = "medium", quota: dict[str, Any] | None = None,
                pools: list[dict[str, Any]] | None = None, **pool_kw: Any) -> TeamPolicy:
    pools = pools if pools is not None else [make_pool_dict(**pool_kw)]
    return TeamPolicy.model_validate(
        {"team": team, "priority": priority, "quota": quota or {}, "pools": pools}
    )


def make_pool_dict(name: str = "gpu", cloud: str = "aws", region: str = "us-east-1",
                   instance_types: list[str] | None = None, max_nodes: int = 10,
                   min_nodes: int = 0, **kw: Any) -> dict[str, Any]:
    return {
        "name": name, "cloud": cloud, "region": region,
        "instance_types": instance_types or ["p3.2xlarge", "p3.8xlarge"],
        "max_nodes": max_nodes, "min_nodes": min_nodes,
        # Neutral defaults for tests: no base, no fallback surprises.
        "capacity": kw.pop("capacity", {"on_demand_base": 0, "spot_percent": 0}),
        **kw,
    }


def make_node(name: str, team: str = "vision", pool: str = "gpu", *, state: NodeState = NodeState.READY,
              instance_type: str = "p3.2xlarge", market: Market = Market.ON_DEMAND,
              age: timedelta = timedelta(hours=2), ready_for: timedelta | None = timedelta(hours=1),
              zone: str | None = None, cloud: str = "aws", region: str = "us-east-1",
              **kw: Any) -> Node:
    ready_at = NOW - ready_for if ready_for is not None and state is not NodeState.REQUESTED else None
    return Node(
        name=name, team=team, pool=pool, cloud=cloud, region=region, zone=zone,
        instance_type=instance_type, market=market, state=state,
        state_since=kw.pop("state_since", NOW - timedelta(minutes=30)), created_at=NOW - age,
        ready_at=ready_at, **kw,
    )


def busy(util: float = 95.0, gpus: float = 1, jobs: int = 1) -> NodeObservation:
    return NodeObservation(
        metrics=GpuMetrics(util_mean=util, util_max_idle_window=min(100.0, util + 3),
                           util_max=util, gpus_reporting=int(gpus), sample_age_s=5),
        scheduler=SchedulerNode(
            state="allocated", gpus_total=gpus, gpus_allocated=gpus,
            jobs=[RunningJob(id=f"j{i}", gpus=gpus / max(jobs, 1), started_at=NOW - timedelta(hours=1))
                  for i in range(jobs)],
        ),
    )


def idle(util: float = 1.0, gpus: float = 1) -> NodeObservation:
    return NodeObservation(
        metrics=GpuMetrics(util_mean=util, util_max_idle_window=util, util_max=util,
                           gpus_reporting=int(gpus), sample_age_s=5),
        scheduler=SchedulerNode(state="idle", gpus_total=gpus, gpus_allocated=0),
    )


def pending(*gpus: float, reason: str = "Resources", model: str | None = None) -> list[PendingJob]:
    return [PendingJob(id=f"p{i}", gpus=g, reason=reason, gpu_model=model) for i, g in enumerate(gpus)]


def snapshot(nodes: dict[str, NodeObservation] | None = None,
             pools: dict[str, PoolObservation] | None = None, **kw: Any) -> Snapshot:
    return Snapshot(taken_at=NOW, nodes=nodes or {}, pools=pools or {}, **kw)


def fleet(*nodes: Node, history: dict[str, PoolHistory] | None = None) -> FleetView:
    return FleetView(nodes=list(nodes), history=history or {})


def spot_refusal(zone: str | None, itype: str = "p3.2xlarge", *, region: str = "us-east-1",
                 ago: timedelta = timedelta(minutes=1)) -> CapacityError:
    """A spot launch of ``itype`` in ``zone`` refused for want of capacity, ``ago`` before NOW."""
    return CapacityError(cloud="aws", region=region, instance_type=itype, zone=zone,
                         market=Market.SPOT, code="InsufficientInstanceCapacity", at=NOW - ago)
