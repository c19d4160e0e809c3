"""``gpu-autoscaler policy validate|schema``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from autoscaler.cli.common import PricesOption, catalog_from, console, err_console, fail
from autoscaler.policy import json_schema, load_dir
from autoscaler.policy.loader import policy_files

policy_app = typer.Typer(help="Check team policy files and export their JSON Schema.",
                         no_args_is_help=True)


@policy_app.command("validate")
def validate(
    directory: Annotated[Path, typer.Argument(help="Directory of team policy files.")],
    prices: PricesOption = None,
) -> None:
    """List every error in every policy file as file:line:column, key path and reason.

    Exits 1 when any file has an error or the directory holds no policy file (a check
    that validated nothing must not pass), 0 when all are valid.
    """
    if directory.is_file():
        fail(f"{directory} is a file: give the directory of team policy files")
    files = policy_files(directory) if directory.is_dir() else []
    if directory.is_dir() and not files:
        fail(f"no policy file (*.yaml, *.yml) found in {directory}")
    policies, errors = load_dir(directory, catalog_from(prices))
    for error in errors:
        err_console.print(str(error), highlight=False, soft_wrap=True, markup=False)
    if errors:
        bad = len({e.file for e in errors})
        err_console.print(f"[red]{len(errors)} error(s) in {bad} of {len(files)} file(s)[/]")
        raise typer.Exit(1)
    pools = sum(len(p.pools) for p in policies.values())
    console.print(f"[green]ok:[/] {len(files)} file(s), {len(policies)} team(s), {pools} pool(s)")


@policy_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of a team policy file (for editors and CI linters)."""
    typer.echo(json.dumps(json_schema(), indent=2))


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")
