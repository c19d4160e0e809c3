"""``gpu-autoscaler``: one command line for policies, plans, the service and the sandbox.

Each command group lives in its own module and registers itself on a Typer app. The root
group imports a module only when one of its commands is run (or ``--help`` lists them), so
the production ``gpu-autoscaler run`` never loads the sandbox or the simulator.

A bad argument is one ``error:`` line and exit status 1, like every other refusal: click's
usage box exits 2, which ``request wait`` uses for "still waiting at the deadline".
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterator, MutableMapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, NoReturn

import typer
from typer import _click as click  # this typer ships its own click; its commands are these
from typer.core import TyperGroup

from autoscaler.cli.common import PIPED_HELP, WIDE, say_error

# Command name -> the module that defines it with register(app), in the order `--help` lists
# them (commands first, then groups, as typer lists them).
COMMANDS = {
    "plan": "autoscaler.cli.plan",
    "apply": "autoscaler.cli.apply",
    "prices": "autoscaler.cli.prices",
    "signals": "autoscaler.cli.signals",
    "simulate": "autoscaler.cli.simulate",
    "run": "autoscaler.cli.run",
    "status": "autoscaler.cli.status",
    "doctor": "autoscaler.cli.doctor",
    "demo": "autoscaler.cli.demo",
    "policy": "autoscaler.cli.policy",
    "forecast": "autoscaler.cli.forecast",
    "config": "autoscaler.cli.run",
    "request": "autoscaler.cli.request",
    "sandbox": "autoscaler.cli.sandbox",
    "dashboards": "autoscaler.cli.dashboards",
    "store": "autoscaler.cli.store",
    "image": "autoscaler.cli.image",
}


def load(name: str) -> click.Command:
    sub = typer.Typer(rich_markup_mode="rich", pretty_exceptions_show_locals=False)
    importlib.import_module(COMMANDS[name]).register(sub)
    command = typer.main.get_group(sub).commands[name]
    _short_help_on_one_line(command)
    return command


def _short_help_on_one_line(command: click.Command) -> None:
    """A command list shows each command's first help paragraph, and in rich markup mode
    it keeps that paragraph's line breaks, which are only the docstring's wrapping: join
    them, here and in the command's subcommands."""
    if command.short_help is None and command.help:
        first = inspect.cleandoc(command.help).split("\n\n")[0]
        if "\n" in first:
            command.short_help = " ".join(first.split())
    for sub in getattr(command, "commands", {}).values():
        _short_help_on_one_line(sub)


class CommandMap(MutableMapping[str, click.Command]):
    """The root group's commands by name: a command's module is imported when the command is
    first looked up, and a membership test imports nothing."""

    def __init__(self) -> None:
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            if name not in COMMANDS:
                raise KeyError(name)
            self._loaded[name] = load(name)
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*COMMANDS, *self._loaded]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*COMMANDS, *self._loaded]))

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]


class LazyCommands(TyperGroup):
    """The root group, whose commands are a CommandMap."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = CommandMap()

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # the help is printed already
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            usage_error(exc)
        except typer.Abort:
            usage_error(click.ClickException("aborted"))
        sys.exit(code if isinstance(code, int) else 0)


def usage_error(exc: click.ClickException) -> NoReturn:
    """``error: request wait: Invalid value for '--timeout': ...``: one line, exit 1."""
    names, ctx = [], getattr(exc, "ctx", None)
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    where = " ".join(reversed(names))
    message = " ".join(exc.format_message().split())
    say_error(f"{where}: {message} (--help lists the options)" if where else message)
    sys.exit(1)


app = typer.Typer(
    name="gpu-autoscaler",
    help=(
        "Keeps a cloud GPU fleet the right size. Teams describe what they want in YAML "
        "policy files; gpu-autoscaler reads GPU utilization and job demand, decides, previews "
        "every change as a Terraform plan with its cost delta, and acts."
    ),
    cls=LazyCommands,
    no_args_is_help=True,
    context_settings={"terminal_width": WIDE} if PIPED_HELP else None,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
)


def installed_version() -> str:
    """The installed distribution's version: the git tag it was built from (setuptools-scm,
    fixed when the package is installed; docs/internals/releasing.md)."""
    try:
        return version("gpu-autoscaler")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"gpu-autoscaler {installed_version()}")
        raise typer.Exit()


@app.callback()
def root(
    show_version: Annotated[bool, typer.Option("--version", help="Print the version and exit.",
                                               callback=print_version, is_eager=True)] = False,
) -> None:
    # A callback makes typer build a group even though no command is registered here.
    pass


def main() -> None:
    app()
