"""A pool's predictive floor: train (choose the model by backtest), then forecast ahead.

``Forecaster.train`` backtests every model on the history it is given (the last 14 days
of it at most, as AWS predictive scaling does) and keeps the winner, or the hour-of-week
baseline when the learned model does not beat it or the history is shorter than the
policy's ``min_history``. ``floor`` re-forecasts once an hour from the bins known so far
and returns the GPUs to hold for ``[now, now + lead]``, with its reason; ``warm`` the
peak a warm pool stands ready for, at its own quantile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from threadpoolctl import threadpool_limits

from autoscaler.forecast.backtest import HORIZON, Score, backtest
from autoscaler.forecast.models import BASELINE, MODELS
from autoscaler.forecast.series import DAY_BINS, DemandSeries
from autoscaler.model.snapshot import ForecastFloor
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Predictive, percentile

BACKTEST_DAYS = 14


def one_blas_thread() -> threadpool_limits:
    """Fits are small matrix products (weeks of bins x ~33 features): BLAS threads only
    contend, and on a loaded host they made a fit 14x slower (0.8 s -> 11 s on 5 weeks)."""
    return threadpool_limits(limits=1, user_api="blas")
REFRESH_BINS = 12  # re-forecast every hour


@dataclass
class Forecaster:
    series: DemandSeries
    policy: Predictive
    lead_s: float
    choice: Score
    backtest_days: float
    # warm_pool size: forecast: its quantile, forecast beside the policy's (warm()).
    warm_quantile: float | None = None
    _cache: dict[int, np.ndarray] = field(default_factory=dict)

    @classmethod
    def train(cls, series: DemandSeries, until: float, policy: Predictive,
              lead_s: float, warm_quantile: float | None = None) -> Forecaster:
        """Choose the model on the bins before ``until`` only. ``warm_quantile``: also
        forecast that quantile, for a warm pool (``warm``)."""
        known = series.before(until)
        test = min(BACKTEST_DAYS * DAY_BINS, len(known) // 2)
        enough = len(known) * series.step >= policy.min_history.total_seconds()
        models = tuple(MODELS) if enough else (BASELINE,)
        with one_blas_thread():
            result = backtest(known, len(known) - test, models=models)
        return cls(series, policy, lead_s, result.chosen(), test / DAY_BINS, warm_quantile)

    @property
    def lead(self) -> timedelta:
        return timedelta(seconds=self.lead_s)

    @property
    def quantiles(self) -> tuple[float, ...]:
        """p50 (what MAPE scores), the policy quantile (what the floor holds) and the warm
        pool's, if any (each quantile is computed on its own: the first two do not move)."""
        warm = () if self.warm_quantile is None else (self.warm_quantile,)
        return (0.5, self.policy.quantile, *warm)

    def band(self, origin: int) -> np.ndarray | None:
        """``quantiles`` for HORIZON bins from ``origin``, shape (2 or 3, HORIZON); None: too
        little history."""
        if origin not in self._cache:
            try:
                with one_blas_thread():
                    fc = MODELS[self.choice.model](self.series.values[:origin], HORIZON,
                                                   self.quantiles)
            except ValueError:
                return None
            self._cache = {origin: fc}
        return self._cache[origin]

    def at(self, now: float) -> tuple[float, float] | None:
        """The (p50, policy quantile) forecast for the bin holding ``now``."""
        first = self.series.bin_of(now)
        if not 1 <= first <= len(self.series):
            return None
        origin = first - first % REFRESH_BINS
        band = self.band(origin)
        if band is None:
            return None
        return float(band[0, first - origin]), float(band[1, first - origin])

    def floor(self, now: float, at: datetime) -> ForecastFloor | None:
        """GPUs to hold now for the demand up to ``now + lead`` (``at``: now as a date)."""
        return self._peak(now, at, self.lead_s, 1, self.policy.quantile)

    def warm(self, now: float, at: datetime, ahead_s: float) -> ForecastFloor | None:
        """A warm pool's forecast: the peak at ``warm_quantile`` up to ``now + ahead_s``."""
        if self.warm_quantile is None:
            raise ValueError("this forecaster was trained without a warm quantile")
        return self._peak(now, at, ahead_s, 2, self.warm_quantile)

    def _peak(self, now: float, at: datetime, ahead: float, row: int,
              quantile: float) -> ForecastFloor | None:
        step = self.series.step
        first, last = self.series.bin_of(now), self.series.bin_of(now + ahead)
        if not 1 <= first <= len(self.series):
            return None  # no complete bin yet, or a time the history does not reach
        origin = first - first % REFRESH_BINS
        band = self.band(origin)
        if band is None or last - origin >= HORIZON:
            return None
        window = band[row, first - origin:last - origin + 1]
        gpus = float(np.ceil(window.max() - 1e-9))
        current = float(self.series.values[first - 1])  # the last complete bin
        cap = current + self.policy.max_extra_gpus
        start = at - timedelta(seconds=now - self.series.start_of(first))
        end = start + timedelta(seconds=(last - first + 1) * step)
        mape = f"MAPE {self.choice.mape:.0f}%" if self.choice.mape is not None else "MAPE n/a"
        why = (f"forecast {percentile(quantile)} for {start:%a %H:%M}-{end:%H:%M} is "
               f"{gpus:g} GPUs ({self.choice.model} model, {mape} over "
               f"{self.backtest_days:.0f} d; {format_duration(timedelta(seconds=ahead))} ahead)")
        if gpus > cap:
            why += (f", capped at {cap:g} (max_extra_gpus {self.policy.max_extra_gpus} above the "
                    f"{current:g} requested)")
            gpus = cap
        return ForecastFloor(gpus=gpus, reason=why)
