"""Per-strategy results of a replay: cost, GPU-hours, waits, interruptions, actions.

Definitions (docs/internals/simulator.md):

* cost: every node's $/h x the time from its launch request to its termination (or the end
  of the window); refused launches cost nothing.
* GPU-hours paid: GPUs x billed hours. Used: GPU shares x hours jobs held them (work later
  lost to a kill included). Lost: share x hours redone after kills. Fleet utilization:
  used / paid.
* wait: the usual queueing delay, from a job's arrival to its first start, for jobs that
  arrived inside the window; a job never started counts the time until the end of the
  window (a lower bound). Percentiles are over jobs.
* wait_total: all the time a job spent pending, requeues after kills included (what a
  job that is interrupted again and again adds up to).
* jobs interrupted: runs killed (spot reclaim, drain timeout, scale-in/eviction).
* delivered: GPU-hours of job progress made inside the window (share x run time done,
  work redone after kills not counted twice); the oracle delivers the whole demand.
  Carried: demand the window held that was not delivered (pushed past its end by waits,
  outages and kills). Cost per delivered GPU-hour is what the work done cost.
* refused launches: launch attempts the cloud refused (one per node), for every strategy
  the same way; never billed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoscaler.sim.cluster import SimJob
from autoscaler.sim.replay import Replay
from autoscaler.sim.series import Series


@dataclass
class StrategyResult:
    name: str
    description: str = ""
    cost_usd: float = 0.0
    gpu_hours_paid: float = 0.0
    gpu_hours_used: float = 0.0
    gpu_hours_lost: float = 0.0
    gpu_hours_delivered: float = 0.0
    gpu_hours_carried: float = 0.0
    pending_jobs_peak: int = 0
    gpu_hours_paid_by_market: dict[str, float] = field(default_factory=dict)
    wait_p50_s: float = 0.0
    wait_p95_s: float = 0.0
    wait_p99_s: float = 0.0
    wait_mean_s: float = 0.0
    wait_total_p50_s: float = 0.0
    wait_total_p95_s: float = 0.0
    wait_total_p99_s: float = 0.0
    # How many waits the wait percentiles are taken over: the jobs that arrived in the
    # window (carried ones excluded). Days 0-100 of the default pod list hold 2-4 a
    # 20-day window, where a "p95" is the largest of them.
    jobs_waited: int = 0
    jobs: int = 0
    jobs_started: int = 0
    jobs_finished: int = 0
    jobs_never_started: int = 0
    jobs_interrupted: int = 0
    kills_by_cause: dict[str, int] = field(default_factory=dict)
    gpu_hours_lost_by_cause: dict[str, float] = field(default_factory=dict)
    moves_to_spot: int = 0  # fallback on-demand nodes moved to a READY spot replacement
    spot_interruptions: int = 0
    launches: int = 0
    failed_launches: int = 0
    terminations: int = 0
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    parameters: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    series: Series | None = None

    @property
    def cost_per_delivered(self) -> float | None:
        return self.cost_usd / self.gpu_hours_delivered if self.gpu_hours_delivered > 0 else None

    @property
    def delivered_share(self) -> float:
        demand = self.gpu_hours_delivered + self.gpu_hours_carried
        return self.gpu_hours_delivered / demand if demand > 0 else 1.0

    @property
    def on_demand_share(self) -> float:
        """On-demand share of the paid GPU-hours."""
        paid = sum(self.gpu_hours_paid_by_market.values())
        return self.gpu_hours_paid_by_market.get("on-demand", 0.0) / paid if paid > 0 else 0.0

    @property
    def utilization(self) -> float:
        return self.gpu_hours_used / self.gpu_hours_paid if self.gpu_hours_paid > 0 else 0.0

    def as_dict(self, with_series: bool = False) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "series"}
        for key, value in out.items():
            if isinstance(value, float):
                out[key] = round(value, 3)
        out["utilization"] = round(self.utilization, 4)
        out["on_demand_share"] = round(self.on_demand_share, 4)
        out["delivered_share"] = round(self.delivered_share, 4)
        per = self.cost_per_delivered
        out["cost_per_delivered_gpu_hour"] = None if per is None else round(per, 4)
        if with_series and self.series is not None:
            out["series"] = self.series.as_dict()
        return out


def percentiles(values: list[float]) -> tuple[float, float, float, float]:
    if not values:
        return 0.0, 0.0, 0.0, 0.0
    p50, p95, p99 = np.percentile(np.asarray(values), [50, 95, 99])
    return float(p50), float(p95), float(p99), float(np.mean(values))


def _progress(job: SimJob, end: float) -> float:
    """Seconds of the job's run time done by ``end`` (its last checkpoint's work if killed)."""
    if job.state == "done":
        return job.job.duration
    ran = end - job.run_start if job.state == "running" else 0.0
    return job.job.duration - job.remaining + ran


def summarize(replay: Replay) -> StrategyResult:
    end, cluster = replay.end, replay.cluster
    open_usd, open_gpu_s = cluster.open_bills(end)
    waits: list[float] = []
    pending_totals: list[float] = []
    used = lost = progress = 0.0
    started = finished = never = 0
    for job in replay.jobs:
        held = job.gpu_seconds + (job.gpus * (end - job.run_start) if job.state == "running" else 0.0)
        used += held
        lost += job.lost_seconds
        progress += job.gpus * _progress(job, end)
        started += job.first_start is not None
        finished += job.state == "done"
        never += job.state != "future" and job.first_start is None
        if job.job.carried or job.state == "future":
            continue
        waits.append((job.first_start if job.first_start is not None else end) - job.job.arrival)
        pending_totals.append(job.wait + (end - job.pending_since if job.state == "pending" else 0.0))
    p50, p95, p99, mean = percentiles(waits)
    t50, t95, t99, _ = percentiles(pending_totals)
    strategy = replay.strategy
    totals = cluster.totals
    return StrategyResult(
        name=strategy.name, description=strategy.description,
        cost_usd=totals.cost_usd + open_usd,
        gpu_hours_paid=(totals.gpu_seconds_paid + sum(open_gpu_s.values())) / 3600,
        gpu_hours_paid_by_market={
            k: round((totals.gpu_seconds_by_market.get(k, 0.0) + open_gpu_s.get(k, 0.0)) / 3600, 3)
            for k in sorted(set(totals.gpu_seconds_by_market) | set(open_gpu_s))},
        gpu_hours_used=used / 3600, gpu_hours_lost=lost / 3600, gpu_hours_delivered=progress / 3600,
        gpu_hours_carried=max(0.0, replay.workload.demand_gpu_hours() - progress / 3600),
        pending_jobs_peak=max(replay.series.pending_jobs, default=0),
        wait_p50_s=p50, wait_p95_s=p95, wait_p99_s=p99, wait_mean_s=mean,
        wait_total_p50_s=t50, wait_total_p95_s=t95, wait_total_p99_s=t99, jobs_waited=len(waits),
        jobs=len(replay.jobs), jobs_started=started, jobs_finished=finished, jobs_never_started=never,
        jobs_interrupted=sum(totals.kills.values()), kills_by_cause=dict(sorted(totals.kills.items())),
        gpu_hours_lost_by_cause={k: round(v / 3600, 3) for k, v in sorted(totals.lost_gpu_seconds.items())},
        moves_to_spot=totals.moves_to_spot,
        spot_interruptions=replay.stats.interruptions, launches=totals.launches,
        failed_launches=totals.failed_launches, terminations=totals.terminations,
        wall_seconds=replay.stats.wall_seconds, cpu_seconds=replay.stats.cpu_seconds,
        parameters=strategy.parameters(),
        extra=dict(replay.stats.extra), series=replay.series,
    )
