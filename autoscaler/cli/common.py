"""Options and helpers shared by several commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from autoscaler.catalog import Catalog, CatalogError, load_catalog

console = Console()
err_console = Console(stderr=True)

PricesOption = Annotated[
    Path | None,
    typer.Option(
        "--prices",
        help="Operator price file (YAML: prices: {cloud: {type: {on_demand, spot_discount}}}). "
        "Needed for Alibaba Cloud types, which have no built-in price.",
        exists=True, dir_okay=False,
    ),
]
PoliciesOption = Annotated[
    Path,
    typer.Option("--policies", "-p", help="Directory of team policy files (one YAML per team).",
                 file_okay=False),
]


def fail(message: str, code: int = 1) -> NoReturn:
    # Messages quote files and values an operator did not write: never read them as markup.
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def catalog_from(prices: Path | None) -> Catalog:
    try:
        return load_catalog(prices)
    except CatalogError as exc:
        fail(str(exc))
