from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from autoscaler.sim.plots import write_plots
from autoscaler.sim.report import ratios, summary_line, table, to_json
from autoscaler.sim.run import SimReport, run_all
from autoscaler.traces import Job
from tests.sim.conftest import CATALOG, EXACT, policy, workload


@pytest.fixture(scope="module")
def report() -> SimReport:
    pol = policy(instance_types=["p3.2xlarge", "p3.8xlarge"])
    jobs = [Job(f"j{i}", 600 * i, 1800 + 300 * (i % 3), [0.5, 1.0, 2.0][i % 3]) for i in range(12)]
    return run_all(workload(jobs, end=6 * 3600), pol, pol.pools[0], CATALOG, EXACT)


def test_summary_line_is_the_benchmark_format(report: SimReport) -> None:
    line = summary_line(report)
    pattern = (r"cost_vs_oracle=[\d.]+ cost_vs_best_baseline=([\d.]+|nan) p95_wait_s=[\d.]+ "
               r"p95_wait_ca_like_s=[\d.]+ replay_speedup=[\d.]+ cost_per_delivered_vs_oracle=[\d.]+ "
               r"delivered_share=[\d.]+ refused_attempts_ours=\d+ refused_attempts_ca_like=\d+")
    assert re.fullmatch(pattern, line), line


def test_ratios_use_delivered_work_and_the_cheapest_ranked_baseline(report: SimReport) -> None:
    r = ratios(report)
    ours = report.result("ours")
    assert r["cost_vs_oracle"] == pytest.approx(ours.cost_usd / report.oracle.cost_usd, rel=1e-3)
    assert ours.cost_per_delivered is not None and report.oracle.cost_per_delivered is not None
    assert r["cost_per_delivered_vs_oracle"] == pytest.approx(
        ours.cost_per_delivered / report.oracle.cost_per_delivered, rel=1e-3)
    assert r["delivered_share"] == pytest.approx(ours.delivered_share, abs=1e-4)
    best = report.best_baseline()
    assert best is not None and r["best_baseline"] == best.name
    served = [b for b in report.results if b.name != "ours"
              and b.gpu_hours_delivered >= 0.95 * ours.gpu_hours_delivered]
    assert best.cost_per_delivered == min(b.cost_per_delivered or 0 for b in served)


def test_delivered_plus_carried_is_the_demand(report: SimReport) -> None:
    demand = report.oracle.gpu_hours_delivered
    for r in report.results:
        assert r.gpu_hours_delivered + r.gpu_hours_carried == pytest.approx(demand, rel=1e-6), r.name
        assert r.gpu_hours_delivered <= r.gpu_hours_used - r.gpu_hours_lost + 1e-6, r.name


def test_json_has_every_strategy_and_the_oracle(report: SimReport) -> None:
    data = json.loads(json.dumps(to_json(report, with_series=True)))
    names = [s["name"] for s in data["strategies"]]
    assert names == ["ours", "static", "ca_like", "target_tracking"]
    assert data["oracle"]["name"] == "oracle"
    first = data["strategies"][0]
    for key in ("cost_usd", "gpu_hours_paid", "gpu_hours_used", "utilization", "wait_p50_s", "wait_p95_s",
                "wait_p99_s", "jobs_interrupted", "launches", "terminations", "series"):
        assert key in first
    assert len(first["series"]["t"]) == len(first["series"]["cost_usd"]) > 10


def test_table_renders_a_row_per_strategy(report: SimReport) -> None:
    console = Console(width=320, record=True)
    console.print(table(report))
    text = console.export_text()
    for name in ("ours", "static", "ca_like", "target_tracking", "oracle", "GPU-h delivered"):
        assert name in text


def test_plots_are_png_files(report: SimReport, tmp_path: Path) -> None:
    paths = write_plots(report, tmp_path / "plots")
    assert [p.name for p in paths] == ["demand_vs_capacity.png", "cumulative_cost.png"]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_a_cheap_baseline_that_starved_the_jobs_is_flagged_not_ranked(report: SimReport) -> None:
    from dataclasses import replace

    from autoscaler.sim.results import StrategyResult

    ours = StrategyResult("ours", cost_usd=100, gpu_hours_delivered=1000)
    ca = StrategyResult("ca_like", cost_usd=90, gpu_hours_delivered=950)  # 950 >= 0.95 x 1000
    tt = StrategyResult("target_tracking", cost_usd=20, gpu_hours_delivered=300, gpu_hours_carried=700)
    fake = replace(report, results=[ours, ca, tt])
    best = fake.best_baseline()
    assert best is not None and best.name == "ca_like"
    assert ratios(fake)["cost_vs_best_baseline"] == pytest.approx((100 / 1000) / (90 / 950), rel=1e-3)
    why = fake.unranked(tt)
    assert why is not None and why.startswith("not ranked: delivered 30% of the demand")
    console = Console(width=250, record=True)
    console.print(table(fake))
    text = console.export_text()
    assert "target_tracking *" in text and "not ranked" in text
