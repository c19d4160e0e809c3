"""``gpu-autoscaler plan``: decide from a recorded snapshot, or from the live sources and
store of a service config, and show what would happen.

Without ``--settings`` it shows the engine's decision only. With ``--settings`` (Terraform
settings) it also runs ``terraform plan -out`` for every pool whose node map changes and
shows, per pool, the nodes created / destroyed / replaced and the $/h delta; ``gpu-autoscaler
apply`` then applies exactly those saved plans. ``--config`` reads what one tick of
``gpu-autoscaler run`` would read (signals, prices, the fleet store) without taking the
leader lease or recording anything, and previews with the config's Terraform settings.
A SQLite store file that does not exist yet is not created: the preview plans from an empty
fleet, as a fresh install's first tick would, and says so on stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
from autoscaler.cli.common import (
    PoliciesOption,
    PricesOption,
    catalog_from,
    console,
    err_console,
    fail,
)
from autoscaler.cli.plan_render import preview_markdown, preview_tables
from autoscaler.cli.render import actions_table, placements_table, pools_table, unserved_table
from autoscaler.cli.run import read_config, start_service
from autoscaler.engine import DecisionInput, EngineSettings, Plan, decide
from autoscaler.engine.pricing import Prices
from autoscaler.engine.snapshot_file import MAX_BYTES as SNAPSHOT_MAX_BYTES
from autoscaler.engine.snapshot_file import SnapshotFileError, parse_decision_input
from autoscaler.fleet.store import FleetStore
from autoscaler.fleet.store_url import sqlite_file
from autoscaler.model.prices import PriceBook
from autoscaler.policy import PolicyLoadError, load_policies
from autoscaler.policy.models import TeamPolicy, pool_key
from autoscaler.policy.paths import relative_to
from autoscaler.service.control import warm

if TYPE_CHECKING:
    from autoscaler.service.app import Service
    from autoscaler.service.config.models import ServiceConfig

LiveInput = tuple[DecisionInput, dict[str, TeamPolicy], Catalog, EngineSettings,
                  TerraformSettings | None, dict[str, dict[str, Any]], AnsibleSettings]

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
    except YAMLError as exc:
        fail(f"invalid Terraform settings {yaml_problem(path, exc)}")
    except (OSError, ValueError) as exc:
        fail(f"invalid Terraform settings {path}: {exc}")
    return settings.model_copy(update={"workdir": workdir}) if workdir else settings


def yaml_problem(path: Path, exc: YAMLError) -> str:
    """A YAML error as one located line: ruamel's own text is several, and names the file
    "<unicode string>"."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    return f"{where}: {getattr(exc, 'problem', None) or type(exc).__name__}"


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
    except YAMLError as exc:
        fail(f"invalid ansible settings in {yaml_problem(path, exc)}")
    except (OSError, ValidationError) as exc:
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


def live_input(config: Path) -> LiveInput:
    """One tick's reading of the live sources, without the lease, the executor or the store
    being written; with each predictive pool's forecast from the store's demand history."""
    from autoscaler.service.wiring import Overrides

    cfg = read_config(config)
    with preview_store(cfg) as store:
        service = start_service(cfg, dry_run=True,
                                overrides=None if store is None else Overrides(store=store))
        try:
            return _read_live(cfg, service)
        finally:
            service.close()


@contextlib.contextmanager
def preview_store(cfg: ServiceConfig) -> Iterator[FleetStore | None]:
    """None (the config's own store) unless it is a SQLite file that does not exist: then an
    empty store in a temporary directory, removed afterwards. A preview creates nothing; it
    plans as a fresh install's first tick would, and says so (a typo in the path shows)."""
    path = sqlite_file(cfg.store.url)
    if path is None or path.exists():
        yield None
        return
    err_console.print(f"note: the store {path} does not exist (it is not created): planning "
                      "from an empty fleet, as a fresh install's first tick would",
                      markup=False, highlight=False, soft_wrap=True)
    with tempfile.TemporaryDirectory(prefix="gpu-autoscaler-plan-") as tmp:
        store = FleetStore(f"sqlite:///{Path(tmp) / 'fleet.db'}")
        try:
            yield store
        finally:
            store.close()


def _read_live(cfg: ServiceConfig, service: Service) -> LiveInput:
    reload = service.loop.reloader.refresh()
    if reload.errors:
        fail(f"policies in {cfg.policies_dir} are invalid:\n"
             + "\n".join(str(e) for e in reload.errors))
    policies = service.loop.reloader.policies
    fleet = service.store.fleet_view()
    now = service.loop.clock()
    snapshot = service.loop.read_snapshot(policies, fleet, now)
    forecasts = dict(service.loop.state.forecasts)
    tf = cfg.terraform if cfg.terraform.regions else None
    return (DecisionInput(now=now, fleet=fleet, snapshot=snapshot), policies, service.catalog,
            cfg.engine, tf, forecasts, cfg.ansible)


def with_caps(engine: EngineSettings, caps: dict[str, float]) -> EngineSettings:
    """``engine`` with the command line's global caps, checked as a config's are
    (``model_copy(update=...)`` would take -5 GPUs or a NaN $/h)."""
    try:
        return EngineSettings.model_validate({**engine.model_dump(), **caps})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        name = str(first["loc"][0]) if first["loc"] else ""
        fail(f"--{name.replace('_', '-')} {caps.get(name)}: {first['msg']}")


def check_writable(path: Path) -> None:
    """Refuse a --save-input path that cannot be written before the live read, not after."""
    if not path.parent.is_dir():  # (a directory itself is refused by the option)
        fail(f"cannot write {path}: no directory {path.parent}")
    if not os.access(path if path.exists() else path.parent, os.W_OK):
        fail(f"cannot write {path}: permission denied")


def plan(
    snapshot: Annotated[Path | None, typer.Option("--snapshot", "-s", help=SNAPSHOT_HELP,
                                                  exists=True, dir_okay=False)] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="Service config (as for `gpu-autoscaler run`): decide from the "
        "live signals and the fleet store, and preview with its Terraform settings (unless "
        "--settings is given). Nothing is recorded and the leader lease is not taken; a "
        "SQLite store file that does not exist is not created (the plan starts from an "
        "empty fleet, as a fresh install's first tick would, and says so on stderr).",
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
    detailed_exitcode: Annotated[bool, typer.Option(
        "--detailed-exitcode", help="Exit 2 when the plan changes the fleet, 0 when it does "
        "not (1 stays an error), for CI.")] = False,
) -> None:
    """Decide from a recorded snapshot (--snapshot) or from the live sources
    of a service config (--config); print the actions with their reasons.

    Nothing is changed. With Terraform settings (--settings, or the config's
    terraform regions), each changed pool's terraform plan is saved for
    `gpu-autoscaler apply` and shown with its $/h delta.

    Exit status: 0 the plan was made (changes or not); 1 an error (a bad
    input, an unreachable store, a pool's terraform plan failed). With
    --detailed-exitcode: 0 no changes, 1 an error, 2 the plan changes the fleet.
    """
    if (snapshot is None) == (config is None):
        fail("give exactly one of --snapshot FILE (a recorded input) or --config FILE (live)")
    if save_input is not None and config is None:
        fail("--save-input needs --config")
    caps = {k: v for k, v in (("max_gpus", max_gpus), ("max_hourly_usd", max_hourly_usd))
            if v is not None}
    with_caps(EngineSettings(), caps)  # a bad cap is refused before the live read
    if save_input is not None:
        check_writable(save_input)
    tf_settings = terraform_settings(settings_file, terraform_dir)
    if config is not None:
        data, team_policies, catalog, engine, live_tf, forecasts, ansible = live_input(config)
        tf_settings = tf_settings or live_tf
        if save_input is not None:
            try:
                save_input.write_text(data.model_dump_json(indent=1))
            except OSError as exc:
                fail(f"cannot write {save_input}: {exc.strerror}")
    else:
        assert snapshot is not None
        forecasts = {}
        ansible = ansible_settings(settings_file)
        catalog = catalog_from(prices)
        data = load_input(snapshot)
        team_policies = _policies(policies, catalog)
        engine = EngineSettings()
    engine = with_caps(engine, caps)
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
    if detailed_exitcode and result.changes():
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
