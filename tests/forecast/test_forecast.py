"""The forecaster: demand series, models, backtest choice, the floor and its reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from autoscaler.forecast.backtest import backtest, mape, pinball
from autoscaler.forecast.models import MODELS
from autoscaler.forecast.predictive import Forecaster
from autoscaler.forecast.series import DAY_BINS, STEP, WEEK_BINS, DemandSeries, from_intervals
from autoscaler.policy.models import Predictive


def weekly(weeks: int, noise: float = 1.0, seed: int = 0) -> np.ndarray:
    """Weekdays 08:00-18:00 at 20 GPUs, otherwise 4; weekends 2; Gaussian noise."""
    t = np.arange(weeks * WEEK_BINS)
    hour = (t % DAY_BINS) / 12
    weekday = (t % WEEK_BINS) // DAY_BINS < 5
    base = np.where(weekday & (hour >= 8) & (hour < 18), 20.0, np.where(weekday, 4.0, 2.0))
    return np.maximum(0, base + np.random.default_rng(seed).normal(0, noise, len(t)))


def test_intervals_count_in_every_bin_they_overlap():
    s = from_intervals([(0, 600, 2), (290, 310, 1), (900, 1e9, 0.5)], end=1200)
    assert list(s.values) == [3, 3, 0, 0.5]
    assert list(s.before(650)) == [3, 3]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_forecasts_quantiles_in_order(name):
    fc = MODELS[name](weekly(3), 72, (0.5, 0.8, 0.9))
    assert fc.shape == (3, 72)
    assert (fc >= 0).all() and (np.diff(fc, axis=0) >= -1e-9).all()


def test_models_refuse_too_little_history():
    with pytest.raises(ValueError, match="needs"):
        MODELS["ridge"](weekly(1)[:DAY_BINS], 72, (0.5,))


def test_on_a_weekly_pattern_the_learned_model_beats_seasonal_naive():
    series = weekly(5)
    result = backtest(series, 3 * WEEK_BINS)
    naive, chosen = result.scores["seasonal-naive"], result.chosen()
    assert chosen.model != "seasonal-naive"
    assert chosen.mape is not None and naive.mape is not None and chosen.mape < naive.mape
    assert chosen.pinball is not None and naive.pinball is not None and chosen.pinball < naive.pinball
    assert chosen.origins == (2 * WEEK_BINS - 72) // 72 + 1


def test_scores():
    actual = np.array([10.0, 0.0, 20.0])
    assert mape(actual, np.array([11.0, 5.0, 18.0])) == pytest.approx(10.0)
    assert mape(np.zeros(3), np.ones(3)) is None
    # Under-forecasting at p90 costs 0.9 per GPU, over-forecasting 0.1.
    assert pinball(np.array([10.0]), np.array([[8.0]]), (0.9,)) == pytest.approx(1.8)
    assert pinball(np.array([10.0]), np.array([[12.0]]), (0.9,)) == pytest.approx(0.2)


def test_short_history_falls_back_to_the_hour_of_week_baseline():
    series = DemandSeries(weekly(2))
    f = Forecaster.train(series, 4 * DAY_BINS * STEP, Predictive(mode="scale"), 240)
    assert f.choice.model == "hour-of-week"  # 4 days < min_history 7 d


def test_floor_covers_now_to_lead_with_a_reason_and_the_cap():
    series = DemandSeries(weekly(4, noise=0.1))
    policy = Predictive(mode="scale", quantile=0.8, max_extra_gpus=64)
    f = Forecaster.train(series, 3 * WEEK_BINS * STEP, policy, lead_s=600)
    # Monday of week 4, 07:58: the 08:00 ramp is inside the 10-minute lead.
    now = (3 * WEEK_BINS + 8 * 12) * STEP - 120
    at = datetime(2024, 1, 22, 7, 58, tzinfo=UTC)
    floor = f.floor(now, at)
    assert floor is not None and floor.gpus >= 19
    assert floor.reason.startswith(f"forecast p80 for Mon 07:55-08:10 is {floor.gpus:g} GPUs (")
    assert "MAPE" in floor.reason and "over 10 d; 10m ahead)" in floor.reason  # half of 3 weeks
    capped = Forecaster.train(series, 3 * WEEK_BINS * STEP,
                              policy.model_copy(update={"max_extra_gpus": 2}), 600).floor(now, at)
    assert capped is not None and capped.gpus == pytest.approx(series.values[int(now // STEP) - 1] + 2)
    assert "capped" in capped.reason
    assert f.floor(5 * WEEK_BINS * STEP, at + timedelta(weeks=1)) is None  # past the history
    with pytest.raises(ValueError, match="without a warm quantile"):
        f.warm(now, at, 3600)


def test_a_warm_pool_forecasts_its_own_quantile_an_hour_ahead_and_the_floor_does_not_move():
    series = DemandSeries(weekly(4, noise=0.1))
    policy = Predictive(mode="scale", quantile=0.8, max_extra_gpus=64)
    plain = Forecaster.train(series, 3 * WEEK_BINS * STEP, policy, lead_s=600)
    f = Forecaster.train(series, 3 * WEEK_BINS * STEP, policy, lead_s=600, warm_quantile=0.99)
    now = (3 * WEEK_BINS + 8 * 12) * STEP - 1920  # Monday 07:28
    at = datetime(2024, 1, 22, 7, 28, tzinfo=UTC)
    origin = int(now // STEP) - int(now // STEP) % 12
    assert np.array_equal(f.band(origin)[:2], plain.band(origin))  # quantiles computed alone
    assert f.floor(now, at) == plain.floor(now, at)
    lead, hour = f.floor(now, at), f.warm(now, at, 3600)
    # the hour holds the 08:00 ramp the 10-minute lead does not reach yet
    assert hour is not None and lead is not None and hour.gpus >= 19 > lead.gpus
    assert hour.reason.startswith("forecast p99 for Mon 07:25-08:30 is")
    assert "1h ahead)" in hour.reason
    at_p80 = Forecaster.train(series, 3 * WEEK_BINS * STEP, policy, 600, warm_quantile=0.8)
    low = at_p80.warm(now, at, 3600)
    assert low is not None and hour.gpus >= low.gpus and low.reason.startswith("forecast p80 ")


def test_no_forecast_without_a_day_of_history():
    f = Forecaster.train(DemandSeries(weekly(1)[:100]), 100 * STEP, Predictive(mode="scale"), 240)
    assert f.floor(50 * STEP, datetime(2024, 1, 1, tzinfo=UTC)) is None
