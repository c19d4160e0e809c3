"""``gpu-autoscaler run --config FILE``: the long-running service; ``config validate FILE``."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from autoscaler.catalog import CatalogError, load_catalog
from autoscaler.cli.common import console, fail
from autoscaler.cli.logs import configure
from autoscaler.policy import load_dir
from autoscaler.secrets import SecretError
from autoscaler.service.config.load import ConfigError, load_config
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.http.api import ApiError

if TYPE_CHECKING:
    from autoscaler.service.app import Service
    from autoscaler.service.wiring import Overrides

CONFIG_HELP = ("Service config (YAML): policies_dir, signals, clouds, store, terraform, "
               "ansible, engine caps, tick interval, http. See examples/config-production.yaml; "
               "`gpu-autoscaler sandbox up` writes one for the sandbox.")


def configure_logging(level: str) -> None:
    configure(level, stream=sys.stderr)
    # APScheduler logs every run and warns for every tick skipped while a long one runs;
    # the service logs overruns once per tick itself.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    # Alembic logs its dialect at every migration run; fleet/schema.py logs what it changed.
    # aliyunsdkcore logs every request's parameters at DEBUG (alicloud_api redacts them).
    for noisy in ("botocore", "urllib3", "kubernetes", "alembic", "aliyunsdkcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def read_config(path: Path) -> ServiceConfig:
    try:
        config = load_config(path)
    except ConfigError as exc:
        fail(f"{path} is not a valid service config:\n{exc}")
    problems = config.check_secrets()
    if problems:
        fail("\n".join(problems))
    return config


def run(
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP, exists=True,
                                         dir_okay=False)],
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Decide and preview every tick (plans are logged and stored as dry "
        "runs) but change nothing: no Terraform, Ansible, drain or reconcile.")] = False,
    once: Annotated[bool, typer.Option("--once", help="Run a single tick and exit.")] = False,
) -> None:
    """Run the autoscaler: every tick read signals, decide, record the plan, act.

    SIGTERM (or Ctrl-C) lets the current step finish, releases the leader lease and exits;
    a restart resumes from the store. SIGHUP (systemctl reload) reads the policies again now.
    """
    cfg = read_config(config)
    configure_logging(cfg.log_level)
    service = start_service(cfg, dry_run)
    if once:
        try:
            report = service.tick()
        finally:
            service.close()
        if report.error is not None:
            raise typer.Exit(1)
        return
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger(__name__).info("received %s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # SIGHUP's default would stop the service: it is `systemctl reload`, policies read now.
    signal.signal(signal.SIGHUP, lambda _signum, _frame: service.request_reload())
    try:
        service.run(stop)
    except (OSError, ApiError) as exc:  # e.g. the HTTP port is taken
        service.close()
        fail(f"cannot start the service: {exc}")


def start_service(cfg: ServiceConfig, dry_run: bool, overrides: Overrides | None = None) -> Service:
    """The service built from ``cfg``, or exit 1 with one line saying why it cannot start
    (store, catalog, a secret, the Terraform or Ansible set-up): never a traceback. Also
    ``plan --config``'s one reading of the live sources."""
    from autoscaler.service.app import ServiceError, one_line
    from autoscaler.service.wiring import build_service

    try:
        return build_service(cfg, dry_run=dry_run, overrides=overrides)
    except ServiceError as exc:
        fail(str(exc))
    except (CatalogError, SecretError, ApiError, OSError, ValueError) as exc:
        fail(f"cannot start the service: {one_line(exc)}")


config_app = typer.Typer(help="Check service config files.", no_args_is_help=True)


@config_app.command("validate")
def validate(
    path: Annotated[Path, typer.Argument(help="Service config file.", exists=True, dir_okay=False)],
) -> None:
    """Validate a service config and the policies it points at (errors as file:line)."""
    cfg = read_config(path)
    try:
        catalog = load_catalog(cfg.prices_file)
    except CatalogError as exc:
        fail(str(exc))
    policies, errors = load_dir(cfg.policies_dir, catalog)
    for err in errors:
        console.print(f"[red]{escape(str(err))}[/]", highlight=False, soft_wrap=True)
    pools = sum(len(p.pools) for p in policies.values())
    console.print(f"{path}: ok — {len(policies)} team(s), {pools} pool(s) in {cfg.policies_dir}; "
                  f"tick every {cfg.tick.interval.total_seconds():g}s; store "
                  f"{cfg.store.display_url()}; http {cfg.http.listen if cfg.http.enabled else 'off'}",
                  highlight=False, soft_wrap=True)
    if errors:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.add_typer(config_app, name="config")
