"""``gpu-autoscaler store current|upgrade --config FILE``: the store's schema version, and its
upgrade to the one this version needs (docs/operators/store.md: back the store up first)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from autoscaler.cli.common import console, fail
from autoscaler.cli.run import CONFIG_HELP
from autoscaler.fleet import store_schema
from autoscaler.fleet.schema import SchemaError, SchemaState, Status
from autoscaler.fleet.store import StoreUnavailableError
from autoscaler.fleet.store_url import sqlite_file
from autoscaler.secrets import SecretError
from autoscaler.service.app import one_line
from autoscaler.service.config.load import ConfigError, load_config
from autoscaler.service.config.models import ServiceConfig

store_app = typer.Typer(help="The store's schema version: show it, upgrade it.", no_args_is_help=True)
ConfigOption = Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP, exists=True,
                                            dir_okay=False)]
ForceOption = Annotated[bool, typer.Option(
    "--force", help="Upgrade even while the controller's instance lock is held (only when "
    "the process holding it is not a controller of this store).")]
NOTHING_TO_UPGRADE = ("nothing to upgrade (is store.url the service's? a relative sqlite path is "
                      "relative to the current directory); the service creates the tables itself "
                      "when it opens an empty store; nothing was changed")


def _config(path: Path) -> ServiceConfig:
    # Not run's read_config: that demands every secret (the HTTP and team tokens), which a
    # store command never reads and which the service's credentials hold only while it runs.
    try:
        return load_config(path)
    except ConfigError as exc:
        fail(f"{path} is not a valid service config:\n{exc}")


def _url(cfg: ServiceConfig) -> str:
    try:
        return cfg.store.resolved_url()  # the one secret a store command needs
    except SecretError as exc:
        fail(str(exc))


def _where(cfg: ServiceConfig) -> tuple[str, Path | None]:
    """The URL for people, with the SQLite file it means (a relative path is relative to the
    current directory, not to the config); the file, None for another backend."""
    file = sqlite_file(cfg.store.url)
    if file is None:
        return cfg.store.display_url(), None
    file = file.resolve()
    return f"{cfg.store.display_url()} (file {file})", file


def _said(state: SchemaState) -> str:
    return state.revision or ("no tables" if state.status is Status.EMPTY else "no version")


def _print(line: str) -> None:
    console.print(line, highlight=False, soft_wrap=True, markup=False)


@store_app.command("current")
def current(config: ConfigOption) -> None:
    """Print the store's schema revision and whether it is the head this version needs."""
    cfg = _config(config)
    where, file = _where(cfg)
    url = _url(cfg)
    if file is not None and not file.exists():  # a read-only command: opening it would create it
        _print(f"{where}: empty: no such file yet (the service creates it when it starts)")
        return
    try:
        state = store_schema.current(url)
    except StoreUnavailableError as exc:
        fail(f"cannot open the store {where}: {one_line(exc.driver_error)}")
    _print(f"{where}: {state.describe()}")


def _no_controller(cfg: ServiceConfig, where: str, force: bool) -> Callable[[], None]:
    """Take the controller's instance lock for the upgrade (no controller starts meanwhile),
    or exit 1 while a controller holds it; the release. ``force``: upgrade anyway."""
    from autoscaler.service.instance_lock import InstanceLock, InstanceLocked, instance_lock_path

    path = instance_lock_path(cfg)
    if path is None or not path.parent.is_dir():
        return lambda: None
    try:
        return InstanceLock(path).acquire().release
    except InstanceLocked as exc:
        if force:
            _print(f"warning: {exc}; upgrading anyway (--force)")
            return lambda: None
        fail(f"cannot upgrade the store {where}: {exc}: stop the controller first (or pass "
             "--force if that process is not a controller of this store)")
    except OSError as exc:
        fail(f"cannot upgrade the store {where}: cannot take the instance lock {path}: "
             f"{one_line(exc)}")


@store_app.command("upgrade")
def upgrade(config: ConfigOption, force: ForceOption = False) -> None:
    """Upgrade the store's schema to the head this version needs, in one transaction.

    Stop every instance of the service and back the store up first (docs/operators/store.md):
    the upgrade is refused while a controller holds the store's instance lock. A store
    written before schema versions is checked against that schema, then stamped and upgraded. An
    empty database is refused: the service creates its tables when it opens it.
    """
    cfg = _config(config)
    where, file = _where(cfg)
    url = _url(cfg)
    if file is not None and not file.exists():
        fail(f"cannot upgrade the store {where}: no such file: {NOTHING_TO_UPGRADE}")
    release = _no_controller(cfg, where, force)
    try:
        leader = None if force else store_schema.live_lease(url, cfg.leader.name)
    except StoreUnavailableError as exc:
        release()
        fail(f"cannot upgrade the store {where}: {one_line(exc.driver_error)}")
    if leader is not None:
        release()
        fail(f"cannot upgrade the store {where}: the leader lease {cfg.leader.name!r} is held "
             f"by {leader[0]} until {leader[1]:%Y-%m-%d %H:%M:%S} UTC: stop the controller "
             "first (or pass --force)")
    try:
        _upgrade(where, url)
    finally:
        release()


def _upgrade(where: str, url: str) -> None:
    try:
        if store_schema.current(url).status is Status.EMPTY:
            fail(f"cannot upgrade the store {where}: it has no tables: {NOTHING_TO_UPGRADE}")
        before, after = store_schema.upgrade(url)
    except SchemaError as exc:
        fail(f"cannot upgrade the store {where}: {exc}")
    except StoreUnavailableError as exc:
        fail(f"cannot upgrade the store {where}: {one_line(exc.driver_error)}")
    if before.status is Status.CURRENT:
        said = f"already at head {after.revision}"
    else:
        said = f"upgraded from {_said(before)} to {after.revision} (head)"
    _print(f"{where}: {said}")


def register(app: typer.Typer) -> None:
    app.add_typer(store_app, name="store")
