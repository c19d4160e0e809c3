"""Options and helpers shared by several commands."""

from __future__ import annotations

import math
import os
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import typer
import typer.core
from rich.console import Console, ConsoleDimensions
from rich.markup import escape

from autoscaler.catalog import Catalog, CatalogError, load_catalog

# Output that is not a terminal (a pipe, a log, CI) has no width to fit; rich would assume
# 80 columns and cut pool names, URLs and help text with "…". Wide instead, unless the
# caller set COLUMNS (or TERMINAL_WIDTH for the help).
WIDE = 200


class WideWhenPiped(Console):
    """A console WIDE columns wide when it does not write to a terminal and COLUMNS is unset;
    decided at each print, as rich decides its size."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._width is not None or self.is_terminal or "COLUMNS" in os.environ:
            return size
        return ConsoleDimensions(WIDE, size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


console = WideWhenPiped()
err_console = WideWhenPiped(stderr=True)

# --help into a pipe (| less, | grep, a README) is plain text, as git's and kubectl's, each
# line as long as its words (the root command's context is WIDE columns wide, and its
# subcommands' inherit it): rich's boxed panels would cut it at 80 columns (a URL, a
# default) or pad every line to WIDE.
PIPED_HELP = not sys.stdout.isatty() and "COLUMNS" not in os.environ
if PIPED_HELP:
    typer.core.HAS_RICH = False

PricesOption = Annotated[
    Path | None,
    typer.Option(
        "--prices",
        help="Operator price file (YAML: prices: {cloud: {type: {on_demand, spot_discount}}}, "
        "or per region: {cloud: {region: {type: {...}}}}). Needed for Alibaba Cloud types, "
        "which have no built-in price.",
        exists=True, dir_okay=False,
    ),
]
PoliciesOption = Annotated[
    Path,
    typer.Option("--policies", "-p", help="Directory of team policy files (one YAML per team).",
                 file_okay=False),
]


def say_error(message: str) -> None:
    # Messages quote files and values an operator did not write: never read them as markup.
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = 1) -> NoReturn:
    say_error(message)
    raise typer.Exit(code)


def catalog_from(prices: Path | None) -> Catalog:
    try:
        return load_catalog(prices)
    except CatalogError as exc:
        fail(str(exc))


def finite(low: float, high: float, unit: str = "") -> Callable[[str], float]:
    """A parser for a number option: finite and in [low, high] (``float()`` alone takes
    ``nan``, ``inf`` and ``-1``, and a NaN deadline is never reached)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            raise ValueError(f"{text!r} is not a number from {low:g} to {high:g}{unit}")
        return value

    return parse


def service_url(text: str) -> str:
    """``http(s)://host[:port][/path]``: urllib would read anything else as a local file, an
    unknown scheme or a host with a space in it, and raise."""
    parts = urllib.parse.urlsplit(text)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if (parts.scheme not in ("http", "https") or not parts.hostname or not port_ok
            or parts.query or parts.fragment or any(c.isspace() or not c.isprintable() for c in text)):
        raise ValueError(f"{text[:80]!r} is not an http(s)://host[:port] address")
    return text.rstrip("/")
