"""Rolling-origin backtests: every model forecasts the next hours from each origin, using
only the bins before it, and is scored against what happened.

MAPE is over bins whose actual demand is at least one GPU (a percentage of zero is
undefined, and an empty pool's error is seen in the pinball loss). Pinball loss is the
mean over the quantiles, in GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from autoscaler.forecast.models import BASELINE, MODELS
from autoscaler.forecast.series import DAY_BINS

QUANTILES = (0.5, 0.8, 0.9)
HORIZON = 6 * 12  # 6 h of 5-minute bins: AWS predictive scaling re-forecasts every 6 h
MIN_ACTUAL = 1.0


@dataclass
class Score:
    model: str
    mape: float | None = None  # percent
    pinball: float | None = None  # GPUs
    origins: int = 0
    error: str = ""


@dataclass
class Backtest:
    scores: dict[str, Score] = field(default_factory=dict)
    train_bins: int = 0
    test_bins: int = 0

    def chosen(self) -> Score:
        """The model with the lowest MAPE, if it beats the hour-of-week baseline; else the
        baseline (and seasonal naive if even the baseline could not run)."""
        base = self.scores.get(BASELINE)
        ok = [s for s in self.scores.values() if s.mape is not None]
        if not ok:
            return base or Score(BASELINE, error="no model could run")
        best = min(ok, key=lambda s: s.mape or 0.0)
        if base is not None and base.mape is not None and best.mape is not None \
                and best.mape >= base.mape:
            return base
        return best


def pinball(actual: np.ndarray, forecast: np.ndarray, qs: Sequence[float]) -> float:
    diff = actual[None, :] - forecast
    q = np.asarray(qs)[:, None]
    return float(np.mean(np.maximum(q * diff, (q - 1) * diff)))


def mape(actual: np.ndarray, point: np.ndarray) -> float | None:
    mask = actual >= MIN_ACTUAL
    if not mask.any():
        return None
    return float(100 * np.mean(np.abs(actual[mask] - point[mask]) / actual[mask]))


def backtest(values: np.ndarray, train_bins: int, *, horizon: int = HORIZON,
             every: int = HORIZON, qs: Sequence[float] = QUANTILES,
             models: Sequence[str] = tuple(MODELS)) -> Backtest:
    """Origins every ``every`` bins from ``train_bins`` to the end of ``values``."""
    if 0.5 not in qs:
        qs = (0.5, *qs)
    mid = list(qs).index(0.5)
    origins = range(train_bins, len(values) - horizon + 1, every)
    out = Backtest(train_bins=train_bins, test_bins=max(0, len(values) - train_bins))
    for name in models:
        actual_all, point_all, loss, score = [], [], [], Score(name)
        for origin in origins:
            try:
                fc = MODELS[name](values[:origin], horizon, qs)
            except ValueError as exc:
                score.error = str(exc)
                break
            actual = values[origin:origin + horizon]
            actual_all.append(actual)
            point_all.append(fc[mid])
            loss.append(pinball(actual, fc, qs))
            score.origins += 1
        if score.origins and not score.error:
            score.mape = mape(np.concatenate(actual_all), np.concatenate(point_all))
            score.pinball = float(np.mean(loss))
        out.scores[name] = score
    return out


def days(bins: int) -> float:
    return bins / DAY_BINS
