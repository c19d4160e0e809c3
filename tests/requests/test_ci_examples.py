"""examples/ci/: valid YAML, and every ``gpu-autoscaler request`` option they use exists."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from ruamel.yaml import YAML

from autoscaler.cli import app

EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "ci").glob("*.yml"))
# A call's words run to a pipe or the ")" closing it, over continuation lines and "$(...)".
CALL = re.compile(r"gpu-autoscaler request (\w+)((?:\$\([^)]*\)|[^\n|)]|\n(?=\s))*)")


def strings(node: Any) -> Iterator[str]:
    """Every string in the loaded file: each ``run:`` and ``script`` line on its own."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict | list):
        for child in node.values() if isinstance(node, dict) else node:
            yield from strings(child)


def options_of(verb: str) -> set[str]:
    group = typer.main.get_command(app).commands["request"]  # type: ignore[attr-defined]
    return {opt for p in group.commands[verb].params for opt in p.opts}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_parses_and_uses_only_real_options(path: Path) -> None:
    calls = [c for text in strings(YAML(typ="safe").load(path.read_text()))
             for c in CALL.findall(text)]
    assert {verb for verb, _ in calls} >= {"create", "wait", "release"}
    for verb, rest in calls:
        used = set(re.findall(r"(--[a-z-]+)", rest))
        assert used <= options_of(verb), (verb, used - options_of(verb))


def test_both_examples_exist() -> None:
    assert [p.name for p in EXAMPLES] == ["github-actions.yml", "gitlab-ci.yml"]
