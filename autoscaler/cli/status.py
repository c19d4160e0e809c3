"""``gpu-autoscaler status``: the running service's /status as tables.

``status_view()`` is also the demo's live view: fleet per pool, utilization, the last
actions with their reasons, and $/h.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from autoscaler.cli.common import console, service_url
from autoscaler.cli.render import actions_table
from autoscaler.cli.service_api import call, shaped, token_from
from autoscaler.cli.status_doc import StatusDoc

STATE_STYLE = {"READY": "green", "DRAINING": "yellow", "DRAINED": "yellow",
               "TERMINATING": "red", "TERMINATED": "dim", "PROVISION_FAILED": "red",
               "BOOTSTRAP_FAILED": "red", "INTERRUPTED": "magenta", "LOST": "red"}


def styled(text: str, style: str) -> str:
    return f"[{style}]{escape(text)}[/]" if style else escape(text)


def fetch_status(url: str, token: str | None) -> tuple[StatusDoc, Any]:
    """/status checked (the CLI's one door: service_api), and as sent (for --json)."""
    raw = call(url, "GET", "/status", token)
    return shaped(StatusDoc, raw, "GET /status"), raw


def pools_table(status: StatusDoc) -> Table:
    fleet = status.fleet
    summaries = status.last_plan.plan.pools if status.last_plan else {}
    table = Table(title=f"Fleet: {len(fleet.nodes)} node(s), ${fleet.hourly_usd:.2f}/h",
                  expand=True)
    for col in ("pool", "nodes", "states", "$/h", "GPU util", "pending GPUs", "data"):
        table.add_column(col, justify="left" if col in ("pool", "states", "data") else "right")
    missing = status.data_missing
    for key in sorted(set(fleet.pools) | set(summaries)):
        pool = fleet.pools.get(key)
        summary = summaries.get(key)
        states = ", ".join(f"{styled(s.lower(), STATE_STYLE.get(s, ''))} {n}"
                           for s, n in (pool.states if pool else {}).items()) or "-"
        util = summary.util_mean if summary else None
        data = styled(missing[key], "red") if key in missing else "[green]ok[/]"
        table.add_row(escape(key), str(pool.nodes if pool else 0), states,
                      f"{pool.hourly_usd if pool else 0:.2f}",
                      "-" if util is None else f"{util:.0f}%",
                      f"{summary.pending_gpus if summary else 0:g}", data)
    return table


def nodes_table(status: StatusDoc) -> Table:
    table = Table(title="Nodes", expand=True)
    for col in ("node", "type", "market", "state", "since", "$/h", "reason"):
        table.add_column(col, justify="right" if col == "$/h" else "left",
                         ratio=3 if col == "reason" else None, overflow="fold")
    for n in status.fleet.nodes:
        table.add_row(escape(n.name), escape(n.instance_type), escape(n.market),
                      styled(n.state, STATE_STYLE.get(n.state, "")), (n.since or "")[11:19],
                      f"{n.hourly_usd:.2f}", escape(n.reason or ""))
    return table


def forecasts_table(status: StatusDoc) -> Table:
    """Predictive pools: the forecast for the current 5-minute bin next to the demand."""
    table = Table(title="Forecasts (predictive capacity)", expand=True)
    for col in ("pool", "mode", "p50", "quantile", "actual", "MAPE 7 d", "floor"):
        table.add_column(col, justify="left" if col in ("pool", "mode", "floor") else "right",
                         ratio=3 if col == "floor" else None, overflow="fold")
    for key, f in sorted(status.forecasts.items()):
        def num(v: float | None) -> str:
            return "-" if v is None else f"{v:g}"

        floor = (f"{'held' if f.applied else 'not held'}: {f.floor_reason}"
                 if f.floor_reason else f.note or "")
        table.add_row(escape(key), escape(f.mode), num(f.p50_gpus), num(f.quantile_gpus),
                      num(f.actual_gpus),
                      "-" if f.rolling_mape is None else f"{f.rolling_mape:.0f}%", escape(floor))
    return table


def spot_scores_table(status: StatusDoc) -> Table:
    """The last read's Spot placement scores: a low one ranks its zone last for spot."""
    table = Table(title="Spot placement scores", expand=True)
    for col in ("region", "zone", "instance types", "score"):
        table.add_column(col, justify="right" if col == "score" else "left", overflow="fold")
    for s in status.spot_scores:
        score = f"{s.score}/10" + (" low: tried last" if s.low else "")
        table.add_row(escape(f"{s.cloud} {s.region}"), escape(s.zone),
                      escape(", ".join(s.instance_types)), styled(score, "yellow" if s.low else ""))
    return table


def header(status: StatusDoc) -> Text:
    loop, leader = status.loop, status.leader
    role = "leader" if leader.is_leader else f"follower (leader: {leader.lease_holder})"
    mode = " DRY RUN" if loop.dry_run else ""
    text = Text(f"gpu-autoscaler{mode} — {role}; {loop.ticks} ticks, last "
                f"{(loop.last_tick_at or '-')[11:19]} ({loop.last_duration_s}s)")
    if loop.last_error:
        text.append(f"\nlast tick failed in {loop.last_error_stage}: {loop.last_error}",
                    style="red")
    for err in status.policy_errors:
        text.append(f"\npolicy error: {err}", style="red")
    for source in status.sources_missing:
        text.append(f"\nsource missing: {source}", style="yellow")
    return text


def last_actions(status: StatusDoc, holds: bool = False) -> RenderableType:
    last = status.last_plan
    if last is None:
        return Text("no plan yet", style="dim")
    plan = last.plan
    actions = [a for a in plan.actions if holds or a.kind != "hold"]
    title = f"Plan {last.id} at {plan.decided_at:%H:%M:%S}" + (" (dry run)" if last.dry_run else "")
    if not actions:
        return Text(f"{title}: no changes", style="dim")
    return actions_table(actions, title=title)


def status_view(status: StatusDoc | Mapping[str, Any], holds: bool = False) -> Group:
    doc = status if isinstance(status, StatusDoc) else StatusDoc.model_validate(status)
    parts: list[RenderableType] = [header(doc), pools_table(doc), nodes_table(doc)]
    if doc.forecasts:
        parts.append(forecasts_table(doc))
    if doc.spot_scores:
        parts.append(spot_scores_table(doc))
    return Group(*parts, last_actions(doc, holds))


def status(
    url: Annotated[str, typer.Option("--url", parser=service_url,
                                     help="The service's HTTP address.")] = "http://127.0.0.1:9464",
    token_env: Annotated[str | None, typer.Option(
        "--token-env", help="Environment variable holding the bearer token.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print /status as JSON.")] = False,
    holds: Annotated[bool, typer.Option("--holds", help="Also show hold actions.")] = False,
) -> None:
    """Show the running service's fleet, last plan with reasons and problems.

    Exit status: 0 the service answered and reports no problem; 1 it cannot
    be reached, or its answer is not a status; 2 it answered but cannot decide
    from all its data: a signal source is missing, or its last tick failed.
    """
    doc, raw = fetch_status(url, None if token_env is None else token_from(token_env))
    if json_out:
        typer.echo(json.dumps(raw, indent=2))
    else:
        console.print(status_view(doc, holds))
    if degraded(doc):
        raise typer.Exit(2)


def degraded(status: StatusDoc) -> bool:
    """A source missing (which freezes scale-down) or a failed last tick. A policy error is
    shown but not counted: its team keeps its last good policy, and `policy validate`
    is the check for files."""
    return bool(status.sources_missing or status.loop.last_error)


def register(app: typer.Typer) -> None:
    app.command("status")(status)
