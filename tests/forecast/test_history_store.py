"""The demand history in the real fleet store (SQLite here, PostgreSQL in the slow test)
and the service's forecasts built from it."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest

from autoscaler.fleet.demand_history import STEP, DemandHistory, DemandSample, bin_start
from autoscaler.fleet.store import FleetStore
from autoscaler.forecast.history import sample_of, to_series
from autoscaler.forecast.series import DAY_BINS
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import FleetView
from autoscaler.model.snapshot import PoolObservation
from autoscaler.model.snapshot_parts import Observed
from autoscaler.service.observe import forecasts as forecasts_mod
from autoscaler.service.observe.forecasts import DEFAULT_LEAD, PoolForecasts
from tests.builders import NOW, busy, make_node, make_policy, pending
from tests.fleet.writes import create_node, transition
from tests.service import postgres

KEY = "vision/gpu"
assert NOW.weekday() == 0 and NOW.hour == 12  # a Monday noon: the tests count from it


def daily(at: datetime) -> float:
    """8 GPUs from 08:00 to 18:00 UTC every day, 1 GPU otherwise."""
    return 8.0 if 8 <= at.hour < 18 else 1.0


def seed(history: DemandHistory, end: datetime, days: int, value=daily) -> None:
    start = bin_start(end) - timedelta(days=days)
    bins = [(start + i * STEP, value(start + i * STEP)) for i in range(days * DAY_BINS)]
    history.fill(KEY, bins, source="test")


def policies(mode: str = "scale", **predictive: object) -> dict:
    return {"vision": make_policy("vision", max_nodes=10,
                                  predictive={"mode": mode, **predictive})}


def demand(gpus: float) -> Observed:
    return Observed(taken_at=NOW, pools={KEY: PoolObservation(pending=pending(gpus))})


@pytest.fixture
def store(tmp_path):
    s = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    yield s
    s.close()


def exercise_store(store: FleetStore) -> None:
    """What both backends must do: fold ticks into bins, fill, read back, prune."""
    h = DemandHistory(store, retention=timedelta(days=2))
    h.record(KEY, NOW, DemandSample(3, 1.5, 2), forecast_gpus=4.0)
    h.record(KEY, NOW + timedelta(minutes=2), DemandSample(5, 0.5, 1), forecast_gpus=9.0)
    h.record(KEY, NOW + timedelta(minutes=4), DemandSample(2, None, None))
    [b] = h.bins(KEY, NOW - timedelta(days=1))
    assert (b.start, b.requested_gpus, b.in_use_gpus, b.nodes_serving, b.forecast_gpus) == \
        (NOW, 5, 1.5, 2, 4.0)  # the largest values of the bin, the first forecast
    # Prometheus bins fill what is missing and never replace a stored bin.
    added = h.fill(KEY, [(NOW - STEP, 7.0), (NOW, 99.0), (NOW - 3 * timedelta(days=1), 1.0)])
    assert added == 2
    got = {x.start: (x.requested_gpus, x.source) for x in h.bins(KEY, NOW - timedelta(days=9))}
    assert got[NOW] == (5, "service") and got[NOW - STEP] == (7.0, "prometheus")
    assert h.prune(KEY, NOW) == 1  # the bin 3 days old is past the 2-day retention
    assert [x.start for x in h.bins(KEY, NOW - timedelta(days=9))] == [NOW - STEP, NOW]


def exercise_stale_prune(store: FleetStore) -> None:
    """Every pool's bins past the retention go, a bounded batch at a time: a pool removed
    from the policies is never refitted, so its own prune never ran again."""
    h = DemandHistory(store, retention=timedelta(days=2))
    pools = ("gone/a", "gone/b", "off/c")
    for pool in pools:
        h.fill(pool, [(NOW - timedelta(days=d), 1.0) for d in (5, 4, 3, 1)])
    assert [h.prune_stale(NOW, limit=4) for _ in range(4)] == [4, 4, 1, 0]
    assert {p: [x.start for x in h.bins(p, NOW - timedelta(days=9))] for p in pools} == {
        p: [NOW - timedelta(days=1)] for p in pools}


def test_bins_keep_the_largest_value_fill_never_overwrites_and_retention_prunes(store):
    exercise_store(store)


def test_bins_past_the_retention_go_for_every_pool_in_bounded_batches(store):
    exercise_stale_prune(store)


def test_history_survives_a_restart(tmp_path):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    first = FleetStore(url)
    seed(DemandHistory(first), NOW, days=2)
    first.close()
    again = FleetStore(url)
    try:
        hist = to_series(DemandHistory(again).bins(KEY, NOW - timedelta(days=3)), NOW)
        assert hist is not None and hist.stored == 2 * DAY_BINS
    finally:
        again.close()


pg = pytest.fixture(scope="module")(postgres.running)


@pytest.mark.slow
def test_the_history_table_works_on_postgresql(pg):
    store = FleetStore(pg.url)
    try:
        exercise_store(store)
        exercise_stale_prune(store)
        at = NOW + timedelta(hours=19, minutes=52)
        DemandHistory(store, retention=timedelta(0)).prune(KEY, at)  # start afresh
        seed(DemandHistory(store), at, days=8)
        fc = PoolForecasts(store)
        floors = fc.update(policies("scale", lead="10m"), FleetView(), demand(1), at)
        assert floors[KEY].gpus == pytest.approx(8, abs=0.5)
        assert DemandHistory(store).bins(KEY, bin_start(at))[0].forecast_gpus is not None
    finally:
        store.close()


def test_series_starts_on_monday_and_fills_gaps():
    from autoscaler.fleet.demand_history import DemandBin

    wed = NOW + timedelta(days=2)  # Wednesday 12:00
    bins = [DemandBin(wed, 4.0), DemandBin(wed + STEP, 6.0),
            DemandBin(wed + timedelta(days=1), 9.0), DemandBin(wed + timedelta(days=1, minutes=10), 2)]
    hist = to_series(bins, wed + timedelta(days=1, minutes=17))
    assert hist is not None and hist.origin == NOW - timedelta(hours=12)  # Monday 00:00
    v = hist.series.values
    first = 2 * DAY_BINS + 144  # Wednesday 12:00 is bin 720
    assert len(v) == first + DAY_BINS + 3  # complete bins only: up to Thursday 12:10
    assert v[0] == 4.0 and v[first + 1] == 6.0 and v[first + 2] == 6.0  # before: first; gap: last
    assert v[first + DAY_BINS + 1] == 6.0  # a gap takes the value a day earlier
    assert v[first + DAY_BINS + 2] == 2.0 and hist.stored == 4


def test_a_sample_is_pending_plus_running_and_none_without_scheduler_data():
    nodes = [make_node("vision-gpu-1"), make_node("vision-gpu-2", state=NodeState.BOOTSTRAPPING)]
    snap = Observed(taken_at=NOW, pools={KEY: PoolObservation(pending=pending(2, 1))},
                    nodes={"vision-gpu-1": busy(util=50, gpus=4)})
    s = sample_of(KEY, nodes, snap)
    assert s is not None and s.nodes_serving == 1
    assert s.requested_gpus == 3 + snap.nodes["vision-gpu-1"].scheduler.gpus_allocated
    assert s.in_use_gpus == pytest.approx(0.5 * snap.nodes["vision-gpu-1"].metrics.gpus_reporting)
    gone = Observed(taken_at=NOW, pools={KEY: PoolObservation(scheduler_missing="slurm down")})
    assert sample_of(KEY, nodes, gone) is None


def test_scale_mode_holds_the_forecast_ahead_of_the_morning_peak(store):
    seed(DemandHistory(store), NOW, days=21)
    fc = PoolForecasts(store)
    at = NOW + timedelta(hours=19, minutes=52)  # Tuesday 07:52: the peak starts in 8 minutes
    floors = fc.update(policies("scale", lead="10m"), FleetView(), demand(1), at)
    view = fc.views[KEY]
    assert view.model in {"hour-of-week", "ridge", "seasonal-naive"}
    assert view.p50_gpus == pytest.approx(1, abs=0.5)
    assert floors[KEY].gpus == pytest.approx(8, abs=0.5)
    assert "forecast p80 for Tue 07:50" in floors[KEY].reason
    assert view.lead_source == "policy lead" and view.lead_s == 600
    # forecast-only: the same forecast is shown, and the plan's input is not changed.
    only = PoolForecasts(store)
    assert only.update(policies("forecast-only", lead="10m"), FleetView(), demand(1), at) == {}
    assert only.views[KEY].floor is not None and "would hold" in only.views[KEY].line()
    # off: nothing is forecast, but the demand is still recorded.
    off = PoolForecasts(store)
    off.update(policies("off"), FleetView(), demand(1), at)
    assert off.views == {} and off.actual == {KEY: 1.0}


def test_refit_is_bounded_and_the_series_follows_the_stored_bins(store, monkeypatch):
    seed(DemandHistory(store), NOW, days=3)
    trains = []
    real = forecasts_mod.Forecaster.train
    monkeypatch.setattr(forecasts_mod.Forecaster, "train",
                        classmethod(lambda cls, *a, **k: trains.append(a[1]) or real(*a, **k)))
    fc = PoolForecasts(store)
    for minute in range(0, 120, 1):  # two hours of ticks every minute
        fc.update(policies(), FleetView(), demand(daily(NOW + timedelta(minutes=minute))),
                  NOW + timedelta(minutes=minute))
    assert len(trains) == 1
    hist = fc._fits[KEY].history
    assert hist is not None and hist.stored == 3 * DAY_BINS + 23  # re-read once per bin
    assert len(hist.series) == hist.series.bin_of(hist.seconds(NOW + timedelta(minutes=119)))
    assert hist.rolling_mape() is not None and fc.views[KEY].rolling_mape is not None
    fc.update(policies(), FleetView(), demand(1), NOW + timedelta(hours=6))
    fc.update(policies(quantile=0.9), FleetView(), demand(1), NOW + timedelta(hours=6, minutes=1))
    assert len(trains) == 3  # after REFIT, and when the policy changes


def test_rolling_mape_scores_the_recorded_forecasts(store):
    seed(DemandHistory(store), NOW, days=14)
    fc = PoolForecasts(store)
    for minute in range(0, 24 * 60, 5):  # a day of ticks, demand as the pattern says
        at = NOW + timedelta(minutes=minute)
        fc.update(policies("forecast-only"), FleetView(), demand(daily(at)), at)
    rows = DemandHistory(store).bins(KEY, NOW)
    assert sum(r.forecast_gpus is not None for r in rows) == len(rows) == DAY_BINS
    before = fc.views[KEY].rolling_mape
    assert before is not None and before < 1
    # Demand off the pattern for an hour shows in the MAPE (12 of 300 bins 73% off).
    for minute in range(0, 60, 5):
        at = NOW + timedelta(days=1, minutes=minute)
        fc.update(policies("forecast-only"), FleetView(), demand(30), at)
    fc.update(policies("forecast-only"), FleetView(), demand(30), NOW + timedelta(days=1, hours=1))
    assert fc.views[KEY].rolling_mape == pytest.approx(before + 12 * (30 - 8) / 30 * 100 / 300, abs=0.5)


def test_lead_defaults_to_the_measured_boot_to_ready(store):
    seed(DemandHistory(store), NOW, days=2)
    fc = PoolForecasts(store)
    fc.update(policies(), FleetView(), demand(1), NOW)
    assert fc.views[KEY].lead_s == DEFAULT_LEAD.total_seconds()
    for i, boot in enumerate((300, 420, 900)):
        t0 = NOW - timedelta(hours=3 - i)
        node = create_node(store, cooldown="up", now=t0)
        transition(store, node.name, NodeState.PROVISIONING, t0, "test")
        transition(store, node.name, NodeState.BOOTSTRAPPING, t0 + timedelta(seconds=60), "test")
        transition(store, node.name, NodeState.READY, t0 + timedelta(seconds=boot), "test")
    fresh = PoolForecasts(store)
    fresh.update(policies(), FleetView(), demand(1), NOW)
    assert fresh.views[KEY].lead_s == 420
    assert fresh.views[KEY].lead_source == "median boot-to-ready of 3 node(s)"


def test_the_forecast_p50_for_a_flat_week_is_flat(store):
    seed(DemandHistory(store), NOW, days=8, value=lambda t: 4.0)
    fc = PoolForecasts(store)
    fc.update(policies(), FleetView(), demand(4), NOW)
    assert np.isclose(fc.views[KEY].p50_gpus, 4.0)


def test_one_pool_is_fitted_per_tick_the_others_wait_their_turn(store):
    two = {"vision": make_policy("vision", pools=[
        {"name": n, "cloud": "aws", "region": "us-east-1", "instance_types": ["p3.2xlarge"],
         "max_nodes": 4, "predictive": {"mode": "forecast-only"}} for n in ("gpu", "big")])}
    h = DemandHistory(store)
    seed(h, NOW, days=2)
    h.fill("vision/big", [(b.start, b.requested_gpus) for b in h.bins(KEY, NOW - timedelta(days=3))])
    fc = PoolForecasts(store)
    fc.update(two, FleetView(), Observed(taken_at=NOW), NOW)
    assert fc.views[KEY].p50_gpus is not None
    assert fc.views["vision/big"].note == "the model is fitted at a later tick (one fit per tick)"
    fc.update(two, FleetView(), Observed(taken_at=NOW), NOW + timedelta(seconds=30))
    assert fc.views["vision/big"].p50_gpus is not None
