"""``gpu-autoscaler plan``: decide from a recorded snapshot, or from the live sources and
store of a service config, and show what would happen.

Without ``--settings`` it shows the engine's decision only. With ``--settings`` (Terraform
settings) it also runs ``terraform plan -out`` for every pool whose node map changes and
shows, per pool, the nodes created / destroyed / replaced and the $/h delta; ``gpu-autoscaler
apply`` then applies exactly those saved plans. ``--config`` reads what one tick of
``gpu-autoscaler run`` would read (signals, prices, the fleet store) without taking the
leader lease or recording anything, and previews with the config's Terraform settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from autoscaler.actuators.ansible.settings import AnsibleSettings
from autoscaler.actuators.bootstrap_hash import baked_images, warm_pool_hashes
from autoscaler.actuators.node_map import PreviewError, preview_maps
from autoscaler.actuators.terraform.preview import PoolPreview, baked_workspace, preview_pools
from autoscaler.actuators.terraform.settings import TerraformSettings, load_settings
from autoscaler.catalog import Catalog
from autoscaler.cli.common import PoliciesOption, PricesOption, catalog_from, console, fail
from autoscaler.cli.plan_render import preview_markdown, preview_tables
from autoscaler.cli.render import actions_table, placements_table, pools_table, unserved_table
from autoscaler.cli.run import read_config
from autoscaler.engine import DecisionInput, EngineSettings, Plan, decide
from autoscaler.engine.pricing import Prices
from autoscaler.engine.snapshot_file import MAX_BYTES as SNAPSHOT_MAX_BYTES
from autoscaler.engine.snapshot_file import SnapshotFileError, parse_decision_input
from autoscaler.model.prices import PriceBook
from autoscaler.policy import PolicyLoadError, load_policies
from autoscaler.policy.models import TeamPolicy, pool_key
from autoscaler.policy.paths import relative_to
from autoscaler.service.control import warm

SNAPSHOT_HELP = (
    "Recorded engine input (JSON): {now, fleet: {nodes, history}, snapshot: {...}}. "
    "`gpu-autoscaler signals --json` writes one from the live sources; the format is "
    "documented in docs/concepts/decisions.md (\"Snapshot files\")."
)
SETTINGS_HELP = (
    "Terraform settings (YAML: workdir, backend, aws_endpoint, regions: {'aws/us-east-1': "
    "{ami, subnet_ids, ...}}). When given, every pool whose node map changes gets a "
    "`terraform plan -out` in its own workspace, and the preview shows the Terraform "
    "changes and the $/h delta; `gpu-autoscaler apply` applies exactly those plans. "
    "Without it, only the engine's decision is shown and Terraform is not run. A whole "
    "service config works too: its terraform section, and its ansible section (playbook, "
    "extra_vars) for the bootstrap hash of pools with bootstrap.image baked."
)


def load_input(path: Path) -> DecisionInput:
    try:
        with open(path, "rb") as fh:  # one byte past the cap is enough to refuse it
            data = fh.read(SNAPSHOT_MAX_BYTES + 1)
        return parse_decision_input(str(path), data)
    except OSError as exc:
        fail(f"cannot read snapshot {path}: {exc.strerror}")
    except SnapshotFileError as exc:
        fail(f"{path} is not a valid snapshot:\n{exc}")


def _policies(policies_dir: Path, catalog: Catalog) -> dict[str, TeamPolicy]:
    try:
        return load_policies(policies_dir, catalog)
    except PolicyLoadError as exc:
        fail(f"policies in {policies_dir} are invalid:\n{exc}")


def terraform_settings(path: Path | None, workdir: Path | None) -> TerraformSettings | None:
    if path is None and workdir is None:
        return None
    if path is None:
        fail("--terraform-dir needs --settings (which cloud regions to plan, with their inputs)")
    try:
        settings = load_settings(path)
    except (OSError, ValueError) as exc:
        fail(f"invalid Terraform settings {path}: {exc}")
    return settings.model_copy(update={"workdir": workdir}) if workdir else settings


def ansible_settings(path: Path | None) -> AnsibleSettings:
    """The ``ansible:`` section of a --settings file that is a whole service config: its
    playbook's roles and its extra vars make a baked pool's bootstrap hash. Otherwise the
    defaults (the playbook next to the package, no extra vars)."""
    if path is None:
        return AnsibleSettings()
    try:
        data = YAML(typ="safe").load(path.read_text()) or {}
        section = data.get("ansible") if isinstance(data, dict) else None
        if not isinstance(section, dict):
            return AnsibleSettings()
        return AnsibleSettings.model_validate(section, context=relative_to(path.parent))
    except (OSError, YAMLError, ValidationError) as exc:
        fail(f"invalid ansible settings in {path}: {exc}")


def terraform_preview(policies: dict[str, TeamPolicy], data: DecisionInput, result: Plan,
                      catalog: Catalog, settings: TerraformSettings,
                      ansible: AnsibleSettings) -> list[PoolPreview]:
    """Each changed pool's terraform plan; a baked pool's with its image (the hash from
    ``ansible``'s roles and extra vars, as the service computes it)."""
    pools = {pool_key(t.team, p.name): p for t in policies.values() for p in t.pools}
    try:
        maps = preview_maps(data.fleet.nodes, result, catalog, pools)
    except PreviewError as exc:
        fail(str(exc))
    images = baked_images(policies, settings, ansible)
    return preview_pools(maps, settings, PriceBook(catalog, data.snapshot), baked_workspace(images))


def live_input(config: Path) -> tuple[DecisionInput, dict[str, TeamPolicy], Catalog,
                                      EngineSettings, TerraformSettings | None,
                                      dict[str, dict[str, Any]], AnsibleSettings]:
    """One tick's reading of the live sources, without the lease, the executor or the store
    being written; with each predictive pool's forecast from the store's demand history."""
    from autoscaler.service.wiring import build_service

    cfg = read_config(config)
    service = build_service(cfg, dry_run=True)
    try:
        reload = service.loop.reloader.refresh()
        if reload.errors:
            fail(f"policies in {cfg.policies_dir} are invalid:\n"
                 + "\n".join(str(e) for e in reload.errors))
        policies = service.loop.reloader.policies
        fleet = service.store.fleet_view()
        now = service.loop.clock()
        snapshot = service.loop.read_snapshot(policies, fleet, now)
        forecasts = dict(service.loop.state.forecasts)
    finally:
        service.close()
    tf = cfg.terraform if cfg.terraform.regions else None
    return (DecisionInput(now=now, fleet=fleet, snapshot=snapshot), policies, service.catalog,
            cfg.engine, tf, forecasts, cfg.ansible)


def plan(
    snapshot: Annotated[Path | None, typer.Option("--snapshot", "-s", help=SNAPSHOT_HELP,
                                                  exists=True, dir_okay=False)] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="Service config (as for `gpu-autoscaler run`): decide from the "
        "live signals and the fleet store, and preview with its Terraform settings (unless "
        "--settings is given). Nothing is recorded and the leader lease is not taken.",
        exists=True, dir_okay=False)] = None,
    save_input: Annotated[Path | None, typer.Option(
        "--save-input", help="With --config: also write the engine input read live, for a "
        "later `plan --snapshot` replay.", dir_okay=False)] = None,
    policies: PoliciesOption = Path("policies"),
    prices: PricesOption = None,
    settings_file: Annotated[Path | None, typer.Option(
        "--settings", help=SETTINGS_HELP, exists=True, dir_okay=False)] = None,
    terraform_dir: Annotated[Path | None, typer.Option(
        "--terraform-dir", help="Root of the per-pool Terraform workspaces (overrides the "
        "settings' workdir).", file_okay=False)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="Print Markdown for a pull-request comment.")] = False,
    max_gpus: Annotated[int | None, typer.Option(help="Global GPU cap across teams.")] = None,
    max_hourly_usd: Annotated[float | None, typer.Option(help="Global $/h cap.")] = None,
) -> None:
    """Decide from a recorded snapshot (--snapshot) or from the live sources
    of a service config (--config); print the actions with their reasons.

    Nothing is changed. With Terraform settings (--settings, or the config's
    terraform regions), each changed pool's terraform plan is saved for
    `gpu-autoscaler apply` and shown with its $/h delta.
    """
    if (snapshot is None) == (config is None):
        fail("give exactly one of --snapshot FILE (a recorded input) or --config FILE (live)")
    if save_input is not None and config is None:
        fail("--save-input needs --config")
    tf_settings = terraform_settings(settings_file, terraform_dir)
    if config is not None:
        data, team_policies, catalog, engine, live_tf, forecasts, ansible = live_input(config)
        tf_settings = tf_settings or live_tf
        if save_input is not None:
            save_input.write_text(data.model_dump_json(indent=1))
    else:
        assert snapshot is not None
        forecasts = {}
        ansible = ansible_settings(settings_file)
        catalog = catalog_from(prices)
        data = load_input(snapshot)
        team_policies = _policies(policies, catalog)
        engine = EngineSettings()
    if max_gpus is not None or max_hourly_usd is not None:
        engine = engine.model_copy(update={k: v for k, v in (
            ("max_gpus", max_gpus), ("max_hourly_usd", max_hourly_usd)) if v is not None})
    # As the service decides: the warm pools' nodes out of decide()'s fleet, then their step
    # (a forecast-sized warm pool shows no refill here: the preview has no warm forecast).
    engine_fleet, warm_nodes = warm.split(data.fleet)
    result = decide(team_policies, engine_fleet, data.snapshot, data.now, catalog=catalog,
                    settings=engine)
    tf_for_hashes = tf_settings
    result = warm.apply(result, team_policies, engine_fleet, warm_nodes,
                        Prices(catalog, data.snapshot, data.now), {},
                        None if tf_for_hashes is None else
                        lambda p: warm_pool_hashes(p, tf_for_hashes, ansible), data.now,
                        engine, data.snapshot.missing)
    previews = None if tf_settings is None else terraform_preview(
        team_policies, data, result, catalog, tf_settings, ansible)
    if json_out:
        payload = {"plan": result.model_dump(mode="json"),
                   "pools": None if previews is None else
                   [p.model_dump(mode="json") | {"delta": round(p.delta, 4)} for p in previews],
                   "forecasts": forecasts}
        typer.echo(json.dumps(payload, indent=2))
    elif markdown:
        typer.echo(preview_markdown(result, previews))
        for pool in sorted(forecasts):
            typer.echo(f"- {forecasts[pool]['line']}")
    else:
        console.print(actions_table(result.actions,
                                    title=f"Plan at {result.decided_at:%Y-%m-%d %H:%M:%S %Z}"))
        console.print(pools_table(result))
        for table in (placements_table(result), unserved_table(result)):
            if table is not None:
                console.print(table)
        if previews is not None:
            for renderable in preview_tables(previews):
                console.print(renderable)
        for pool in sorted(forecasts):  # predictive pools (--config only: the store's history)
            console.print(forecasts[pool]["line"], markup=False, highlight=False)
        if not result.changes():
            console.print("[dim]No changes: the fleet already matches the policies.[/]")
    if previews and any(p.status == "error" for p in previews):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
