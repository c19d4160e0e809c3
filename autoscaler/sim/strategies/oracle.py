"""The oracle lower bound: the window's demand GPU-hours at the cheapest $/GPU-h.

No boot delay, no waiting, no idle or fragmented GPU, no interruption: every job runs from
its arrival for its trace run time on exactly its GPU share, priced at the cheapest
$/GPU-h among the pool's instance types in any market the policy allows (spot when
``spot_percent`` > 0). No strategy can pay less for the same work.
"""

from __future__ import annotations

from autoscaler.catalog import Catalog
from autoscaler.policy.models import Pool
from autoscaler.sim.results import StrategyResult
from autoscaler.sim.series import Series
from autoscaler.traces import Workload


def cheapest_per_gpu_hour(pool: Pool, catalog: Catalog) -> tuple[float, str]:
    best: tuple[float, str] | None = None
    for name in pool.instance_types:
        itype = catalog.get(pool.cloud.value, name)
        prices = [("on-demand", itype.on_demand_usd)]
        if pool.capacity.spot_percent > 0:
            prices.append(("spot", itype.spot_usd))
        for market, usd in prices:
            if usd is not None and (best is None or usd / itype.gpus < best[0]):
                best = (usd / itype.gpus, f"{name} {market}")
    if best is None:
        raise ValueError(f"no priced instance type in pool {pool.name}")
    return best


def demand_series(workload: Workload, usd_per_gpu_hour: float, every: float) -> Series:
    """The oracle's fleet over time: exactly the demand, and its cumulative cost."""
    edges = sorted([(j.arrival, j.gpus) for j in workload.jobs]
                   + [(j.arrival + j.duration, -j.gpus) for j in workload.jobs])
    series = Series()
    level = gpu_seconds = 0.0
    last = workload.start
    i = 0
    t = workload.start
    while True:
        while i < len(edges) and edges[i][0] <= t:
            gpu_seconds += level * (edges[i][0] - last)
            level, last = level + edges[i][1], edges[i][0]
            i += 1
        gpu_seconds += level * (t - last)
        last = t
        for col in (series.demand_gpus, series.running_gpus, series.capacity_gpus, series.ready_gpus):
            col.append(max(0.0, level))
        series.t.append(t)
        series.cost_usd.append(gpu_seconds / 3600 * usd_per_gpu_hour)
        series.pending_jobs.append(0)
        if t >= workload.end:
            return series
        t = min(t + every, workload.end)


def oracle(workload: Workload, pool: Pool, catalog: Catalog, every: float = 300.0) -> StrategyResult:
    per_gpu, what = cheapest_per_gpu_hour(pool, catalog)
    demand = workload.demand_gpu_hours()
    jobs = len(workload.jobs)
    return StrategyResult(
        name="oracle", description="demand GPU-hours at the cheapest $/GPU-h, no delays, no waste",
        cost_usd=demand * per_gpu, gpu_hours_paid=demand, gpu_hours_used=demand,
        gpu_hours_delivered=demand,
        jobs=jobs, jobs_started=jobs,
        jobs_finished=sum(1 for j in workload.jobs if j.arrival + j.duration <= workload.end),
        parameters={"usd_per_gpu_hour": round(per_gpu, 4), "priced_as": what},
        series=demand_series(workload, per_gpu, every),
    )
