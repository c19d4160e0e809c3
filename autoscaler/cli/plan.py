"""``gpu-autoscaler plan``: decide from a recorded snapshot and show what would happen."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from autoscaler.cli.common import PoliciesOption, PricesOption, catalog_from, console, fail
from autoscaler.cli.render import actions_table, pools_table
from autoscaler.engine import DecisionInput, EngineSettings, Plan, decide
from autoscaler.policy import PolicyLoadError, load_policies

SNAPSHOT_HELP = (
    "Recorded engine input (JSON): {now, fleet: {nodes, history}, snapshot: {...}}. "
    "`gpu-autoscaler signals --json` writes one from the live sources; the format is "
    "documented in README.md (\"Snapshot files\")."
)


def load_input(path: Path) -> DecisionInput:
    try:
        return DecisionInput.model_validate_json(path.read_text())
    except OSError as exc:
        fail(f"cannot read snapshot {path}: {exc.strerror}")
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:20]]
        fail(f"{path} is not a valid snapshot:\n" + "\n".join(lines))


def engine_plan(policies_dir: Path, snapshot: Path, prices: Path | None,
                settings: EngineSettings) -> Plan:
    catalog = catalog_from(prices)
    try:
        policies = load_policies(policies_dir, catalog)
    except PolicyLoadError as exc:
        fail(f"policies in {policies_dir} are invalid:\n{exc}")
    data = load_input(snapshot)
    return decide(policies, data.fleet, data.snapshot, data.now, catalog=catalog, settings=settings)


def plan(
    snapshot: Annotated[Path, typer.Option("--snapshot", "-s", help=SNAPSHOT_HELP, exists=True,
                                           dir_okay=False)],
    policies: PoliciesOption = Path("policies"),
    prices: PricesOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    max_gpus: Annotated[int | None, typer.Option(help="Global GPU cap across teams.")] = None,
    max_hourly_usd: Annotated[float | None, typer.Option(help="Global $/h cap.")] = None,
) -> None:
    """Decide from a recorded snapshot and print the actions with their reasons.

    Nothing is changed: this is the preview of one engine tick.
    """
    settings = EngineSettings(max_gpus=max_gpus, max_hourly_usd=max_hourly_usd)
    result = engine_plan(policies, snapshot, prices, settings)
    if json_out:
        typer.echo(result.model_dump_json(indent=2))
        return
    console.print(actions_table(result.actions, title=f"Plan at {result.decided_at:%Y-%m-%d %H:%M:%S %Z}"))
    console.print(pools_table(result))
    if not result.changes():
        console.print("[dim]No changes: the fleet already matches the policies.[/]")


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
