"""Forecast models. Each takes the history up to an origin (bin ``len(h)`` is the first
forecast bin) and returns quantile forecasts, shape ``(len(quantiles), horizon)``.

* ``seasonal_naive``: the value one season ago (a week once two weeks are known, else a
  day), plus the quantiles of the seasonal differences: the baseline to beat.
* ``hour_of_week``: quantiles of the values seen in the same hour-of-week slot over the
  last four weeks (same hour of day while under two weeks are known).
* ``ridge``: a learned seasonal regression: hour-of-day and day-of-week indicators, the
  value a day and a week before the target and the level of the last hour before the
  origin, fitted by ridge least squares on the last four weeks for each origin; quantiles
  from its own in-sample residuals. statsforecast/statsmodels are not installed here, and
  a least-squares fit costs milliseconds per origin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from autoscaler.forecast.series import DAY_BINS, WEEK_BINS

HOUR_BINS = 12
LOOKBACK = 4 * WEEK_BINS
Model = Callable[[np.ndarray, int, Sequence[float]], np.ndarray]


def _season(n: int) -> int:
    return WEEK_BINS if n >= 2 * WEEK_BINS else DAY_BINS


def _with_residuals(point: np.ndarray, residuals: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    shift = np.quantile(residuals, qs) if len(residuals) else np.zeros(len(qs))
    out: np.ndarray = np.maximum(0.0, point[None, :] + np.asarray(shift)[:, None])
    return out


def seasonal_naive(h: np.ndarray, horizon: int, qs: Sequence[float]) -> np.ndarray:
    n, period = len(h), _season(len(h))
    if n < period:
        raise ValueError(f"seasonal naive needs {period} bins, has {n}")
    point = h[n - period + np.arange(horizon) % period]
    recent = h[-LOOKBACK:]
    return _with_residuals(point, recent[period:] - recent[:-period], qs)


def hour_of_week(h: np.ndarray, horizon: int, qs: Sequence[float]) -> np.ndarray:
    n = len(h)
    period = _season(n)
    if n < DAY_BINS:
        raise ValueError(f"hour-of-week needs {DAY_BINS} bins, has {n}")
    first = max(0, n - LOOKBACK)
    idx = np.arange(first, n)
    slots = (idx % period) // HOUR_BINS
    targets = ((n + np.arange(horizon)) % period) // HOUR_BINS
    out = np.empty((len(qs), horizon))
    cache: dict[int, np.ndarray] = {}
    for j, slot in enumerate(targets.tolist()):
        if slot not in cache:
            cache[slot] = np.quantile(h[first:][slots == slot], qs)
        out[:, j] = cache[slot]
    return out


def _features(h: np.ndarray, t: np.ndarray, level: np.ndarray, weekly: bool) -> np.ndarray:
    hod = (t % DAY_BINS) // HOUR_BINS
    dow = (t % WEEK_BINS) // DAY_BINS
    cols = [np.ones(len(t)), level, h[t - DAY_BINS]]
    if weekly:
        cols.append(h[t - WEEK_BINS])
    return np.column_stack(cols + [hod == k for k in range(1, 24)] + [dow == k for k in range(1, 7)])


def ridge(h: np.ndarray, horizon: int, qs: Sequence[float], lam: float = 1.0) -> np.ndarray:
    n = len(h)
    if horizon > DAY_BINS:
        raise ValueError("ridge forecasts at most one day ahead (its lag is a day)")
    weekly = n >= 2 * WEEK_BINS
    lag = WEEK_BINS if weekly else DAY_BINS
    if n < lag + 2 * DAY_BINS:
        raise ValueError(f"ridge needs {lag + 2 * DAY_BINS} bins, has {n}")
    # Training targets: each bin t, with the level of the hour before an origin up to
    # ``horizon`` bins earlier (the level a forecast from that origin would have seen).
    t = np.arange(max(lag + HOUR_BINS + horizon, n - LOOKBACK), n)
    csum = np.concatenate([[0.0], np.cumsum(h)])
    origin = t - (t - (n - horizon)) % horizon
    level = (csum[origin] - csum[origin - HOUR_BINS]) / HOUR_BINS
    x = _features(h, t, level, weekly)
    coef = np.linalg.solve(x.T @ x + lam * np.eye(x.shape[1]), x.T @ h[t])
    residuals = h[t] - x @ coef
    future = n + np.arange(horizon)
    ext = np.concatenate([h, np.zeros(horizon)])
    now_level = np.full(horizon, (csum[n] - csum[n - HOUR_BINS]) / HOUR_BINS)
    point = _features(ext, future, now_level, weekly) @ coef
    return _with_residuals(point, residuals, qs)


MODELS: dict[str, Model] = {"seasonal-naive": seasonal_naive, "hour-of-week": hour_of_week,
                            "ridge": ridge}
BASELINE = "hour-of-week"
