"""``gpu-autoscaler forecast backtest``: how well each model would have forecast a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from autoscaler.cli.common import console, err_console, fail, finite
from autoscaler.forecast.backtest import HORIZON, QUANTILES, backtest
from autoscaler.forecast.series import DAY_BINS, WINDOW_WEEKS
from autoscaler.forecast.traces import load_series
from autoscaler.traces import TraceError

app = typer.Typer(help="Demand forecasts (docs/concepts/predictive.md).", no_args_is_help=True)


def _fmt(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:.2f}{unit}"


@app.command("backtest")
def backtest_cmd(
    trace: Annotated[Path, typer.Option("--trace", "-t", exists=True, dir_okay=False,
                                        help="Pod list or GenAI duty-cycle CSV (.gz ok).")],
    pool: Annotated[str, typer.Option("--pool", help="The pool the trace stands for, team/pool "
                                      "(a label: a trace holds one pool).")] = "trace/pool",
    train_days: Annotated[float | None, typer.Option(
        "--train-days", parser=finite(0, WINDOW_WEEKS * 7, " days"),
        help="Days before the first origin (default: half the trace).")] = None,
) -> None:
    """Rolling origins every 6 h after the training days; each model forecasts 6 h from the
    bins before its origin only. MAPE over bins with >= 1 GPU of demand; pinball loss
    (GPUs) averaged over the p50, p80 and p90 quantiles."""
    try:
        series, kind = load_series(trace)
    except TraceError as exc:
        fail(str(exc))
    if series.dropped:
        err_console.print("note: left out of the series: " + ", ".join(
            f"{n} sample(s) {why}" for why, n in series.dropped.items()), highlight=False)
    train = len(series) // 2 if train_days is None else int(train_days * DAY_BINS)
    if train >= len(series) - HORIZON:
        fail(f"--train-days {train / DAY_BINS:g} leaves no 6 h test window in a trace of "
             f"{len(series) / DAY_BINS:.2f} days")
    result = backtest(series.values, train)
    naive = result.scores["seasonal-naive"]
    chosen = result.chosen()
    table = Table(title=f"{pool}: {kind} {trace.name}, train {train / DAY_BINS:.1f} d, test "
                        f"{result.test_bins / DAY_BINS:.1f} d, quantiles {QUANTILES}")
    for col in ("model", "MAPE", "pinball (GPUs)", "MAPE vs seasonal naive", "origins", "note"):
        table.add_column(col)
    for s in result.scores.values():
        ratio = (s.mape / naive.mape if s.mape is not None and naive.mape else None)
        table.add_row(s.model + (" (chosen)" if s is chosen else ""), _fmt(s.mape, "%"),
                      _fmt(s.pinball), _fmt(ratio, "x"), str(s.origins), s.error)
    console.print(table)
    typer.echo(f"pool={pool} chosen={chosen.model} mape_model={_fmt(chosen.mape)} "
               f"mape_seasonal_naive={_fmt(naive.mape)} pinball_model={_fmt(chosen.pinball)} "
               f"pinball_seasonal_naive={_fmt(naive.pinball)}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="forecast")
