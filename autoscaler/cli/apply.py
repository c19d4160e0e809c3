"""``gpu-autoscaler apply``: apply exactly the plans a previous ``plan --settings`` saved.

Each pool's saved plan file is applied as it was previewed; a plan made against an older
state (another apply happened since) is refused, so what runs is what was reviewed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from autoscaler.actuators.terraform import (
    ApplyResult,
    BakedImage,
    PoolPlan,
    PoolWorkspace,
    TerraformError,
    TerraformSettings,
)
from autoscaler.cli.common import console, err_console, fail
from autoscaler.cli.plan import terraform_settings


def pending_plans(settings: TerraformSettings, only: list[str]) -> list[PoolPlan]:
    """Saved plans under the workdir (``<team>/<pool>/plan/pending.json``, and each shard's
    under ``<team>/<pool>/shards/<k>/``), maybe filtered. A file that is not a saved plan
    stops everything (nothing is applied) with one line."""
    plans = []
    root = Path(settings.workdir)
    for path in sorted([*root.glob("*/*/plan/pending.json"),
                        *root.glob("*/*/shards/*/plan/pending.json")]):
        try:
            plans.append(PoolPlan.model_validate_json(path.read_bytes()))
        except (OSError, ValidationError) as exc:
            first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else exc.strerror
            fail(f"{path}: not a saved plan ({first}); nothing applied: run `gpu-autoscaler "
                 "plan --settings ...` again")
    unknown = sorted(set(only) - planned_pools(root))
    if unknown:
        known = sorted(planned_pools(root))
        fail(f"--pool {', '.join(unknown)}: no such pool planned under {root} (pools planned "
             f"there: {', '.join(known) or 'none'}); nothing applied")
    return [p for p in plans if not only or p.pool in only]


def planned_pools(root: Path) -> set[str]:
    """``team/pool`` of every pool ``plan --settings`` made a workspace for under ``root``
    (shard 0's, or a shard's): one without a saved plan had no change, one not here is a typo."""
    found = [*root.glob("*/*/main.tf.json"), *root.glob("*/*/shards/*/main.tf.json")]
    return {"/".join(p.relative_to(root).parts[:2]) for p in found}


def plan_workspace(settings: TerraformSettings, pool_plan: PoolPlan) -> PoolWorkspace:
    """The workspace a saved plan was made in. A baked pool's gets the image the plan
    recorded (its hash and when_stale): the check before the apply writes the root module
    again, and it must stay the one that was planned, not fall back to the base image's."""
    team, pool = pool_plan.pool.split("/", 1)
    chosen = pool_plan.image
    image = None if chosen is None else BakedImage(chosen.hash, chosen.when_stale)
    return PoolWorkspace(settings, team, pool, pool_plan.cloud, pool_plan.region,
                         shard=pool_plan.shard, image=image)


def apply_one(settings: TerraformSettings, pool_plan: PoolPlan) -> ApplyResult:
    return plan_workspace(settings, pool_plan).apply(pool_plan)


def _print_result(label: str, result: ApplyResult) -> None:
    mark = "[green]applied[/]" if result.ok else "[red]partly applied[/]"
    console.print(f"{label}: {mark} in {result.seconds:.0f}s — created "
                  f"{len(result.created)}, destroyed {len(result.destroyed)}, "
                  f"{len(result.nodes)} node(s) now")
    for node, message in sorted(result.failed.items()):
        console.print(f"  [red]failed[/] {node}: {message.splitlines()[0]}", highlight=False)
    for err in result.capacity_errors:
        console.print(f"  capacity: {err.code} for {err.instance_type} {err.market.value} "
                      f"in {err.zone or err.region}", highlight=False)
    for message in result.errors:
        console.print(f"  [red]error[/] {message.splitlines()[0]}", highlight=False)


def apply(
    settings_file: Annotated[Path, typer.Option(
        "--settings", help="The Terraform settings (or the whole service config) the plans were "
        "saved with: `gpu-autoscaler plan --settings`'s.", exists=True, dir_okay=False)],
    terraform_dir: Annotated[Path | None, typer.Option(
        "--terraform-dir", help="Root of the per-pool workspaces (overrides the settings).",
        file_okay=False)] = None,
    pools: Annotated[list[str] | None, typer.Option(
        "--pool", help="Apply only this pool (team/pool); repeatable. A pool with no "
        "workspace under the workdir is refused, and nothing is applied.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print results as JSON.")] = False,
) -> None:
    """Apply the Terraform plans saved by `gpu-autoscaler plan --settings`, exactly.

    It creates and destroys cloud instances without asking: what the plan
    showed is what runs (a plan made against an older state is refused).

    Exit status: 0 every saved plan applied, or nothing to apply; 1 a bad input
    or an unknown --pool (nothing applied), or a pool whose apply failed or only
    partly succeeded (each failed node is named).
    """
    settings = terraform_settings(settings_file, terraform_dir)
    if settings is None:  # unreachable: --settings is required
        raise typer.Exit(2)
    plans = pending_plans(settings, pools or [])
    if not plans:
        err_console.print("nothing to apply: no saved plans (run `gpu-autoscaler plan "
                          "--settings ...` first)", soft_wrap=True)
        raise typer.Exit(0)
    results: list[tuple[str, ApplyResult]] = []
    failures: list[str] = []
    for pool_plan in plans:  # a pool's shards (shard 0 is "team/pool", shard k "team/pool#k")
        try:
            results.append((pool_plan.label, apply_one(settings, pool_plan)))
        except TerraformError as exc:
            failures.append(f"{pool_plan.label}: {exc}")
    if json_out:
        typer.echo(json.dumps({"results": [{**r.model_dump(mode="json"), "workspace": label}
                                           for label, r in results],
                               "errors": failures}, indent=2))
    else:
        for label, result in results:
            _print_result(label, result)
        for failure in failures:
            err_console.print(f"[bold red]error:[/] {failure}", highlight=False)
    if failures or not all(r.ok for _, r in results):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("apply")(apply)
