"""``gpu-autoscaler``: one command line for policies, plans, the service and the sandbox.

Each command group lives in its own module and registers itself on ``app``.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="gpu-autoscaler",
    help=(
        "Keeps a cloud GPU fleet the right size. Teams describe what they want in YAML "
        "policy files; gpu-autoscaler reads GPU utilization and job demand, decides, previews "
        "every change as a Terraform plan with its cost delta, and acts."
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
)

# Command modules, in the order `--help` lists them. Each defines register(app).
COMMANDS = [
    "autoscaler.cli.policy",
    "autoscaler.cli.plan",
    "autoscaler.cli.apply",
    "autoscaler.cli.prices",
    "autoscaler.cli.signals",
    "autoscaler.cli.simulate",
    "autoscaler.cli.forecast",
    "autoscaler.cli.run",
    "autoscaler.cli.status",
    "autoscaler.cli.request",
    "autoscaler.cli.sandbox",
    "autoscaler.cli.demo",
    "autoscaler.cli.dashboards",
]

for _name in COMMANDS:
    importlib.import_module(_name).register(app)


def main() -> None:
    app()
