from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from tests.shared_data import SHARED_DATA
from tests.sim.conftest import pod, write_pods, write_spot

runner = CliRunner()
POLICY = """apiVersion: gpu-autoscaler/v1
team: sim
pools:
  - name: v100
    cloud: aws
    region: us-east-1
    zones: [us-east-1a, us-east-1c]
    instance_types: [p3.2xlarge, p3.8xlarge, p3.16xlarge]
    capacity: {on_demand_base: 0, spot_percent: 100, spot_fallback: on-demand}
    max_nodes: 40
    scale_up: {max_step: 20}
"""


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    d = tmp_path / "policies"
    d.mkdir()
    (d / "sim.yaml").write_text(POLICY)
    return d


def test_simulate_json_on_a_synthetic_trace(tmp_path: Path, policies: Path) -> None:
    trace = write_pods(tmp_path / "pods.csv", [
        pod(f"p{i}", 86400 + 900 * i, 86400 + 900 * i, 86400 + 900 * i + 1200, milli=500 if i % 2 else 1000)
        for i in range(20)])
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--policies", str(policies),
                                 "--start-day", "1", "--days", "1", "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["pool"] == "sim/v100"
    assert data["workload"]["jobs"] == 20
    assert {s["name"] for s in data["strategies"]} == {"ours", "static", "ca_like", "target_tracking"}
    assert data["ratios"]["cost_vs_oracle"] >= 1
    assert data["config"]["shared_boot_draws"] is False
    shared = runner.invoke(app, ["simulate", "--trace", str(trace), "--policies", str(policies),
                                 "--start-day", "1", "--days", "1", "--json", "--no-progress",
                                 "--strategies", "ours", "--shared-boot-draws"])
    assert shared.exit_code == 0, shared.output
    assert json.loads(shared.stdout)["config"]["shared_boot_draws"] is True


def test_plots_without_matplotlib_say_which_extra_before_replaying(
        tmp_path: Path, policies: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As in an install without the `plots` extra: importing matplotlib fails.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.delitem(sys.modules, "autoscaler.sim.plots", raising=False)
    trace = write_pods(tmp_path / "pods.csv", [pod("p0", 86400, 86400, 87000)])
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--policies", str(policies),
                                 "--start-day", "1", "--days", "1", "--out", str(out), "--no-progress"])
    assert result.exit_code == 1
    assert result.output.strip() == ("error: --out draws PNG plots, which need matplotlib: "
                                     "pip install 'gpu-autoscaler[plots]'")
    assert not out.exists()  # refused before the replay, not after it
    without_plots = runner.invoke(app, ["simulate", "--trace", str(trace), "--policies", str(policies),
                                        "--start-day", "1", "--days", "1", "--json", "--no-progress"])
    assert without_plots.exit_code == 0, without_plots.output


def test_simulate_reports_bad_input_without_a_traceback(tmp_path: Path, policies: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("name,num_gpu\n")
    result = runner.invoke(app, ["simulate", "--trace", str(bad), "--policies", str(policies),
                                 "--no-progress"])
    assert result.exit_code == 1
    assert "missing column" in result.output
    unknown = runner.invoke(app, ["simulate", "--trace", str(bad), "--policies", str(policies),
                                  "--pool", "nobody/gpu", "--no-progress"])
    assert unknown.exit_code == 1 and "no pool 'nobody/gpu'" in unknown.output


FIXTURE = SHARED_DATA / "fixtures/openb_default_day148.csv"
DUTY = SHARED_DATA / "fixtures/genai_gpu_duty_cycle_8pods_2h.csv"


@pytest.mark.skipif(not (FIXTURE.exists() and DUTY.exists()), reason="shared trace fixtures not present")
def test_simulate_fixture_day_writes_report_and_plots(tmp_path: Path, policies: Path) -> None:
    spot = tmp_path / "spot"
    spot.mkdir()
    write_spot(spot / "us-east-1a_v100_1.json", [0] * 300 + [1] * 30 + [0] * 300, gap=120)
    out = tmp_path / "out"
    result = runner.invoke(app, [
        "simulate", "--trace", str(FIXTURE), "--policies", str(policies), "--start-day", "148",
        "--days", "0.25", "--seed", "3", "--tick", "30s", "--boot-delay", "4m", "--spot-trace", str(spot),
        "--duty-cycles", str(DUTY), "--out", str(out), "--no-progress"])
    assert result.exit_code == 1 and "us-east-1c not in the spot trace" in result.output  # not assumed
    result = runner.invoke(app, [
        "simulate", "--trace", str(FIXTURE), "--policies", str(policies), "--start-day", "148",
        "--days", "0.25", "--seed", "3", "--tick", "30s", "--boot-delay", "4m", "--spot-trace", str(spot),
        "--duty-cycles", str(DUTY), "--out", str(out), "--no-progress", "--assume-available",
        "--interrupt-share", "1", "--launch-attempt", "1m"])
    assert result.exit_code == 0, result.output
    assert "us-east-1c have no spot trace" in result.output
    assert "cost_vs_oracle=" in result.output.splitlines()[-1]
    data = json.loads((out / "report.json").read_text())
    assert data["config"]["seed"] == 3 and data["workload"]["jobs"] > 100
    assert data["config"]["launch_attempt"] == 60
    assert data["spot"] == {"zones_traced": ["us-east-1a"], "assumed_available": ["us-east-1c"],
                            "interrupt_share": 1.0}
    assert (out / "demand_vs_capacity.png").stat().st_size > 10_000
    assert (out / "cumulative_cost.png").stat().st_size > 10_000


def test_simulate_runs_a_policy_with_a_warm_pool(tmp_path: Path, policies: Path) -> None:
    # Spot-only: the warm nodes are spot, as the launches (with an on-demand fallback the
    # warm nodes would be on-demand, engine/warm_pool.warm_market, and serve its launches).
    spot_only = POLICY.replace("spot_fallback: on-demand", "spot_fallback: none")
    (policies / "sim.yaml").write_text(spot_only + "    warm_pool: {size: 2, max: 2}\n")
    trace = write_pods(tmp_path / "pods.csv", [
        pod(f"p{i}", 86400 + 3600 * i, 86400 + 3600 * i, 86400 + 3600 * i + 1200) for i in range(4)])
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--policies", str(policies),
                                 "--start-day", "1", "--days", "1", "--json", "--no-progress",
                                 "--strategies", "ours", "--warm-boot-delay", "1m"])
    assert result.exit_code == 0, result.output
    ours = json.loads(result.stdout)["strategies"][0]
    assert ours["extra"]["warm_starts"] >= 1 and ours["extra"]["warm_cost_usd"] > 0
