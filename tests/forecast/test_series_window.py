"""A demand series is bounded by its window whatever its timestamps say: a sample at
t = 3e11 s (a clock jump), NaN and infinite values are dropped and counted before any bin is
allocated, and the forecaster still gives a result."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.fleet.demand_history import DemandBin
from autoscaler.forecast.backtest import backtest
from autoscaler.forecast.history import to_series
from autoscaler.forecast.predictive import Forecaster
from autoscaler.forecast.series import DAY_BINS, MAX_BINS, STEP, WEEK_BINS, clip, from_intervals
from autoscaler.policy.models import Predictive
from tests.forecast.test_forecast_cli import DAY
from tests.sim.conftest import pod, write_pods

JUMP = 3e11  # seconds: a clock ~9,500 years ahead
MB = 1 << 20


def wave(days: int) -> list[tuple[float, float, float]]:
    return [(d * DAY + 8 * 3600, d * DAY + 12 * 3600, 8.0) for d in range(days)]


def test_a_clock_jump_neither_allocates_its_span_nor_hides_the_real_days():
    hostile = [*wave(10), (JUMP, JUMP + 600, 4.0), (float("nan"), 5.0, 1.0),
               (100.0, float("inf"), 1.0), (200.0, 300.0, float("inf")), (300.0, 400.0, -3.0)]
    tracemalloc.start()
    try:
        series = from_intervals(hostile, end=JUMP + 600)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * MB
    assert len(series) <= MAX_BINS
    assert series.first == 0 and len(series) == 10 * DAY_BINS - 12 * 12  # the 10 days, to the last job's end
    assert series.values[8 * 12] == 8.0  # day 0 08:00 is still there
    assert series.dropped == {"not finite": 3, "out of range": 1, "outside the window": 1}
    result = backtest(series.values, len(series) // 2)
    assert result.chosen().origins > 0


def test_the_newest_window_is_kept_and_stays_on_the_hour_of_week_axis():
    old = [(-JUMP, -JUMP + 60, 2.0)]
    weeks = 20  # longer than the 13-week window
    series = from_intervals([*old, *wave(weeks * 7)], end=weeks * 7 * DAY)
    assert len(series) <= MAX_BINS and series.first % WEEK_BINS == 0 and series.first > 0
    at = (weeks * 7 - 1) * DAY + 9 * 3600  # the last day, 09:00
    assert series.values[series.bin_of(at)] == 8.0
    assert series.start_of(series.bin_of(at)) == at // STEP * STEP


def test_a_duty_cycle_trace_with_a_clock_jump_is_backtested(tmp_path):
    trace = tmp_path / "duty.csv"
    rows = ["value,timestamp_anon,container_ip"]
    rows += [f"{50 if (t // 3600) % 24 < 12 else 0},{1000 + t},c0" for t in range(0, 4 * DAY, 300)]
    rows += [f"50,{JUMP:.0f},c0", f"50,{-JUMP:.0f},c1"]
    trace.write_text("\n".join(rows) + "\n")
    result = CliRunner().invoke(app, ["forecast", "backtest", "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    assert "2 sample(s) outside the window" in result.output and "chosen=" in result.output


def test_a_pod_list_with_a_job_deleted_at_3e11_is_backtested(tmp_path):
    pods = [pod(f"d{d}-{i}", d * DAY + 8 * 3600, d * DAY + 8 * 3600, d * DAY + 12 * 3600)
            for d in range(4) for i in range(8)]
    pods += [pod("jump", JUMP, JUMP, JUMP + 600), pod("forever", DAY, DAY, JUMP)]
    trace = write_pods(tmp_path / "pods.csv", pods)
    result = CliRunner().invoke(app, ["forecast", "backtest", "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    assert "1 sample(s) outside the window" in result.output


def test_stored_bins_far_ahead_or_not_finite_stay_out_of_the_service_series():
    until = datetime(2026, 3, 2, 12, tzinfo=UTC)
    start = until - timedelta(days=8)
    bins = [DemandBin(start + timedelta(minutes=5 * i), 4.0) for i in range(8 * DAY_BINS)]
    bins += [DemandBin(datetime(9000, 1, 1, tzinfo=UTC), 4.0),
             DemandBin(datetime(1971, 1, 1, tzinfo=UTC), 4.0),
             DemandBin(start + timedelta(days=1, minutes=2), float("nan")),
             DemandBin(start + timedelta(days=1, minutes=3), float("inf"), forecast_gpus=float("nan"))]
    history = to_series(bins, until)
    assert history is not None and len(history.series) <= MAX_BINS
    assert history.dropped == 4 and np.all(history.series.values == 4.0)
    fc = Forecaster.train(history.series, history.seconds(until), Predictive(mode="scale"), 600)
    assert fc.at(history.seconds(until)) is not None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(), st.floats(), st.floats()), max_size=30),
       st.floats())
def test_any_intervals_make_a_bounded_finite_series(intervals, end):
    series = from_intervals(intervals, end)
    assert 1 <= len(series) <= MAX_BINS
    assert np.all(np.isfinite(series.values)) and np.all(series.values >= 0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(), st.floats()), max_size=40))
def test_clip_keeps_one_window_of_finite_sane_samples(samples):
    times = np.array([t for t, _ in samples], dtype=float)
    values = np.array([v for _, v in samples], dtype=float)
    kept = clip(times, values, span=7 * DAY)
    # The window's end is its start plus the span, exactly; hi - lo may round off by an ulp
    # (hypothesis found lo = 1492352.520940981, where it is 604799.9999999998).
    assert kept.hi == kept.lo + 7 * DAY
    if kept.keep.any():
        assert np.all((times[kept.keep] >= kept.lo) & (times[kept.keep] < kept.hi))
        assert np.all(np.isfinite(values[kept.keep]))
    assert int(kept.keep.sum()) + sum(kept.dropped.values()) == len(samples)
