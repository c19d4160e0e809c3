"""``gpu-autoscaler doctor --config FILE``: the preflight, one table with a reason per row."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from autoscaler.cli.common import console, fail
from autoscaler.cli.logs import configure
from autoscaler.cli.run import CONFIG_HELP
from autoscaler.service.doctor import CHECKS, TOTAL_S, Result, Status, diagnose, passed

STYLE = {Status.OK: "green", Status.WARN: "yellow", Status.FAIL: "bold red", Status.SKIP: "dim"}
HELP = (
    "Check every dependency of the service once, up front: one row per check with its "
    f"reason; exit status 0 only if no row fails. Checks run side by side, each with its own "
    f"deadline (the whole command takes at most {TOTAL_S:g}s). Secrets are read, never "
    "printed. A check that does not apply to this config (no Kubernetes pool...) is skip; "
    "one that works but is not how production should run (root logins on nodes) is warn.\n\n"
    "config, policies, store: the config file, the team policies and the store open as "
    "`run` opens them (an empty store is created at the schema's head).\n\n"
    + "\n\n".join(f"{c.name}: {c.help}" for c in CHECKS)
)


def doctor(
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP, exists=True,
                                         dir_okay=False)],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: ok and the rows "
                                          "(name, status, reason, seconds).")] = False,
    only: Annotated[list[str] | None, typer.Option(
        "--only", help="Run only this check (repeatable), after config, policies and store.")] = None,
) -> None:
    # Each row reports its failure; the components' own warnings would say it twice.
    configure(logging.ERROR)
    try:
        rows = diagnose(config, only or ())
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps({"ok": passed(rows), "rows": [_row(r) for r in rows]}, indent=2))
    else:
        console.print(table(rows), soft_wrap=False)
    if not passed(rows):
        raise typer.Exit(1)


def _row(row: Result) -> dict[str, object]:
    return {"name": row.name, "status": row.status.value, "reason": row.reason,
            "seconds": row.seconds}


def table(rows: list[Result]) -> Table:
    failed = sum(r.status is Status.FAIL for r in rows)
    warned = sum(r.status is Status.WARN for r in rows)
    verdict = f"{failed} failed" if failed else "all checks pass"
    out = Table(title=f"gpu-autoscaler doctor: {verdict}"
                      + (f" ({warned} warning{'s' if warned > 1 else ''})" if warned else ""),
                title_justify="left", show_lines=False)
    out.add_column("check", no_wrap=True)
    out.add_column("status", no_wrap=True)
    out.add_column("reason", overflow="fold")
    out.add_column("s", justify="right", no_wrap=True)
    for r in rows:
        # Reasons quote files, URLs and answers from other systems: never markup.
        out.add_row(escape(r.name), f"[{STYLE[r.status]}]{r.status.value}[/]", escape(r.reason),
                    f"{r.seconds:.1f}")
    return out


def register(app: typer.Typer) -> None:
    app.command("doctor", help=HELP)(doctor)
