""""predictive": the same decide() as "ours", with the pool's forecast floor in each Snapshot.

The demand history is the trace's own (GPUs its jobs held, docs/concepts/predictive.md):
the jobs before the replay window plus the window's jobs as they arrive. The model is
chosen by a backtest on the days before the window only; during the replay it is refit
each hour on the bins already replayed, never on a bin at or after the current time.
"""

from __future__ import annotations

from autoscaler.catalog import Catalog
from autoscaler.engine.settings import EngineSettings
from autoscaler.engine.warm_pool import forecast_quantile
from autoscaler.forecast.predictive import Forecaster
from autoscaler.forecast.series import DemandSeries, from_intervals
from autoscaler.model.node import FleetView
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import Pool, Predictive, TeamPolicy
from autoscaler.sim.observe import to_datetime
from autoscaler.sim.replay import Replay, SimConfig
from autoscaler.sim.strategies.engine import EngineStrategy
from autoscaler.traces import Job, Workload


def demand_series(before: list[Job], workload: Workload) -> DemandSeries:
    jobs = before + [j for j in workload.jobs if not j.carried]
    return from_intervals(((j.arrival, j.arrival + j.duration, j.gpus) for j in jobs), workload.end)


def train(settings: Predictive, workload: Workload, config: SimConfig,
          warm_quantile: float | None = None) -> Forecaster:
    """The pool's forecaster on the trace's own demand history; lead defaults to the
    replay's boot delay, the boot-to-ready time every node takes here."""
    lead = settings.lead.total_seconds() if settings.lead else config.boot_delay
    return Forecaster.train(demand_series(workload.before, workload), workload.start, settings,
                            lead, warm_quantile)


class PredictiveStrategy(EngineStrategy):
    name = "predictive"
    description = "decide() with the pool's forecast floor (predictive: mode scale)"

    def __init__(self, policy: TeamPolicy, pool: Pool, catalog: Catalog, forecaster: Forecaster,
                 interval: float = 30.0, settings: EngineSettings | None = None,
                 wake_after: float | None = None):
        super().__init__(policy, pool, catalog, interval, settings, wake_after=wake_after,
                         forecaster=forecaster)
        self.forecaster: Forecaster = forecaster
        self.key = f"{policy.team}/{pool.name}"

    @classmethod
    def for_workload(cls, policy: TeamPolicy, pool: Pool, catalog: Catalog, workload: Workload,
                     config: SimConfig) -> PredictiveStrategy:
        """The pool's ``predictive:`` settings (mode scale with defaults when it is off); lead
        defaults to the replay's boot delay, the boot-to-ready time every node takes here."""
        settings = pool.predictive if pool.predictive.mode == "scale" else Predictive(mode="scale")
        return cls(policy, pool, catalog,
                   train(settings, workload, config, forecast_quantile(pool)), config.tick,
                   wake_after=config.wake_after)

    def parameters(self) -> dict[str, object]:
        return {**super().parameters(), "model": self.forecaster.choice.model,
                "backtest_mape": self.forecaster.choice.mape, "lead_s": self.forecaster.lead_s}

    def observe(self, replay: Replay, now: float) -> tuple[FleetView, Snapshot]:
        fleet, snapshot = super().observe(replay, now)
        floor = self.forecaster.floor(now, to_datetime(now))
        if floor is not None:
            snapshot = snapshot.model_copy(update={"forecasts": {self.key: floor}})
        return fleet, snapshot
