"""From what the service observes to the forecaster's input, and back.

* ``sample_of``: one tick's demand for a pool from what the signals observed (pending +
  running GPUs); None when the pool's scheduler data is missing (a zero would be a lie
  the forecast learns from).
* ``to_series``: stored bins -> a ``DemandSeries`` whose bin 0 is the Monday 00:00 UTC at or
  before the first bin (the models read hour-of-week from the bin index). Bins without a
  row (the service was down) take the stored value a day earlier, else the last value
  before them; the bins of the first week before the first row take the first
  value. Only complete bins (before ``until``'s bin) of the ``WINDOW`` before it are in the
  series, whatever else the store holds (a bin written while the clock was years ahead);
  bins whose value is not finite or not in [0, MAX_GPUS] are dropped and counted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from autoscaler.fleet.demand_history import STEP, DemandBin, DemandSample, bin_start
from autoscaler.forecast.backtest import mape
from autoscaler.forecast.series import DAY_BINS, MAX_GPUS, WINDOW, DemandSeries
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.snapshot_parts import Observed


def sample_of(key: str, nodes: Sequence[Node], observed: Observed) -> DemandSample | None:
    pool = observed.pools.get(key)
    if pool is not None and pool.scheduler_missing:
        return None
    pending = sum(j.gpus * j.nodes for j in pool.pending) if pool is not None else 0.0
    running, busy, seen_busy, ready = 0.0, 0.0, False, 0
    for node in nodes:
        obs = observed.nodes.get(node.name)
        ready += node.state is NodeState.READY
        if obs is None:
            continue
        if obs.scheduler is not None:
            running += obs.scheduler.gpus_allocated
        m = obs.metrics
        if m is not None and m.util_mean is not None and not obs.metrics_missing:
            busy, seen_busy = busy + m.util_mean / 100 * m.gpus_reporting, True
    return DemandSample(requested_gpus=round(pending + running, 3),
                        in_use_gpus=round(busy, 3) if seen_busy else None, nodes_serving=ready)


def week_start(at: datetime) -> datetime:
    """Monday 00:00 UTC of ``at``'s week."""
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday())


@dataclass(frozen=True)
class History:
    """A pool's stored history as the forecaster reads it."""

    origin: datetime  # the start of bin 0 (a Monday 00:00 UTC)
    series: DemandSeries
    forecasts: np.ndarray  # p50 forecast made for each bin before it started (NaN: none)
    stored: int  # bins that had a row (the rest were filled)
    dropped: int = 0  # rows left out: outside the window, or a value that is not a demand

    def seconds(self, at: datetime) -> float:
        """``at`` on the series' time axis."""
        return (at - self.origin).total_seconds()

    def rolling_mape(self, bins: int = 7 * DAY_BINS) -> float | None:
        """MAPE (%) of the recorded p50 forecasts over the last ``bins`` complete bins."""
        actual, fc = self.series.values[-bins:], self.forecasts[-bins:]
        known = ~np.isnan(fc)
        return mape(actual[known], fc[known]) if known.any() else None


def to_series(bins: Sequence[DemandBin], until: datetime) -> History | None:
    step = STEP.total_seconds()
    end = bin_start(until)
    rows = [b for b in bins if end - timedelta(seconds=WINDOW) <= b.start < end
            and math.isfinite(b.requested_gpus) and 0 <= b.requested_gpus <= MAX_GPUS]
    if not rows:
        return None
    origin = week_start(min(b.start for b in rows))
    n = int((end - origin).total_seconds() // step)
    values, forecasts = np.full(n, np.nan), np.full(n, np.nan)
    for b in rows:
        i = int((b.start - origin).total_seconds() // step)
        values[i] = b.requested_gpus
        fc = b.forecast_gpus
        forecasts[i] = fc if fc is not None and math.isfinite(fc) else np.nan
    known = ~np.isnan(values)
    first = int(np.argmax(known))
    values[:first] = values[first]
    for i in (np.flatnonzero(~known[first:]) + first).tolist():
        day_before = i - DAY_BINS
        values[i] = values[day_before] if day_before >= 0 and known[day_before] else values[i - 1]
    return History(origin, DemandSeries(values, step), forecasts, int(known.sum()),
                   sum(1 for b in bins if b.start != end) - len(rows))
