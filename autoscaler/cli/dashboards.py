"""``gpu-autoscaler dashboards``: Grafana provisioning, dashboard JSON and alert rules."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autoscaler.cli.common import console, fail
from autoscaler.dashboards.provisioning import GRAFANA_PATH, REPO_DASHBOARDS, provisioning_yaml

group = typer.Typer(help="Grafana dashboards and Prometheus alert rules, generated as code.",
                    no_args_is_help=True)


@group.command("provisioning")
def provisioning(path: Annotated[Path, typer.Option(
        help="Directory Grafana reads the dashboard JSON from.")] = GRAFANA_PATH) -> None:
    """Print the Grafana provisioning snippet that loads the dashboards."""
    print(provisioning_yaml(path), end="")


@group.command("render")
def render(out: Annotated[Path, typer.Option(help="Directory for the JSON files.")] = REPO_DASHBOARDS,
           ) -> None:
    """Write the dashboards' JSON (needs the `dashboards` extra: grafana-foundation-sdk)."""
    try:
        from autoscaler.dashboards.render import write_all
    except ImportError as exc:
        fail(f"rendering needs grafana-foundation-sdk (pip install '.[dashboards]'): {exc}")
    for path in write_all(out):
        console.print(f"wrote {path}")
    (out / "provisioning.yaml").write_text(provisioning_yaml())


@group.command("alerts")
def alerts(set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a threshold: NAME=VALUE (e.g. stuck_for=30m).")] = None) -> None:
    """Print the Prometheus alert rules (YAML) with the given thresholds."""
    from autoscaler.dashboards.alerts import Thresholds, rules_yaml

    pairs = dict(p.partition("=")[::2] for p in set_ or [])
    try:
        thresholds = Thresholds().with_overrides(pairs)
    except ValueError as exc:
        fail(str(exc))
    print(rules_yaml(thresholds), end="")


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="dashboards")
