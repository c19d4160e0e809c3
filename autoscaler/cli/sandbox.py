"""``gpu-autoscaler sandbox up|down|status``: the local stack under one state directory
(``fault`` and ``scores``: :mod:`autoscaler.cli.sandbox_market`)."""

from __future__ import annotations

import os
import signal
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from autoscaler.cli.common import console, fail
from autoscaler.sandbox.hosts.procs import ManagedProcess, ProcessError, wait_until
from autoscaler.sandbox.stack.state import StackState, alive, cleanup, read_state

DEFAULT_DIR = Path(".gpu-autoscaler/sandbox")
DEMO_POLICIES = Path(__file__).resolve().parents[2] / "examples" / "demo" / "policies"
class Registration(StrEnum):
    dynamic = "dynamic"
    declared = "declared"


DirOption = Annotated[Path, typer.Option("--dir", help="State directory of the sandbox.",
                                         file_okay=False)]
sandbox_app = typer.Typer(help="A local stack: moto, Prometheus, a synthetic DCGM exporter and, "
                          "as root, Slurm and SSH test hosts in network namespaces.",
                          no_args_is_help=True)


def running(state: StackState | None) -> bool:
    return (state is not None and state.supervisor is not None and alive(state.supervisor)
            and state.status in ("starting", "ready"))


@sandbox_app.command("up")
def up(
    directory: DirOption = DEFAULT_DIR,
    policies: Annotated[Path, typer.Option(
        "--policies", help="Policies the sandbox serves (their Slurm pools' partitions are "
        "made; service.yaml points at them).", file_okay=False)] = DEMO_POLICIES,
    slurm_registration: Annotated[Registration, typer.Option(
        "--slurm-registration", help="How nodes join slurmctld: dynamic (slurmd -Z, no "
        "names in slurm.conf) or declared (12 names per Slurm pool in slurm.conf, as on Slurm before 22.05).")
    ] = Registration.dynamic,
    prices: Annotated[Path | None, typer.Option("--prices", dir_okay=False)] = None,
    util: Annotated[float, typer.Option(help="Initial GPU utilization of every node, %.")] = 0.0,
    tick: Annotated[str, typer.Option(help="Tick interval written to service.yaml.")] = "5s",
    unprivileged: Annotated[bool, typer.Option(
        "--unprivileged", help="No Slurm and no SSH hosts, even as root.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the stack.")] = 180,
) -> None:
    """Start the sandbox in the background; prints how to run the service against it."""
    directory = directory.resolve()
    if running(read_state(directory)):
        fail(f"a sandbox is already running in {directory} (gpu-autoscaler sandbox down --dir "
             f"{directory})")
    argv = [sys.executable, "-m", "autoscaler.sandbox.stack.supervisor", "--dir", str(directory),
            "--policies", str(policies.resolve()), "--util", str(util), "--tick", tick]
    if prices is not None:
        argv += ["--prices", str(prices.resolve())]
    if unprivileged:
        argv.append("--unprivileged")
    argv += ["--slurm-registration", slurm_registration.value]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sandbox.json").unlink(missing_ok=True)
    proc = ManagedProcess("sandbox", argv, directory / "sandbox.log")

    def settled() -> bool:
        state = read_state(directory)
        return state is not None and state.status in ("ready", "failed")

    problem = ""
    try:
        wait_until(settled, timeout, "the sandbox to be ready", interval=0.5, proc=proc)
    except ProcessError as exc:
        problem = str(exc)
    state = read_state(directory)
    if state is None or state.status != "ready":
        cleanup(directory)
        fail(f"the sandbox did not start: {state.error if state and state.error else problem}\n"
             f"{proc.log_tail(30)}")
    _print_state(state, directory)
    console.print(f"\nRun the service against it:\n  source {directory / 'env'}\n"
                  f"  gpu-autoscaler run --config {directory / 'service.yaml'}\n"
                  f"Stop it: gpu-autoscaler sandbox down --dir {directory}", highlight=False)


@sandbox_app.command("down")
def down(directory: DirOption = DEFAULT_DIR,
         timeout: Annotated[float, typer.Option(help="Seconds to wait for a clean stop.")] = 60,
         ) -> None:
    """Stop everything the sandbox recorded (by PID) and remove its network namespaces."""
    directory = directory.resolve()
    state = read_state(directory)
    if state is None:
        fail(f"no sandbox state in {directory}")
    sup = state.supervisor
    if sup is not None and alive(sup) and state.status != "stopped":
        os.kill(sup.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while alive(sup) and time.monotonic() < deadline:
            time.sleep(0.3)
    for note in cleanup(directory):  # whatever a crashed or slow supervisor left behind
        console.print(note, highlight=False)
    console.print(f"sandbox in {directory} stopped")


@sandbox_app.command("status")
def status(directory: DirOption = DEFAULT_DIR) -> None:
    """What the sandbox runs: endpoints, processes, followed instances."""
    directory = directory.resolve()
    state = read_state(directory)
    if state is None:
        fail(f"no sandbox state in {directory}")
    _print_state(state, directory)
    if not running(state):
        raise typer.Exit(3)


def _print_state(state: StackState | None, directory: Path) -> None:
    if state is None:
        return
    live = running(state)
    console.print(f"sandbox {directory}: [{'green' if live else 'red'}]{state.status}[/]"
                  + (f" — {state.error}" if state.error else ""), highlight=False)
    table = Table(title="Endpoints and files")
    table.add_column("what")
    table.add_column("where", overflow="fold")
    for key, value in sorted(state.endpoints.items()):
        table.add_row(key, value)
    console.print(table)
    procs = Table(title="Processes (stopped by PID on down)")
    for col in ("pid", "name", "alive"):
        procs.add_column(col)
    for p in [state.supervisor, *state.children]:
        if p is not None:
            procs.add_row(str(p.pid), p.name, "yes" if alive(p) else "no")
    console.print(procs)
    if state.nodes:
        nodes = Table(title="Sandbox instances")
        for col in ("node", "instance", "type", "state", "SSH host"):
            nodes.add_column(col)
        for name, info in sorted(state.nodes.items()):
            nodes.add_row(name, info.get("instance_id", ""), info.get("instance_type", ""),
                          info.get("state", "running"), info.get("address", "") or "-")
        console.print(nodes)


def register(app: typer.Typer) -> None:
    from autoscaler.cli import sandbox_market  # it reads this module's options

    sandbox_market.register(sandbox_app)
    app.add_typer(sandbox_app, name="sandbox")
