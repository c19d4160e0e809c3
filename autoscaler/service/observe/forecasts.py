"""Predictive capacity in the running service (docs/concepts/predictive.md).

Every tick, for every pool: its demand sample goes into the store's history
(``fleet/demand_history.py``). For pools with ``predictive.mode`` ``forecast-only`` or
``scale``:

* the model is chosen and fitted (``Forecaster.train``: a backtest over the last 14 days)
  at most every ``REFIT`` (6 h, as AWS predictive scaling re-forecasts), when the policy's
  predictive settings change, and at the first tick of a process; between refits the
  chosen model re-forecasts hourly from the bins stored so far (the bins since the last
  read are read from the store when a bin completes). One pool is fitted per tick
  (``MAX_FITS_PER_TICK``); a pool waiting for its first fit has no forecast meanwhile;
* the forecast for the current bin (p50 and the policy quantile) is exported and shown in
  /status and the preview, and the p50 is stored with the bin (the rolling MAPE over the
  last 7 days compares it with what the bin held);
* in mode ``scale`` only, the floor (``Forecaster.floor``) is returned, the forecast part of
  the tick's Snapshot (``Snapshot.forecasts``), where ``decide()`` holds it;
  ``forecast-only`` never changes a plan.

Lead time: the policy's ``lead``, else the median boot-to-ready (launch request to READY)
of the pool's last 20 nodes that became READY, else ``DEFAULT_LEAD`` (10 minutes, a GPU
node that installs its driver) until one has.

At the first tick a pool is seen, its history is topped up from Prometheus
(``signals/demand.py``) when a loader is given: bins the store lacks, never replacing one
(a failed attempt is retried every ``WARM_RETRY``, 10 minutes, until one succeeds).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from autoscaler.engine.warm_pool import WARM_AHEAD, forecast_quantile
from autoscaler.fleet.demand_history import STEP, DemandBin, DemandHistory, bin_start
from autoscaler.fleet.queries import recent_boots
from autoscaler.fleet.store import FleetStore
from autoscaler.forecast.history import History, sample_of, to_series
from autoscaler.forecast.predictive import Forecaster
from autoscaler.model.node import FleetView
from autoscaler.model.snapshot import ForecastFloor
from autoscaler.model.snapshot_parts import Observed
from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Pool, Predictive, TeamPolicy, pool_key

log = logging.getLogger(__name__)
REFIT = timedelta(hours=6)
DEFAULT_LEAD = timedelta(minutes=10)
BOOT_SAMPLES = 20
# A fit backtests 14 days (0.06-0.8 s per pool on 1-5 weeks of bins, one BLAS thread, a
# loaded 2-core host): one per tick,
# so refits of many pools spread over ticks instead of stretching one.
MAX_FITS_PER_TICK = 1
WARM_RETRY = timedelta(minutes=10)

WarmLoader = Callable[[list[str], datetime], Mapping[str, list[tuple[datetime, float]]]]


@dataclass(frozen=True)
class PoolForecast:
    """What /status, the preview and the metrics show of one pool's forecast."""

    pool: str
    mode: str
    quantile: float
    lead_s: float
    lead_source: str
    history_bins: int
    actual_gpus: float | None = None  # requested in the current bin so far
    p50_gpus: float | None = None  # forecast for the current bin
    quantile_gpus: float | None = None
    model: str | None = None
    backtest_mape: float | None = None
    rolling_mape: float | None = None
    floor: ForecastFloor | None = None
    # warm_pool size: forecast: the forecast over the warm pool's horizon (WARM_AHEAD)
    warm_floor: ForecastFloor | None = None
    note: str = ""  # why there is no forecast

    def line(self) -> str:
        head = f"forecast {self.pool} ({self.mode})"
        if self.p50_gpus is None or self.quantile_gpus is None:
            return f"{head}: no forecast yet: {self.note}"
        mape = f"{self.rolling_mape:.0f}%" if self.rolling_mape is not None else "n/a"
        text = (f"{head}: p50 {self.p50_gpus:.1f} / p{self.quantile * 100:.0f} "
                f"{self.quantile_gpus:.1f} GPUs this bin, actual "
                f"{self.actual_gpus if self.actual_gpus is not None else 'n/a'} "
                f"({self.model} model, rolling MAPE {mape}; lead "
                f"{format_duration(timedelta(seconds=self.lead_s))}, {self.lead_source})")
        if self.floor is not None:
            held = "holds" if self.mode == "scale" else "would hold"
            text += f"; {held} {self.floor.gpus:g} GPUs: {self.floor.reason}"
        return text

    def json(self) -> dict[str, Any]:
        return {"mode": self.mode, "quantile": self.quantile, "model": self.model,
                "p50_gpus": self.p50_gpus, "quantile_gpus": self.quantile_gpus,
                "actual_gpus": self.actual_gpus, "backtest_mape": self.backtest_mape,
                "rolling_mape": self.rolling_mape, "lead_s": self.lead_s,
                "lead_source": self.lead_source, "history_bins": self.history_bins,
                "floor_gpus": self.floor.gpus if self.floor else None,
                "floor_reason": self.floor.reason if self.floor else None,
                "applied": self.mode == "scale" and self.floor is not None,
                "note": self.note, "line": self.line()}


@dataclass
class _Fit:
    settings: Predictive
    warm_quantile: float | None  # warm_pool size: forecast's quantile, fitted beside
    lead_s: float
    lead_source: str
    trained_at: datetime
    forecaster: Forecaster | None
    history: History | None
    bin_at: datetime  # the bin the history was read up to (exclusive)
    rows: list[DemandBin]  # the stored bins read so far
    waiting: bool = False  # not fitted yet: other pools took this tick's fit

    @property
    def wanted(self) -> tuple[Predictive, float | None]:
        return self.settings, self.warm_quantile


class PoolForecasts:
    def __init__(self, store: FleetStore, warm: WarmLoader | None = None):
        self.store, self.warm = store, warm
        self.history = DemandHistory(store)
        self._fits: dict[str, _Fit] = {}
        self._warmed: set[str] = set()
        self._warm_retry_at: datetime | None = None
        self._budget = MAX_FITS_PER_TICK
        self.views: dict[str, PoolForecast] = {}
        self.actual: dict[str, float] = {}  # pool -> requested GPUs this tick

    def update(self, policies: Mapping[str, TeamPolicy], fleet: FleetView, observed: Observed,
               now: datetime, record: bool = True) -> dict[str, ForecastFloor]:
        """Record every pool's demand, forecast the predictive ones; returns the floors of
        the pools in mode ``scale``. ``record=False`` reads only."""
        pools = {pool_key(t, p.name): p for t, pol in policies.items() for p in pol.pools}
        # A pool gone from the policies keeps nothing here: a fit holds weeks of bins.
        for gone in self._fits.keys() - pools.keys():
            del self._fits[gone]
        self._warmed &= pools.keys()
        self._budget = MAX_FITS_PER_TICK
        if record:
            self._warm_start([k for k in pools if k not in self._warmed], now)
        floors, views, actual, samples = {}, {}, {}, {}
        for key, pool in pools.items():
            nodes = [n for n in fleet.nodes if n.pool_key == key]
            sample = sample_of(key, nodes, observed)
            if sample is not None:
                actual[key] = sample.requested_gpus
            view = self._forecast(key, pool, now, actual.get(key)) \
                if pool.predictive.mode != "off" else None
            if sample is not None:
                samples[key] = (sample, view.p50_gpus if view is not None else None)
            if view is None:
                continue
            views[key] = view
            if view.mode == "scale" and view.floor is not None:
                floors[key] = view.floor
        if record:
            self.history.record_all(now, samples)
        self.views, self.actual = views, actual
        return floors

    def _warm_start(self, keys: list[str], now: datetime) -> None:
        """Top the pools' history up from Prometheus once per process; a failed attempt is
        retried after WARM_RETRY (meanwhile the pools forecast from the store alone)."""
        if not keys:
            return
        if self.warm is None:
            self._warmed.update(keys)
            return
        if self._warm_retry_at is not None and now < self._warm_retry_at:
            return
        try:
            loaded = self.warm(keys, now)
        except Exception as exc:  # a warm start is a convenience: start from the store
            self._warm_retry_at = now + WARM_RETRY
            log.warning("demand history from Prometheus not loaded (next try at %s): %s",
                        f"{self._warm_retry_at:%H:%M}", exc)
            return
        self._warmed.update(keys)
        for key, bins in loaded.items():
            added = self.history.fill(key, bins)
            log.info("demand history of %s: %d bins loaded from Prometheus", key, added)
            if added:
                self._fits.pop(key, None)  # refit on the longer history

    def _forecast(self, key: str, pool: Pool, now: datetime,
                  actual: float | None) -> PoolForecast:
        fit = self._fit(key, pool, now)
        view = PoolForecast(key, pool.predictive.mode, pool.predictive.quantile, fit.lead_s,
                            fit.lead_source, fit.history.stored if fit.history else 0,
                            actual_gpus=actual)
        fc, hist = fit.forecaster, fit.history
        if fit.waiting:
            return _with(view, note="the model is fitted at a later tick (one fit per tick)")
        if fc is None or hist is None:
            return _with(view, note="no demand history stored yet")
        band = fc.at(hist.seconds(now))
        if band is None:
            return _with(view, model=fc.choice.model, note=f"{hist.stored} bins of history; "
                         "the model needs a day (288 bins)")
        return _with(view, p50_gpus=round(band[0], 3), quantile_gpus=round(band[1], 3),
                     model=fc.choice.model, backtest_mape=fc.choice.mape,
                     rolling_mape=hist.rolling_mape(), floor=fc.floor(hist.seconds(now), now),
                     warm_floor=fc.warm(hist.seconds(now), now, WARM_AHEAD.total_seconds())
                     if fc.warm_quantile is not None else None)

    def _fit(self, key: str, pool: Pool, now: datetime) -> _Fit:
        """The pool's fitted model, refit when due; its history re-read once per bin."""
        fit, current = self._fits.get(key), bin_start(now)
        wanted = (pool.predictive, forecast_quantile(pool))
        due = (fit is None or fit.wanted != wanted or now - fit.trained_at >= REFIT
               or now < fit.trained_at)
        if due and self._budget > 0:
            self._budget -= 1
            return self._train(key, *wanted, now)
        if fit is None or fit.wanted != wanted:
            return _Fit(*wanted, 0.0, "not fitted yet", now, None, None, current, [],
                        waiting=True)
        if current > fit.bin_at:
            # Only the bins since the last read (the last one read may have been partial).
            since = fit.rows[-1].start if fit.rows else now - self.history.retention
            # Never past the current bin: a row written while the clock ran ahead would
            # hold every later read at its start.
            fit.rows = [b for b in fit.rows if b.start < since] + self.history.bins(
                key, since, current + STEP)
            fit.history, fit.bin_at = to_series(fit.rows, now), current
            if fit.forecaster is not None and fit.history is not None:
                fit.forecaster.series = fit.history.series
        return fit

    def _train(self, key: str, settings: Predictive, warm_quantile: float | None,
               now: datetime) -> _Fit:
        self.history.prune(key, now)
        lead_s, source = self._lead(key, settings)
        rows = self.history.bins(key, now - self.history.retention, bin_start(now) + STEP)
        hist = to_series(rows, now)
        fc = None
        if hist is not None:
            fc = Forecaster.train(hist.series, hist.seconds(now), settings, lead_s, warm_quantile)
            log.info("forecast model of %s: %s (backtest MAPE %s) on %d stored bins%s", key,
                     fc.choice.model, fc.choice.mape, hist.stored,
                     f" ({hist.dropped} outside the window or not a demand)" if hist.dropped else "")
        fit = self._fits[key] = _Fit(settings, warm_quantile, lead_s, source, now, fc, hist,
                                     bin_start(now), rows)
        return fit

    def _lead(self, key: str, settings: Predictive) -> tuple[float, str]:
        if settings.lead is not None:
            return settings.lead.total_seconds(), "policy lead"
        boots = measured_boots(self.store, key)
        if boots:
            return statistics.median(boots), f"median boot-to-ready of {len(boots)} node(s)"
        return DEFAULT_LEAD.total_seconds(), "default: no node of the pool has been READY yet"


def measured_boots(store: FleetStore, key: str) -> list[float]:
    """Seconds from launch request to READY of the pool's newest nodes that got there."""
    return [max(0.0, boot.seconds) for boot in recent_boots(store, key, BOOT_SAMPLES)]


def _with(view: PoolForecast, **changes: Any) -> PoolForecast:
    return replace(view, **changes)
