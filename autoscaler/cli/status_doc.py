"""The parts of the service's ``/status`` document (service/http/status.py) that
``gpu-autoscaler status`` and the demo show, typed: an answer of another shape is refused
in one line before anything is drawn, and every string is one printable line."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from autoscaler.cli.service_api import Answer, Line
from autoscaler.model.plan import Plan

Count = Annotated[int, Field(ge=0)]
Usd = Annotated[float, Field(ge=0)]


class LoopDoc(Answer):
    ticks: Count = 0
    last_tick_at: Line | None = None
    last_duration_s: float | None = None
    dry_run: bool = False
    last_error: Line | None = None
    last_error_stage: Line | None = None
    activity: list[Line] = Field(default_factory=list)


class LeaderDoc(Answer):
    is_leader: bool = False
    lease_holder: Line | None = None


class NodeDoc(Answer):
    name: Line
    instance_type: Line
    market: Line
    state: Line
    since: Line | None = None
    hourly_usd: Usd = 0.0
    reason: Line | None = None


class PoolDoc(Answer):
    nodes: Count = 0
    hourly_usd: Usd = 0.0
    states: dict[Line, Count] = Field(default_factory=dict)


class FleetDoc(Answer):
    nodes: list[NodeDoc] = Field(default_factory=list)
    pools: dict[Line, PoolDoc] = Field(default_factory=dict)
    hourly_usd: Usd = 0.0


class LastPlanDoc(Answer):
    id: int
    dry_run: bool = False
    plan: Plan


class ForecastDoc(Answer):
    mode: Line = ""
    p50_gpus: float | None = None
    quantile_gpus: float | None = None
    actual_gpus: float | None = None
    rolling_mape: float | None = None
    applied: bool = False
    floor_reason: Line | None = None
    note: Line | None = None


class SpotScoreDoc(Answer):
    cloud: Line
    region: Line
    zone: Line
    instance_types: list[Line] = Field(default_factory=list, max_length=64)
    score: Annotated[int, Field(ge=1, le=10)]
    low: bool = False


class StatusDoc(Answer):
    loop: LoopDoc  # every /status has these three: a document without them is not one
    leader: LeaderDoc
    fleet: FleetDoc
    last_plan: LastPlanDoc | None = None
    policy_errors: list[Line] = Field(default_factory=list)
    sources_missing: list[Line] = Field(default_factory=list)
    data_missing: dict[Line, Line] = Field(default_factory=dict)
    forecasts: dict[Line, ForecastDoc] = Field(default_factory=dict)
    spot_scores: list[SpotScoreDoc] = Field(default_factory=list)
