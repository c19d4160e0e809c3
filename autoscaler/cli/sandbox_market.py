"""``gpu-autoscaler sandbox fault|scores``: the running sandbox's spot market, changed live.

The sandbox's moto refuses launches that match a capacity fault and answers
GetSpotPlacementScores from a score file; it reads both files on every request, so a change
counts from the next launch or read. These commands check what they write the way the
service checks a pool (a catalog type, a zone of its region, a code the service treats as a
capacity error), so a typo is refused here instead of silently matching nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from autoscaler.actuators.terraform.errors import CAPACITY_CODES
from autoscaler.catalog import default_catalog
from autoscaler.catalog.catalog import UnknownInstanceTypeError
from autoscaler.catalog.regions import REGIONS, region_problem, zone_problem
from autoscaler.cli.common import console, fail
from autoscaler.cli.sandbox import DEFAULT_DIR, DirOption, running
from autoscaler.sandbox.services.moto_server import (
    CapacityFault,
    SpotScoreRule,
    add_fault,
    read_faults,
    read_scores,
    write_faults,
    write_scores,
)
from autoscaler.sandbox.stack.state import read_state

fault_app = typer.Typer(
    help="Capacity faults: launches of a type, zone or market that the sandbox's moto "
    "refuses with a capacity error, as EC2 does in a spot outage.", no_args_is_help=True)
scores_app = typer.Typer(
    help="Spot placement scores (1-10 per zone) that the sandbox's moto answers; the service "
    "reads them with clouds.aws.spot_placement_scores: true.", no_args_is_help=True)


class Market(StrEnum):
    spot = "spot"
    on_demand = "on-demand"


# EC2's codes among those the service treats as a capacity error (the dotted ones are
# Alibaba Cloud's, which moto does not stand for).
Code = StrEnum("Code", {c: c for c in CAPACITY_CODES if "." not in c})  # type: ignore[misc]


def _market_file(directory: Path, key: str, name: str) -> Path:
    """The file a running sandbox in ``directory`` reads; refused when none runs there (its
    moto clears both files when it starts, so a file written before would not count)."""
    directory = directory.resolve()
    state = read_state(directory)
    if not running(state):
        fail(f"no running sandbox in {directory} (start one: gpu-autoscaler sandbox up --dir "
             f"{directory})")
    assert state is not None
    return Path(state.endpoints.get(key) or directory / "moto" / name)


def _faults_file(directory: Path) -> Path:
    return _market_file(directory, "moto_faults", "moto-faults.json")


def _scores_file(directory: Path) -> Path:
    return _market_file(directory, "moto_spot_scores", "moto-spot-scores.json")


def _check_types(types: Sequence[str]) -> None:
    catalog = default_catalog()
    for name in types:
        try:
            catalog.get("aws", name)
        except UnknownInstanceTypeError as exc:
            fail(str(exc))


def _region_of(zone: str) -> str:
    region = next((r for r, zones in REGIONS["aws"].items() if zone in zones), None)
    if region is None:
        fail(f"'{zone}' is not an AWS availability zone in the catalog (a zone is its region "
             "and a letter, e.g. us-east-1a)")
    return region


def _show_faults(path: Path) -> None:
    faults = read_faults(path)
    if not faults:
        console.print("no capacity faults: every launch succeeds", highlight=False)
        return
    table = Table(title=f"Capacity faults ({path})")
    for col in ("type", "zone", "market", "refused with"):
        table.add_column(col)
    for f in faults:
        table.add_row(f.instance_type or "any", f.zone or "any", f.market or "any", f.code)
    console.print(table)


def _show_scores(path: Path) -> None:
    scores = read_scores(path)
    if not scores:
        console.print("no Spot placement scores: every request gets an empty answer",
                      highlight=False)
        return
    table = Table(title=f"Spot placement scores ({path})")
    for col in ("region", "zone", "score", "for types"):
        table.add_column(col)
    for s in scores:
        table.add_row(s.region, s.zone, str(s.score), ", ".join(s.instance_types) or "any set")
    console.print(table)


@fault_app.command("add")
def fault_add(
    instance_type: Annotated[str, typer.Option("--type", help="Instance type (any when left out).")] = "",
    zone: Annotated[str, typer.Option("--zone", help="Availability zone (any when left out).")] = "",
    market: Annotated[Market | None, typer.Option(
        "--market", help="Refuse only spot or only on-demand launches (both when left out).")] = None,
    code: Annotated[Code, typer.Option(
        "--code", help="The EC2 error code of the refusal.")] = Code("InsufficientInstanceCapacity"),
    directory: DirOption = DEFAULT_DIR,
) -> None:
    """Refuse every launch that matches all the given fields, from the next launch on."""
    if not (instance_type or zone or market):
        fail("name at least one of --type, --zone and --market (a fault on every launch is "
             "not what a spot outage looks like)")
    if instance_type:
        _check_types([instance_type])
    if zone:
        _region_of(zone)
    path = _faults_file(directory)
    add_fault(path, CapacityFault(instance_type, zone, market.value if market else "", code.value))
    _show_faults(path)


@fault_app.command("list")
def fault_list(directory: DirOption = DEFAULT_DIR) -> None:
    """The capacity faults in force."""
    _show_faults(_faults_file(directory))


@fault_app.command("clear")
def fault_clear(directory: DirOption = DEFAULT_DIR) -> None:
    """End every capacity fault: launches succeed again."""
    path = _faults_file(directory)
    write_faults(path, [])
    _show_faults(path)


@scores_app.command("set")
def scores_set(
    region: Annotated[str, typer.Argument(help="AWS region asked about, e.g. us-east-1.")],
    zone_scores: Annotated[list[str], typer.Argument(
        metavar="ZONE=SCORE...", help="A score of 1-10 per zone of the region, e.g. us-east-1a=9.")],
    types: Annotated[str, typer.Option(
        "--types", help="Comma-separated instance types: the scores answer only a request for "
        "exactly this set (any set when left out).")] = "",
    directory: DirOption = DEFAULT_DIR,
) -> None:
    """Answer these scores from now on, replacing those of the same zones and set of types."""
    problem = region_problem("aws", region)
    if problem:
        fail(problem)
    wanted = tuple(sorted({t.strip() for t in types.split(",") if t.strip()}))
    _check_types(wanted)
    new: list[SpotScoreRule] = []
    for item in zone_scores:
        zone, sep, text = item.partition("=")
        if not sep or not text.strip().isdigit() or not 1 <= int(text) <= 10:
            fail(f"'{item}' is not ZONE=SCORE with a score of 1-10 (e.g. {region}a=9)")
        problem = zone_problem("aws", region, zone)
        if problem:
            fail(problem)
        new.append(SpotScoreRule(region, zone, int(text), wanted))
    path = _scores_file(directory)
    replaced = {(s.region, s.zone, s.instance_types) for s in new}
    kept = [s for s in read_scores(path) if (s.region, s.zone, tuple(sorted(s.instance_types)))
            not in replaced]
    write_scores(path, [*kept, *new])
    _show_scores(path)


@scores_app.command("list")
def scores_list(directory: DirOption = DEFAULT_DIR) -> None:
    """The Spot placement scores answered."""
    _show_scores(_scores_file(directory))


@scores_app.command("clear")
def scores_clear(directory: DirOption = DEFAULT_DIR) -> None:
    """Answer no scores (an empty answer, as for a region EC2 has no data on)."""
    path = _scores_file(directory)
    write_scores(path, [])
    _show_scores(path)


def register(sandbox_app: typer.Typer) -> None:
    sandbox_app.add_typer(fault_app, name="fault")
    sandbox_app.add_typer(scores_app, name="scores")
