"""Rich tables for plans and pools, shared by `plan`, `status` and the demo's live view."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from autoscaler.model.plan import Action, Plan, target_of

_STYLE = {
    "launch": "green", "cancel_drain": "green", "drain": "yellow", "replace": "yellow",
    "terminate": "red", "hold": "dim", "report_job": "cyan",
    "start_warm": "green",
}


def actions_table(actions: list[Action], title: str = "Actions") -> Table:
    table = Table(title=title, show_lines=True, expand=True)
    table.add_column("pool / action", ratio=2, overflow="fold")
    table.add_column("reason", ratio=3)
    for a in actions:
        style = _STYLE.get(a.kind, "")
        reason = a.reason.split(": ", 1)[1] if a.reason.startswith(a.pool + ": ") else a.reason
        # Names and reasons are data (a /status answer's, too): never read as markup.
        table.add_row(f"{escape(a.pool)}\n[{style}]{escape(a.kind)}[/] {escape(target_of(a))}",
                      escape(reason))
    return table


def pools_table(plan: Plan) -> Table:
    table = Table(title="Pools after this plan", expand=True)
    for col in ("pool", "nodes", "GPUs", "$/h", "floor", "mean util", "pending GPUs", "data"):
        table.add_column(col, justify="left" if col in ("pool", "data") else "right")
    for key, s in sorted(plan.pools.items()):
        util = "-" if s.util_mean is None else f"{s.util_mean:.0f}%"
        data = f"[red]{escape(s.data_missing)}[/]" if s.data_missing else "[green]ok[/]"
        table.add_row(escape(key), str(s.nodes), str(s.gpus), f"{s.hourly_usd:.2f}", str(s.floor), util,
                      f"{s.pending_gpus:g}", data)
    return table


def placements_table(plan: Plan) -> Table | None:
    """Per pending job a placement group compared for: the pools and why one won."""
    if not plan.placements:
        return None
    table = Table(title="Placement groups: where pending jobs launch", show_lines=True, expand=True)
    table.add_column("job", ratio=1, overflow="fold")
    table.add_column("pool chosen", ratio=1, overflow="fold")
    table.add_column("pools compared", ratio=3)
    table.add_column("why", ratio=3)
    for c in plan.placements:
        table.add_row(escape(c.job), escape(c.pool), escape("\n".join(c.compared)), escape(c.reason))
    return table


def unserved_table(plan: Plan) -> Table | None:
    """Pending jobs no pool's nodes can run: never bought for, each with its why."""
    if not plan.unserved:
        return None
    table = Table(title="Pending jobs no pool can run (not bought for)", show_lines=True, expand=True)
    table.add_column("job", ratio=1, overflow="fold")
    table.add_column("team", ratio=1, overflow="fold")
    table.add_column("why no pool runs it", ratio=4)
    for j in plan.unserved:
        table.add_row(escape(j.id), escape(j.team or "-"), escape(j.reason))
    return table
