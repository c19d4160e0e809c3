"""The simulation report: a rich table per strategy, JSON, and the benchmark's ratios."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.table import Table

from autoscaler.sim.results import StrategyResult
from autoscaler.sim.run import SimReport


def ratios(report: SimReport) -> dict[str, float | str | None]:
    """Ours against the oracle and the best ranked baseline, per delivered GPU-hour."""
    ours = report.result("ours") if any(r.name == "ours" for r in report.results) else None
    best = report.best_baseline()
    ca = next((r for r in report.results if r.name == "ca_like"), None)
    out: dict[str, float | str | None] = {
        "cost_vs_oracle": None, "cost_vs_best_baseline": None, "best_baseline": None,
        "p95_wait_s": None, "p95_wait_ca_like_s": None,
        "replay_speedup": round(report.replay_speedup(), 1),
        "cost_per_delivered_vs_oracle": None, "delivered_share": None,
        "refused_attempts_ours": None, "refused_attempts_ca_like": None,
    }
    oracle_price = report.oracle.cost_per_delivered
    if ours is not None:
        oracle_cost = report.oracle.cost_usd
        per = ours.cost_per_delivered
        out["cost_vs_oracle"] = round(ours.cost_usd / oracle_cost, 4) if oracle_cost else None
        out["p95_wait_s"] = round(ours.wait_p95_s, 1)
        out["delivered_share"] = round(ours.delivered_share, 4)
        out["refused_attempts_ours"] = ours.failed_launches
        if per is not None and oracle_price:
            out["cost_per_delivered_vs_oracle"] = round(per / oracle_price, 4)
        if best is not None and per is not None and best.cost_per_delivered:
            out["cost_vs_best_baseline"] = round(per / best.cost_per_delivered, 4)
            out["best_baseline"] = best.name
    if ca is not None:
        out["p95_wait_ca_like_s"] = round(ca.wait_p95_s, 1)
        out["refused_attempts_ca_like"] = ca.failed_launches
    return out


def to_json(report: SimReport, with_series: bool = False) -> dict[str, Any]:
    return {
        "pool": report.pool,
        "window_days": [round(d, 4) for d in report.window_days],
        "config": asdict(report.config),
        "workload": report.workload,
        "ratios": ratios(report),
        "strategies": [r.as_dict(with_series) for r in report.results],
        "oracle": report.oracle.as_dict(),
        "wall_seconds": round(report.wall_seconds, 3),
        "spot": report.spot,
        "unranked": {r.name: why for r in report.results if (why := report.unranked(r))},
        "notes": report.notes,
    }


def _wait(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.1f}m"
    return f"{seconds:.0f}s"


def _row(r: StrategyResult, oracle: StrategyResult, unranked: str | None) -> list[str]:
    vs = f"{r.cost_usd / oracle.cost_usd:.2f}x" if oracle.cost_usd else "-"
    per, price = r.cost_per_delivered, oracle.cost_per_delivered
    per_vs = f"{per / price:.2f}x" if per is not None and price else "-"
    markets = ", ".join(f"{k} {v:,.0f}" for k, v in r.gpu_hours_paid_by_market.items()) or "-"
    if r.gpu_hours_paid_by_market:
        markets += f" (on-demand {r.on_demand_share:.0%})"
    moves = f"{r.moves_to_spot} ({r.gpu_hours_lost_by_cause.get('return-to-spot', 0.0):,.1f})"
    kills = ", ".join(f"{k} {v}" for k, v in r.kills_by_cause.items()) or "0"
    return [
        r.name + (" *" if unranked else ""), f"${r.cost_usd:,.0f}", vs,
        f"{r.gpu_hours_delivered:,.0f} ({r.delivered_share:.0%})", f"{r.gpu_hours_carried:,.0f}", per_vs,
        f"{r.gpu_hours_paid:,.0f}", markets,
        f"{r.gpu_hours_used:,.0f}", f"{r.utilization:.0%}",
        f"{_wait(r.wait_p50_s)} / {_wait(r.wait_p95_s)} / {_wait(r.wait_p99_s)}",
        str(r.jobs_never_started), f"{r.jobs_interrupted} ({kills})", moves,
        f"{r.launches} ({r.failed_launches} refused) / {r.terminations}",
    ]


def table(report: SimReport) -> Table:
    lo, hi = report.window_days
    wl = report.workload
    t = Table(title=f"Simulation of {report.pool}, trace days {lo:g}-{hi:g} "
                    f"({wl['jobs']} jobs, {wl['demand_gpu_hours']:,.0f} GPU-h demand)", expand=True)
    left = ("strategy", "paid by market", "jobs interrupted")
    for col in ("strategy", "cost", "vs oracle", "GPU-h delivered", "carried past window",
                "$/delivered GPU-h vs oracle", "GPU-h paid", "paid by market", "GPU-h used", "fleet util",
                "wait p50 / p95 / p99", "never started", "jobs interrupted",
                "moves to spot (GPU-h redone)", "launches / terminations"):
        t.add_column(col, justify="left" if col in left else "right", overflow="fold")
    notes = []
    for r in report.results:
        why = report.unranked(r)
        t.add_row(*_row(r, report.oracle, why), style="bold" if r.name == "ours" else "dim" if why else "")
        if why:
            notes.append(f"* {r.name}: {why}")
    t.add_row(*_row(report.oracle, report.oracle, None), style="dim")
    if notes:
        t.caption = "; ".join(notes)
    return t


def summary_line(report: SimReport) -> str:
    r = ratios(report)

    def fmt(v: float | str | None) -> str:
        return "nan" if v is None else str(v)

    keys = ("cost_vs_oracle", "cost_vs_best_baseline", "p95_wait_s", "p95_wait_ca_like_s", "replay_speedup",
            "cost_per_delivered_vs_oracle", "delivered_share", "refused_attempts_ours",
            "refused_attempts_ca_like")
    return " ".join(f"{k}={fmt(r[k])}" for k in keys)
