"""Fleet-wide engine settings that are not part of any one team's policy."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.policy.models import Priority


class EngineSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_gpus: int | None = Field(None, ge=0, description="Global GPU cap across all teams.")
    max_hourly_usd: float | None = Field(None, ge=0, description="Global $/h cap.")
    drain_removed_pools: bool = Field(
        False,
        description="Drain nodes of pools whose policy was removed. Off by default so that a "
        "deleted or renamed file never drains a team by accident.",
    )
    removed_pool_drain_percent: int = Field(
        20, ge=0, le=100, description="With drain_removed_pools: the share of a removed pool's "
        "nodes that may drain at once (at least 1), like a pool's max_draining_percent.")
    removed_pool_drains_per_tick: int = Field(
        10, ge=1, description="With drain_removed_pools: removed-pool nodes that may start "
        "leaving per tick, fleet-wide.")
    preempt_lower_priority: bool = Field(
        True,
        description="When the global cap blocks a higher-priority team's pending jobs, drain "
        "lower-priority capacity (spot first) to make room.",
    )
    long_job_release_exempt: frozenset[Priority] = Field(
        frozenset(), description="Priorities whose teams' jobs past max_job_runtime are only "
        "reported, even when their pool's lifetime.action is release (e.g. [high]).")
    max_unready_percent: float = Field(
        45, ge=0, le=100, description="Replacing broken nodes stops while more than this share "
        "of the READY fleet looks broken (and more than ok_unready_count): so many at once "
        "more likely means the observer is wrong (Cluster Autoscaler's "
        "max-total-unready-percentage).")
    ok_unready_count: int = Field(
        3, ge=0, description="This many broken nodes are always replaced, whatever their share "
        "(Cluster Autoscaler's ok-total-unready-count).")
    silent_min_reporting: int = Field(
        3, ge=1, description="A node without GPU metrics counts as silent (and is replaced) only "
        "while at least this many other READY nodes report fresh metrics; fewer means "
        "Prometheus or the exporters are down for everyone, which only freezes scale-down.")
