"""The root command imports a command's module only when that command is run, so the
production `gpu-autoscaler run` (and the service it builds) loads no sandbox or simulator,
and no matplotlib (the `plots` extra, not installed with the service)."""

from __future__ import annotations

import subprocess
import sys

# Resolve `run` the way click does for `gpu-autoscaler run ...`, build the service module it
# starts, and print every sandbox/sim/matplotlib module that got loaded.
CODE = """
import sys
import typer
import autoscaler.cli
group = typer.main.get_command(autoscaler.cli.app)
assert group.get_command(typer.Context(group), "run").name == "run"
import autoscaler.cli.run
import autoscaler.service.app
print(sorted(m for m in sys.modules if m.startswith(("autoscaler.sandbox", "autoscaler.sim", "matplotlib"))))
"""


def test_run_loads_neither_the_sandbox_nor_the_simulator_nor_matplotlib():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_every_listed_command_resolves():
    import typer

    from autoscaler.cli import COMMANDS, app

    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    assert group.list_commands(ctx) == list(COMMANDS)
    assert all(group.get_command(ctx, name).name == name for name in COMMANDS)
    assert group.get_command(ctx, "bogus") is None
    assert "bogus" not in group.commands  # type: ignore[attr-defined]


def test_command_lists_show_each_first_help_paragraph_on_one_line():
    """Rich markup keeps a docstring's wrapping in the command list: `plan` read "...from
    the live sources" and then "of a service config" on a line of its own."""
    import typer

    from autoscaler.cli import COMMANDS, app

    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    seen = 0
    for name in COMMANDS:
        command = group.get_command(ctx, name)
        for cmd in [command, *getattr(command, "commands", {}).values()]:
            if cmd.help:
                seen += 1
                assert "\n" not in (cmd.short_help or cmd.help.split("\n\n")[0].strip()), cmd.name
    assert seen > len(COMMANDS)
    out = subprocess.run([sys.executable, "-m", "autoscaler.cli", "--help"], capture_output=True,
                         text=True, timeout=120, env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "from the live sources of a service config (--config)" in out.stdout
