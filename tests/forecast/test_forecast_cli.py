"""``forecast backtest`` on both trace formats, and the predictive strategy in ``simulate``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from typer.testing import CliRunner

from autoscaler.cli import app
from tests.cli.test_simulate import POLICY
from tests.sim.conftest import pod, write_pods

runner = CliRunner()
DAY = 86400


def daily_wave(path: Path, days: int) -> Path:
    """Every day at 08:00, eight 1-GPU jobs arrive for 4 hours; nothing else."""
    return write_pods(path, [pod(f"d{d}-{i}", d * DAY + 8 * 3600, d * DAY + 8 * 3600,
                                 d * DAY + 12 * 3600) for d in range(days) for i in range(8)])


def test_backtest_on_a_pod_list(tmp_path: Path) -> None:
    trace = daily_wave(tmp_path / "pods.csv", 10)
    result = runner.invoke(app, ["forecast", "backtest", "--trace", str(trace), "--train-days", "6",
                                 "--pool", "sim/v100"])
    assert result.exit_code == 0, result.output
    last = dict(kv.split("=") for kv in result.output.strip().splitlines()[-1].split())
    assert last["pool"] == "sim/v100"
    assert float(last["mape_model"]) < 1.0  # the same wave every day is forecast exactly
    assert "seasonal-naive" in result.output and "ridge" in result.output


def test_backtest_on_a_duty_cycle_series(tmp_path: Path) -> None:
    trace = tmp_path / "duty.csv.gz"
    rows = ["value,timestamp_anon,container_ip"]
    rows += [f"{50 if (t // 3600) % 24 < 12 else 0},{1000 + t},c{c}"
             for t in range(0, 3 * DAY, 300) for c in range(4)]
    with gzip.open(trace, "wt") as fh:
        fh.write("\n".join(rows) + "\n")
    result = runner.invoke(app, ["forecast", "backtest", "--trace", str(trace), "--train-days", "2"])
    assert result.exit_code == 0, result.output
    assert "duty-cycle" in result.output and "chosen=" in result.output


def test_backtest_rejects_an_unknown_format_and_a_too_long_training(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    result = runner.invoke(app, ["forecast", "backtest", "--trace", str(bad)])
    assert result.exit_code == 1 and "neither a pod list" in result.output
    trace = daily_wave(tmp_path / "pods.csv", 3)
    result = runner.invoke(app, ["forecast", "backtest", "--trace", str(trace), "--train-days", "9"])
    assert result.exit_code == 1 and "leaves no 6 h test window" in result.output


def test_predictive_strategy_is_ready_before_the_daily_wave(tmp_path: Path) -> None:
    trace = daily_wave(tmp_path / "pods.csv", 9)
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "sim.yaml").write_text(POLICY)
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--policies", str(policies),
                                 "--start-day", "8", "--days", "1", "--strategies", "ours,predictive",
                                 "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    by_name = {s["name"]: s for s in json.loads(result.stdout)["strategies"]}
    ours, pred = by_name["ours"], by_name["predictive"]
    assert ours["wait_p50_s"] >= 180  # reactive: every job waits for a node to boot
    assert pred["wait_p50_s"] < ours["wait_p50_s"] / 2
    assert pred["parameters"]["lead_s"] == 240


def test_plan_from_a_service_config_shows_the_forecast_and_records_nothing(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from ruamel.yaml import YAML

    from autoscaler.fleet.demand_history import STEP, DemandHistory, bin_start
    from autoscaler.fleet.store import FleetStore
    from tests.service.service_fakes import write_policy

    write_policy(tmp_path / "policies", "vision", name="gpu", max_nodes=4,
                 predictive={"mode": "forecast-only", "lead": "10m"})
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    store = FleetStore(url)
    start = bin_start(datetime.now(UTC)) - timedelta(days=8)
    history = DemandHistory(store)
    history.fill("vision/gpu", [(start + i * STEP, 5.0) for i in range(8 * 288)])
    before = len(history.bins("vision/gpu", start))
    with (tmp_path / "config.yaml").open("w") as fh:
        YAML().dump({"policies_dir": str(tmp_path / "policies"), "store": {"url": url},
                     "clouds": {"market_prices": False}}, fh)
    try:
        result = runner.invoke(app, ["plan", "--config", str(tmp_path / "config.yaml"), "--json"])
        assert result.exit_code == 0, result.output
        shown = json.loads(result.stdout)["forecasts"]["vision/gpu"]
        assert shown["mode"] == "forecast-only" and shown["applied"] is False
        assert shown["p50_gpus"] == 5.0 and shown["model"] is not None
        assert len(history.bins("vision/gpu", start)) == before  # plan records nothing
        text = runner.invoke(app, ["plan", "--config", str(tmp_path / "config.yaml")])
        assert text.exit_code == 0, text.output
        assert "forecast vision/gpu (forecast-only): p50 5.0" in " ".join(text.output.split())
    finally:
        store.close()
