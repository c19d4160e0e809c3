"""``gpu-autoscaler simulate``: replay a GPU cluster trace through decide() and the baselines."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from autoscaler.cli.common import PoliciesOption, PricesOption, catalog_from, console, err_console, fail
from autoscaler.policy import PolicyLoadError, load_policies
from autoscaler.policy.duration import parse_duration
from autoscaler.sim.replay import SimConfig, SimError
from autoscaler.sim.report import summary_line, table, to_json
from autoscaler.sim.run import ALL, SimReport, run_all, select_pool
from autoscaler.sim.spot import SpotMarket, load_spot_traces
from autoscaler.traces import DAY, DutyCycles, TraceError, load_duty_cycles, load_pod_list


def _seconds(value: str, option: str) -> float:
    try:
        return parse_duration(value).total_seconds()
    except ValueError as exc:
        fail(f"{option}: {exc}")


PlotWriter = Callable[[SimReport, Path], list[Path]]


def _plot_writer() -> PlotWriter:
    # matplotlib is the `plots` extra: loaded only when plots are asked for, and checked
    # before a replay that may run for minutes.
    try:
        from autoscaler.sim.plots import write_plots
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib":
            raise
        fail("--out draws PNG plots, which need matplotlib: pip install 'gpu-autoscaler[plots]'")
    return write_plots


def _run(trace: Path, policies: Path, prices: Path | None, pool: str | None, start_day: float,
         days: float | None, config: SimConfig, spot_trace: Path | None, duty_cycles: Path | None,
         strategies: list[str], show_progress: bool, workers: int, assume_available: bool,
         interrupt_share: float) -> SimReport:
    catalog = catalog_from(prices)
    try:
        team, chosen, notes = select_pool(load_policies(policies, catalog), pool)
        workload = load_pod_list(trace, start_day, days)
        if "predictive" in strategies and start_day > 0:  # its history: the days before
            workload.before = load_pod_list(trace, 0, start_day).jobs
        spot: SpotMarket | None = (load_spot_traces(spot_trace, interrupt_share)
                                     if spot_trace else None)
        duty: DutyCycles | None = load_duty_cycles(duty_cycles) if duty_cycles else None
    except PolicyLoadError as exc:
        fail(f"policies in {policies} are invalid:\n{exc}")
    except (TraceError, SimError) as exc:
        fail(str(exc))
    span = workload.end - workload.start
    with Progress(TextColumn("{task.description:>16}"), BarColumn(), TextColumn("day {task.fields[day]}"),
                  TimeElapsedColumn(), console=err_console, transient=True,
                  disable=not show_progress) as bar:
        tasks = {n: bar.add_task(n, total=span, day="-") for n in strategies}

        def progress(name: str, t: float) -> None:
            bar.update(tasks[name], completed=t - workload.start, day=f"{t / DAY:.1f}")

        try:
            report = run_all(workload, team, chosen, catalog, config, spot=spot, duty=duty,
                             strategies=strategies, workers=workers, assume_available=assume_available,
                             progress=progress)
        except SimError as exc:
            fail(str(exc))
    report.notes += notes
    return report


def simulate(
    trace: Annotated[Path, typer.Option("--trace", "-t", help="Alibaba GPU v2023 pod list (CSV with its "
                                        "columns).", exists=True, dir_okay=False)],
    policies: PoliciesOption = Path("policies"),
    prices: PricesOption = None,
    pool: Annotated[str | None, typer.Option("--pool", help="Pool to simulate, team/pool (default: the "
                                             "first pool in priority order).")] = None,
    start_day: Annotated[float, typer.Option("--start-day", help="First trace day replayed.")] = 0,
    days: Annotated[float | None, typer.Option("--days", help="Days replayed (default: to the end).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of boot jitter, spot draws and duty cycles.")] = 0,
    shared_boot_draws: Annotated[bool, typer.Option(
        "--shared-boot-draws/--own-boot-draws",
        help="Give every strategy the same boot-time draws, keyed by the minute of the "
        "launch (common random numbers: two strategies launching for the same job at about "
        "the same moment wait the same boot, whatever each launched before), or each its own "
        "stream (the default, as the recorded benchmark figures). Use "
        "the shared stream to compare strategies on a trace of few jobs.")] = False,
    tick: Annotated[str, typer.Option(help="The service loop interval: decide() runs this often.")] = "30s",
    wake_after: Annotated[str, typer.Option("--wake-after", help="The service's tick.wake_after: "
                                            "a job arriving, a spot notice or a refused launch "
                                            "between ticks runs decide() this long after the "
                                            "last tick (not before the last launch's attempt "
                                            "has passed; the default, as the service's); "
                                            "'off': only every --tick.")] = "10s",
    boot_delay: Annotated[str, typer.Option("--boot-delay", help="Provisioning + bootstrap time of a "
                                            "node (jittered +-25%).")] = "4m",
    warm_boot_delay: Annotated[str, typer.Option(
        "--warm-boot-delay", help="A warm_pool node's start to READY: the instance started, "
        "rejoined and health-checked (jittered +-25%; sources in autoscaler/sim/boot.py).")] = "67s",
    checkpoint: Annotated[str, typer.Option(help="A killed job keeps the work of its last checkpoint "
                                            "taken this often (0s: restarts from scratch).")] = "30m",
    spot_trace: Annotated[Path | None, typer.Option("--spot-trace", help="SkyPilot spot trace: a JSON "
                                                    "file or a directory with one file per zone.",
                                                    exists=True)] = None,
    duty_cycles: Annotated[Path | None, typer.Option("--duty-cycles", help="GenAI GPU duty-cycle CSV "
                                                     "(.gz ok): measured util of running jobs.",
                                                     exists=True, dir_okay=False)] = None,
    assume_available: Annotated[bool, typer.Option("--assume-available", help="Treat pool zones the "
                                                   "spot trace lacks as always having spot capacity "
                                                   "(default: refuse to run; the report shows the "
                                                   "choice).")] = False,
    interrupt_share: Annotated[float, typer.Option("--interrupt-share", min=0.0, max=1.0, help="Share "
                                                   "of a zone's spot nodes an outage interrupts (0.5: "
                                                   "the preemption trace's mean).")] = 0.5,
    launch_attempt: Annotated[str, typer.Option("--launch-attempt", help="Time of one provisioning "
                                                "attempt (plan + apply); a refusal is learned after "
                                                "it.")] = "36s",
    strategies: Annotated[str, typer.Option(help="Comma-separated strategies to replay (also: "
                                            "predictive, trained on the days before --start-day; "
                                            "karpenter_like: CA-like with spot spread, no return)."
                                            )] = ",".join(ALL),
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write report.json and PNG plots here.",
                                             file_okay=False)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True,
    workers: Annotated[int, typer.Option(help="Replay strategies in this many processes at once.",
                                         min=1)] = 1,
) -> None:
    """Replay a trace through the same decide() the service runs, against baselines and an oracle.

    Every strategy sees the same jobs, prices, spot outages and boot-time distribution
    (drawn per strategy unless --shared-boot-draws). Reports cost, GPU-hours paid vs used,
    waits and interruptions per strategy.
    """
    config = SimConfig(tick=_seconds(tick, "--tick"), boot_delay=_seconds(boot_delay, "--boot-delay"),
                       checkpoint_interval=_seconds(checkpoint, "--checkpoint"), seed=seed,
                       shared_boot_draws=shared_boot_draws,
                       launch_attempt=_seconds(launch_attempt, "--launch-attempt"),
                       warm_boot_delay=_seconds(warm_boot_delay, "--warm-boot-delay"),
                       wake_after=None if wake_after == "off" else _seconds(wake_after, "--wake-after"))
    if config.tick <= 0:
        fail("--tick must be greater than 0s")
    if config.wake_after is not None and config.wake_after <= 0:
        fail("--wake-after must be greater than 0s, or off")
    names = [s.strip() for s in strategies.split(",") if s.strip()]
    write_plots = _plot_writer() if out is not None else None
    report = _run(trace, policies, prices, pool, start_day, days, config, spot_trace, duty_cycles, names,
                  progress, workers, assume_available, interrupt_share)
    if out is not None and write_plots is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(to_json(report, with_series=True), indent=1))
        written = write_plots(report, out)
        err_console.print(f"wrote {out / 'report.json'}, " + ", ".join(str(p) for p in written))
    if json_out:
        typer.echo(json.dumps(to_json(report), indent=2))
        return
    console.print(table(report))
    for note in report.notes:
        console.print(f"[dim]{note}[/]")
    typer.echo(summary_line(report))


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
