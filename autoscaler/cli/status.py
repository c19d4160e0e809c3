"""``gpu-autoscaler status``: the running service's /status as tables.

``status_view()`` is also the demo's live view: fleet per pool, utilization, the last
actions with their reasons, and $/h.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from autoscaler.cli.common import console, fail
from autoscaler.cli.render import actions_table
from autoscaler.model.plan import Plan

STATE_STYLE = {"READY": "green", "DRAINING": "yellow", "DRAINED": "yellow",
               "TERMINATING": "red", "TERMINATED": "dim", "PROVISION_FAILED": "red",
               "BOOTSTRAP_FAILED": "red", "INTERRUPTED": "magenta", "LOST": "red"}


def styled(text: str, style: str) -> str:
    return f"[{style}]{escape(text)}[/]" if style else escape(text)


def fetch_status(url: str, token: str | None, timeout: float = 10) -> dict[str, Any]:
    req = urllib.request.Request(url.rstrip("/") + "/status")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            fail(f"{url}: the service wants a bearer token (--token-env NAME)")
        fail(f"{url}: HTTP {exc.code}")
    except (urllib.error.URLError, OSError) as exc:
        fail(f"cannot reach the service at {url}: {getattr(exc, 'reason', exc)}")


def pools_table(status: dict[str, Any]) -> Table:
    fleet = status.get("fleet", {})
    summaries = ((status.get("last_plan") or {}).get("plan") or {}).get("pools", {})
    table = Table(title=f"Fleet: {len(fleet.get('nodes', []))} node(s), "
                        f"${fleet.get('hourly_usd', 0):.2f}/h", expand=True)
    for col in ("pool", "nodes", "states", "$/h", "GPU util", "pending GPUs", "data"):
        table.add_column(col, justify="left" if col in ("pool", "states", "data") else "right")
    missing = status.get("data_missing", {})
    for key in sorted(set(fleet.get("pools", {})) | set(summaries)):
        pool = fleet.get("pools", {}).get(key, {"nodes": 0, "hourly_usd": 0, "states": {}})
        summary = summaries.get(key, {})
        states = ", ".join(f"{styled(s.lower(), STATE_STYLE.get(s, ''))} {n}"
                           for s, n in pool["states"].items()) or "-"
        util = summary.get("util_mean")
        data = styled(missing[key], "red") if key in missing else "[green]ok[/]"
        table.add_row(key, str(pool["nodes"]), states, f"{pool['hourly_usd']:.2f}",
                      "-" if util is None else f"{util:.0f}%",
                      f"{summary.get('pending_gpus', 0):g}", data)
    return table


def nodes_table(status: dict[str, Any]) -> Table:
    table = Table(title="Nodes", expand=True)
    for col in ("node", "type", "market", "state", "since", "$/h", "reason"):
        table.add_column(col, justify="right" if col == "$/h" else "left",
                         ratio=3 if col == "reason" else None, overflow="fold")
    for n in status.get("fleet", {}).get("nodes", []):
        since = (n.get("since") or "")[11:19]
        table.add_row(n["name"], n["instance_type"], n["market"],
                      styled(n["state"], STATE_STYLE.get(n["state"], "")), since,
                      f"{n['hourly_usd']:.2f}", escape(n.get("reason") or ""))
    return table


def forecasts_table(status: dict[str, Any]) -> Table:
    """Predictive pools: the forecast for the current 5-minute bin next to the demand."""
    table = Table(title="Forecasts (predictive capacity)", expand=True)
    for col in ("pool", "mode", "p50", "quantile", "actual", "MAPE 7 d", "floor"):
        table.add_column(col, justify="left" if col in ("pool", "mode", "floor") else "right",
                         ratio=3 if col == "floor" else None, overflow="fold")
    for key, f in sorted(status.get("forecasts", {}).items()):
        def num(v: Any) -> str:
            return "-" if v is None else f"{v:g}"

        mape = f.get("rolling_mape")
        floor = (f"{'held' if f.get('applied') else 'not held'}: {f['floor_reason']}"
                 if f.get("floor_reason") else f.get("note") or "")
        table.add_row(escape(key), f.get("mode", ""), num(f.get("p50_gpus")),
                      num(f.get("quantile_gpus")), num(f.get("actual_gpus")),
                      "-" if mape is None else f"{mape:.0f}%", escape(floor))
    return table


def header(status: dict[str, Any]) -> Text:
    loop, leader = status.get("loop", {}), status.get("leader", {})
    role = "leader" if leader.get("is_leader") else f"follower (leader: {leader.get('lease_holder')})"
    mode = " DRY RUN" if loop.get("dry_run") else ""
    text = Text(f"gpu-autoscaler{mode} — {role}; {loop.get('ticks', 0)} ticks, last "
                f"{(loop.get('last_tick_at') or '-')[11:19]} ({loop.get('last_duration_s')}s)")
    if loop.get("last_error"):
        text.append(f"\nlast tick failed in {loop.get('last_error_stage')}: {loop['last_error']}",
                    style="red")
    for err in status.get("policy_errors", []):
        text.append(f"\npolicy error: {err}", style="red")
    for source in status.get("sources_missing", []):
        text.append(f"\nsource missing: {source}", style="yellow")
    return text


def last_actions(status: dict[str, Any], holds: bool = False) -> RenderableType:
    last = status.get("last_plan")
    if not last:
        return Text("no plan yet", style="dim")
    plan = Plan.model_validate(last["plan"])
    actions = [a for a in plan.actions if holds or a.kind != "hold"]
    title = f"Plan {last['id']} at {plan.decided_at:%H:%M:%S}" + (" (dry run)" if last["dry_run"] else "")
    if not actions:
        return Text(f"{title}: no changes", style="dim")
    return actions_table(actions, title=title)


def status_view(status: dict[str, Any], holds: bool = False) -> Group:
    parts: list[RenderableType] = [header(status), pools_table(status), nodes_table(status)]
    if status.get("forecasts"):
        parts.append(forecasts_table(status))
    return Group(*parts, last_actions(status, holds))


def status(
    url: Annotated[str, typer.Option("--url", help="The service's HTTP address.")] =
    "http://127.0.0.1:9464",
    token_env: Annotated[str | None, typer.Option(
        "--token-env", help="Environment variable holding the bearer token.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print /status as JSON.")] = False,
    holds: Annotated[bool, typer.Option("--holds", help="Also show hold actions.")] = False,
) -> None:
    """Show the running service's fleet, last plan with reasons and problems."""
    token = None
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            fail(f"environment variable {token_env} is not set")
    data = fetch_status(url, token)
    if json_out:
        typer.echo(json.dumps(data, indent=2))
        return
    console.print(status_view(data, holds))


def register(app: typer.Typer) -> None:
    app.command("status")(status)
