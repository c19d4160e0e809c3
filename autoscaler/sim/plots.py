"""PNG plots of a simulation (matplotlib, Agg backend: no display needed).

* ``demand_vs_capacity.png``: per strategy, the GPUs jobs asked for (running + pending)
  against the GPUs being paid for, over the window;
* ``cumulative_cost.png``: every strategy's cumulative cost, with the oracle's.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from autoscaler.sim.run import SimReport
from autoscaler.traces import DAY


def _days(ts: list[float]) -> list[float]:
    return [t / DAY for t in ts]


def demand_vs_capacity(report: SimReport, path: Path) -> Path:
    results = [r for r in report.results if r.series is not None and r.series.t]
    fig, axes = plt.subplots(len(results), 1, figsize=(12, 2.6 * max(1, len(results))), sharex=True,
                             squeeze=False)
    for ax, r in zip(axes[:, 0], results, strict=True):
        s = r.series
        if s is None:
            continue
        days = _days(s.t)
        ax.fill_between(days, s.capacity_gpus, step="post", alpha=0.25, color="tab:blue",
                        label="GPUs paid")
        ax.step(days, s.ready_gpus, where="post", lw=0.7, color="tab:blue", label="GPUs ready")
        ax.step(days, s.demand_gpus, where="post", lw=0.9, color="tab:red",
                label="demand (running + pending)")
        ax.step(days, s.running_gpus, where="post", lw=0.6, color="tab:green", label="running")
        ax.set_ylabel("GPUs")
        ax.set_title(f"{r.name}: ${r.cost_usd:,.0f}, fleet util {r.utilization:.0%}, "
                     f"p95 wait {r.wait_p95_s:.0f}s", fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper left", fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel("trace day")
    fig.suptitle(f"{report.pool}: demand vs capacity", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cumulative_cost(report: SimReport, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, 5))
    for r in report.results:
        if r.series is not None and r.series.t:
            ax.plot(_days(r.series.t), r.series.cost_usd, label=f"{r.name} (${r.cost_usd:,.0f})")
    oracle = report.oracle.series
    if oracle is not None and oracle.t:
        ax.plot(_days(oracle.t), oracle.cost_usd, "k--", lw=1,
                label=f"oracle (${report.oracle.cost_usd:,.0f})")
    ax.set_xlabel("trace day")
    ax.set_ylabel("cumulative cost, USD")
    ax.set_title(f"{report.pool}: cumulative cost")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(report: SimReport, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    return [demand_vs_capacity(report, out / "demand_vs_capacity.png"),
            cumulative_cost(report, out / "cumulative_cost.png")]
