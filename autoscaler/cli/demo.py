"""``gpu-autoscaler demo``: the sandbox, the real service loop and a scripted load, live.

Needs root and what ``./scripts/install.sh`` installs. Everything runs under one state
directory and is torn down at the end, on failure and on Ctrl-C (no process, no network
namespace left); ``gpu-autoscaler sandbox down --dir DIR`` cleans up after a hard kill.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from autoscaler.cli.common import console, fail
from autoscaler.cli.logs import configure
from autoscaler.cli.status import status_view
from autoscaler.cli.status_doc import StatusDoc
from autoscaler.fleet.store import FleetStore
from autoscaler.sandbox.stack.demo import DemoError, DemoResult, DemoRun

DEFAULT_DIR = Path(".gpu-autoscaler/demo")


def scenario_panel(run: DemoRun) -> Panel:
    phase = run.phase
    elapsed = time.monotonic() - run.started
    text = Text(f"{elapsed:5.0f}s  load {run.current_load:.0f}%  ")
    if phase is not None:
        text.append(f"phase {phase.name}: ", style="bold")
        text.append(phase.description)
    return Panel(text, title="gpu-autoscaler demo", border_style="cyan")


def activity_panel(status: StatusDoc) -> Panel:
    lines = status.loop.activity[-8:]
    return Panel(Text("\n".join(lines) or "-", overflow="fold"),
                 title="Previews, Terraform applies, Ansible runs")


def view(run: DemoRun) -> Group:
    status = run.status()
    if not status:
        return Group(scenario_panel(run))
    doc = StatusDoc.model_validate(status)
    return Group(scenario_panel(run), status_view(doc), activity_panel(doc))


def node_history(store: FleetStore) -> Table:
    """Every node's path through the lifecycle, from the store's transitions."""
    paths: dict[str, list[tuple[str, datetime]]] = {}
    for t in store.transitions():
        paths.setdefault(t.node, []).append((t.to_state, t.at))
    table = Table(title="Nodes, from the store's transitions", expand=True)
    table.add_column("node")
    table.add_column("lifecycle", overflow="fold")
    table.add_column("lived", justify="right")
    for node, steps in sorted(paths.items()):
        lived = (steps[-1][1] - steps[0][1]).total_seconds()
        table.add_row(node, " -> ".join(s for s, _ in steps), f"{lived:.0f}s")
    return table


def summary(run: DemoRun, result: DemoResult) -> Group:
    parts: list[Any] = []
    if run.service is not None:
        store = run.service.store
        parts.append(node_history(store))
        kinds: dict[str, int] = {}
        for action in store.actions():
            kinds[action.kind] = kinds.get(action.kind, 0) + 1
        parts.append(Text("actions: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))))
    phases = ", ".join(f"{p} {s:.0f}s" for p, s in result.phase_seconds.items())
    if result.failed:
        parts.append(Text(f"demo stopped early: {result.failed}", style="bold red"))
    else:
        parts.append(Text(f"demo complete in {result.seconds:.0f}s ({phases}); the fleet is "
                          "empty and moto runs no instance", style="bold green"))
    return Group(*parts)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    def raise_interrupt(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    # A shell without job control starts a background command with SIGINT ignored, and
    # Python keeps it so: Ctrl-C (or kill -INT) then never reached the teardown.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def demo(
    directory: Annotated[Path, typer.Option("--dir", help="State directory (sandbox, store, "
                                            "Terraform workspaces, logs).", file_okay=False)]
    = DEFAULT_DIR,
    load: Annotated[float, typer.Option(help="GPU utilization % of the load phase.")] = 95.0,
    phase_timeout: Annotated[float, typer.Option(help="Seconds each phase may take.")] = 600,
    log_file: Annotated[Path | None, typer.Option(
        "--log-file", help="Service log (default: DIR/demo.log).", dir_okay=False)] = None,
) -> None:
    """Run the autoscaler for real against a local sandbox for about three minutes.

    Scale-up on load (spot nodes planned, previewed with their $/h, applied by Terraform
    against moto, bootstrapped by Ansible over SSH, joined to Slurm), then scale-down
    (drained in Slurm, destroyed by Terraform), with a live view and a summary.
    """
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    log_path = log_file or directory / "demo.log"
    configure(logging.INFO, filename=str(log_path))
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    run = DemoRun(directory, load=load, phase_timeout_s=phase_timeout)
    result = DemoResult(failed="interrupted")
    console.print(f"Starting the sandbox in {directory} (log: {log_path}) ...")
    with sigterm_as_interrupt():
        try:
            run.start()
            with Live(view(run), console=console, refresh_per_second=2) as live:
                result = run.run(on_wait=lambda r: live.update(view(r)))
                live.update(view(run))
            console.print()
            console.print(summary(run, result))
        except DemoError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            console.print("[yellow]interrupted: tearing down[/]")
        finally:
            console.print("Stopping the service and the sandbox ...")
            run.stop()
            console.print(f"Torn down: no process or network namespace left (log: {log_path}).")
    if result.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
