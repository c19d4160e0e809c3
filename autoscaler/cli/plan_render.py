"""Rendering of Terraform plan previews: rich tables for the terminal, Markdown for PRs.

Only node names, types, markets, zones, prices and the engine's reasons are shown;
nothing from the workspace's variables (user data) or the environment ever is.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import RenderableType
from rich.table import Table

from autoscaler.actuators.terraform.preview import PoolPreview
from autoscaler.model.plan import Plan, target_of

_STATUS = {
    "planned": "terraform plan saved",
    "unchanged": "unchanged (not planned)",
    "not-configured": "no Terraform inputs for this region (engine only)",
    "error": "terraform plan failed",
}
_ACTION_STYLE = {"create": "green", "destroy": "red", "replace": "yellow", "update": "cyan"}


def money(value: float) -> str:
    return f"${value:,.2f}/h"


def delta(value: float) -> str:
    sign = "+" if value > 0 else ("-" if value < 0 else "±")
    return f"{sign}${abs(value):,.2f}/h"


def counts(p: PoolPreview) -> str:
    if p.status != "planned":
        return "-"
    by = {k: sum(1 for c in p.changes if c.action == k) for k in _ACTION_STYLE}
    return ", ".join(f"{n} {k}" for k, n in by.items() if n) or "no changes"


def preview_tables(previews: Sequence[PoolPreview]) -> list[RenderableType]:
    summary = Table(title="Terraform plan per pool", expand=True)
    for col in ("pool", "status", "changes", "$/h before", "$/h after", "delta"):
        summary.add_column(col, justify="right" if col.startswith(("$", "delta")) else "left")
    out: list[RenderableType] = [summary]
    for p in previews:
        status = f"[red]{_STATUS[p.status]}[/]" if p.status == "error" else _STATUS[p.status]
        summary.add_row(p.pool, status, counts(p), money(p.hourly_before),
                        money(p.hourly_after), delta(p.delta))
        if p.changes or p.error:
            out.append(_pool_detail(p))
    return out


def _pool_detail(p: PoolPreview) -> Table:
    table = Table(title=f"{p.pool} ({p.cloud} {p.region})", expand=True, show_header=True)
    table.add_column("node")
    table.add_column("action")
    table.add_column("type / market / zone")
    for c in p.changes:
        style = _ACTION_STYLE.get(c.action, "")
        table.add_row(c.node, f"[{style}]{c.action}[/]", c.describe())
    if p.error:
        table.add_row("-", "[red]error[/]", p.error.splitlines()[0])
    if p.image:
        table.add_row("", "[dim]image[/]", p.image)
    for reason in p.reasons:
        table.add_row("", "[dim]why[/]", reason)
    if p.unpriced:
        table.add_row("", "[dim]note[/]", f"no price for {', '.join(p.unpriced)}")
    return table


def preview_markdown(plan: Plan, previews: Sequence[PoolPreview] | None) -> str:
    lines = [f"## gpu-autoscaler plan — {plan.decided_at:%Y-%m-%d %H:%M %Z}", ""]
    if previews is not None:
        lines += ["| pool | status | changes | $/h before | $/h after | delta |",
                  "|---|---|---|---:|---:|---:|"]
        for p in previews:
            lines.append(f"| `{p.pool}` | {_STATUS[p.status]} | {counts(p)} | "
                         f"{money(p.hourly_before)} | {money(p.hourly_after)} | "
                         f"**{delta(p.delta)}** |")
        total = sum(p.delta for p in previews)
        lines += ["", f"Total change: **{delta(total)}**", ""]
        for p in previews:
            lines += _pool_markdown(p)
    else:
        lines += _actions_markdown(plan)
    if plan.placements:
        lines += ["", "### Placement groups", ""]
        for c in plan.placements:  # the offers compared, then why one won
            lines += [f"- `{c.job}` -> `{c.pool}`: " + "; ".join(c.compared),
                      f"  - why: {c.reason.removeprefix(f'job {c.job}: ')}"]
    if plan.unserved:  # never bought for: the team should hear why
        lines += ["", "### Pending jobs no pool can run", ""]
        lines += [f"- `{j.id}`{f' (team {j.team})' if j.team else ''}: {j.reason}"
                  for j in plan.unserved]
    return "\n".join(lines).rstrip() + "\n"


def _pool_markdown(p: PoolPreview) -> list[str]:
    if not (p.changes or p.error or p.reasons):
        return []
    lines = [f"### `{p.pool}` ({p.cloud} {p.region})", ""]
    lines += [f"- **{c.action}** `{c.node}`: {c.describe()}" for c in p.changes]
    if p.error:
        lines.append(f"- **error**: {p.error.splitlines()[0]}")
    if p.image:
        lines.append(f"- **image**: {p.image}")
    if p.reasons:
        lines += ["", "Why:"] + [f"- {r}" for r in p.reasons]
    return [*lines, ""]


def _actions_markdown(plan: Plan) -> list[str]:
    if not plan.actions:
        return ["No changes: the fleet already matches the policies."]
    lines = ["| pool | action | target | reason |", "|---|---|---|---|"]
    for a in plan.actions:
        lines.append(f"| `{a.pool}` | {a.kind} | {target_of(a)} | {a.reason} |")
    return lines
