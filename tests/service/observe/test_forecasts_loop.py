"""Predictive capacity through the service loop: the tick records the demand history in
the real SQLite store, the forecast floor reaches decide() in mode scale, and the forecast
shows in /status, the preview lines and /metrics in both modes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from autoscaler.fleet.demand_history import STEP, DemandHistory, bin_start
from autoscaler.forecast.series import DAY_BINS
from autoscaler.model.plan import Launch
from autoscaler.model.snapshot import PoolObservation
from autoscaler.service.http.status import build_status
from autoscaler.service.observe.forecasts import PoolForecasts
from tests.builders import NOW, pending
from tests.service.service_fakes import make_loop, write_policy

KEY = "vision/train"


def daily(at) -> float:
    return 8.0 if 8 <= at.hour < 18 else 1.0


def kit_for(tmp_path, mode: str):
    write_policy(tmp_path / "policies", "vision", name="train", max_nodes=10,
                 predictive={"mode": mode, "lead": "10m"})
    kit = make_loop(tmp_path)
    kit.loop.forecasts = PoolForecasts(kit.store)
    start = bin_start(NOW) - timedelta(days=14)
    DemandHistory(kit.store).fill(KEY, [(start + i * STEP, daily(start + i * STEP))
                                        for i in range(14 * DAY_BINS)])
    kit.signals.pools = {KEY: PoolObservation(pending=pending(1))}
    return kit


@pytest.fixture(params=["scale", "forecast-only"])
def kit(tmp_path, request):
    k = kit_for(tmp_path, request.param)
    yield k
    k.store.close()


def test_the_tick_records_demand_and_reports_the_forecast(kit):
    report = kit.loop.tick()
    assert report.error is None
    mode = kit.loop.policies()["vision"].pools[0].predictive.mode
    [row] = DemandHistory(kit.store).bins(KEY, bin_start(NOW))
    assert row.requested_gpus == 1 and row.forecast_gpus == pytest.approx(8, abs=0.5)
    floor_launches = [a for a in report.plan.actions
                      if isinstance(a, Launch) and "forecast p80" in a.reason]
    if mode == "scale":  # the floor launches ahead of demand, with the forecast's reason
        assert floor_launches and all(a.trigger == "floor" for a in floor_launches)
        assert "is 8 GPUs (" in floor_launches[0].reason
        assert "model, MAPE 0% over 7 d; 10m ahead): 8 node(s)" in floor_launches[0].reason
    else:  # forecast-only never changes the plan
        assert floor_launches == []
    status = build_status(kit.store, kit.loop.state, {}, [], kit.loop.catalog, None, kit.clock())
    shown = status["forecasts"][KEY]
    assert shown["mode"] == mode and shown["applied"] is (mode == "scale")
    assert shown["p50_gpus"] == pytest.approx(8, abs=0.5) and shown["actual_gpus"] == 1
    assert any(line.startswith(f"forecast {KEY} ({mode})") for line in kit.loop.state.previews)
    metrics = kit.loop.metrics.exposition().decode()
    assert f'gpu_autoscaler_forecast_gpus{{pool="{KEY}",quantile="0.8"}}' in metrics
    assert f'gpu_autoscaler_forecast_gpus{{pool="{KEY}",quantile="0.5"}}' in metrics
    assert f'gpu_autoscaler_demand_gpus{{pool="{KEY}"}} 1.0' in metrics


def test_a_forecast_failure_costs_the_floor_not_the_tick(kit, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("model exploded")

    monkeypatch.setattr(kit.loop.forecasts, "update", broken)
    report = kit.loop.tick()
    assert report.error is None and report.plan is not None
    assert kit.loop.state.step_errors == {"forecast": 1}
    assert "model exploded" in kit.loop.state.recent_errors[-1]


def test_mape_is_exported_once_forecasts_have_been_scored(kit):
    for _ in range(14):  # an hour of ticks, 5 minutes apart
        kit.loop.tick()
        kit.clock.advance(minutes=5)
    metrics = kit.loop.metrics.exposition().decode()
    assert f'gpu_autoscaler_forecast_mape{{pool="{KEY}"}}' in metrics


def test_the_service_wiring_loads_history_from_prometheus_when_it_is_configured(tmp_path):
    from autoscaler.fleet.store import FleetStore
    from autoscaler.service.config.models import ServiceConfig
    from autoscaler.service.wiring import build_forecasts

    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    try:
        plain = ServiceConfig.model_validate({"policies_dir": str(tmp_path)})
        assert build_forecasts(plain, store).warm is None
        with_prom = ServiceConfig.model_validate({
            "policies_dir": str(tmp_path), "signals": {"prometheus": {"url": "http://127.0.0.1:1"}}})
        assert build_forecasts(with_prom, store).warm is not None
    finally:
        store.close()


def test_the_status_page_and_the_status_command_show_the_forecast(kit):
    from rich.console import Console

    from autoscaler.cli.status import status_view
    from autoscaler.service.http.ui import status_page

    kit.loop.tick()
    doc = build_status(kit.store, kit.loop.state, {}, [], kit.loop.catalog, None, kit.clock())
    mode = doc["forecasts"][KEY]["mode"]
    page = status_page(doc).body.decode()
    assert "<h2>Forecasts (predictive capacity)</h2>" in page
    assert f"<td>{KEY}</td><td>{mode}</td>" in page
    held = "held" if mode == "scale" else "not held"
    assert f"<td>{held}</td><td>forecast p80 for Mon 12:00-12:15 is 8 GPUs" in page
    out = Console(width=200, record=True)
    out.print(status_view(doc))
    text = out.export_text()
    assert "Forecasts (predictive capacity)" in text and f"{held}: forecast p80" in text


def test_a_forecast_sized_warm_pool_follows_the_forecast_of_the_next_hour(tmp_path):
    write_policy(tmp_path / "policies", "vision", name="train", max_nodes=10,
                 capacity={"spot_percent": 0},
                 warm_pool={"size": "forecast", "max": 3, "quantile": 0.95},
                 predictive={"mode": "forecast-only", "lead": "10m"})
    kit = make_loop(tmp_path)
    try:
        kit.loop.forecasts = PoolForecasts(kit.store)
        kit.loop.warm_hashes = lambda policies: {KEY: "h1"}
        start = bin_start(NOW) - timedelta(days=14)
        DemandHistory(kit.store).fill(KEY, [(start + i * STEP, daily(start + i * STEP))
                                            for i in range(14 * DAY_BINS)])
        report = kit.loop.tick()
        assert report.error is None
        [fill] = [a for a in report.plan.actions if isinstance(a, Launch) and a.trigger == "warm-pool"]
        assert fill.count == 3 and fill.image == "h1" and fill.market.value == "on-demand"
        assert "warm target 3 = forecast p95 8" in fill.reason and "(capped from 8)" in fill.reason
        # (what the executor makes of it: tests/service/executor/test_crash_warm.py)
    finally:
        kit.store.close()
