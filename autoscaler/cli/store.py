"""``gpu-autoscaler store current|upgrade --config FILE``: the store's schema version, and its
upgrade to the one this version needs (docs/operators/store.md: back the store up first)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autoscaler.cli.common import console, fail
from autoscaler.cli.run import CONFIG_HELP, read_config
from autoscaler.fleet import store_schema
from autoscaler.fleet.schema import SchemaError, SchemaState, Status
from autoscaler.fleet.store import StoreUnavailableError
from autoscaler.secrets import SecretError
from autoscaler.service.app import one_line
from autoscaler.service.config.models import ServiceConfig

store_app = typer.Typer(help="The store's schema version: show it, upgrade it.", no_args_is_help=True)
ConfigOption = Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP, exists=True,
                                            dir_okay=False)]


def _url(cfg: ServiceConfig) -> str:
    try:
        return cfg.store.resolved_url()
    except SecretError as exc:
        fail(str(exc))


def _said(state: SchemaState) -> str:
    return state.revision or ("no tables" if state.status is Status.EMPTY else "no version")


@store_app.command("current")
def current(config: ConfigOption) -> None:
    """Print the store's schema revision and whether it is the head this version needs."""
    cfg = read_config(config)
    where = cfg.store.display_url()
    try:
        state = store_schema.current(_url(cfg))
    except StoreUnavailableError as exc:
        fail(f"cannot open the store {where}: {one_line(exc.driver_error)}")
    console.print(f"{where}: {state.describe()}", highlight=False, soft_wrap=True, markup=False)


@store_app.command("upgrade")
def upgrade(config: ConfigOption) -> None:
    """Upgrade the store's schema to the head this version needs, in one transaction.

    Stop every instance of the service and back the store up first (docs/operators/store.md). A store
    written before schema versions is checked against that schema, then stamped and upgraded.
    """
    cfg = read_config(config)
    where = cfg.store.display_url()
    try:
        before, after = store_schema.upgrade(_url(cfg))
    except SchemaError as exc:
        fail(f"cannot upgrade the store {where}: {exc}")
    except StoreUnavailableError as exc:
        fail(f"cannot upgrade the store {where}: {one_line(exc.driver_error)}")
    if before.status is Status.CURRENT:
        said = f"already at head {after.revision}"
    else:
        said = f"upgraded from {_said(before)} to {after.revision} (head)"
    console.print(f"{where}: {said}", highlight=False, soft_wrap=True, markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(store_app, name="store")
