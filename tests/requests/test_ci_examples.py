"""examples/ci/: valid YAML, and every ``gpu-autoscaler request`` option they use exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from ruamel.yaml import YAML

from autoscaler.cli import app

EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "ci").glob("*.yml"))
CALL = re.compile(r"gpu-autoscaler request (\w+)((?:[^\n|)]|\n(?=\s))*)")


def options_of(verb: str) -> set[str]:
    group = typer.main.get_command(app).commands["request"]  # type: ignore[attr-defined]
    return {opt for p in group.commands[verb].params for opt in p.opts}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_parses_and_uses_only_real_options(path: Path) -> None:
    YAML(typ="safe").load(path.read_text())
    text = path.read_text().replace(">\n", " ")
    calls = CALL.findall(text)
    assert {verb for verb, _ in calls} >= {"create", "wait", "release"}
    for verb, rest in calls:
        used = set(re.findall(r"(--[a-z-]+)", rest))
        assert used <= options_of(verb), (verb, used - options_of(verb))


def test_both_examples_exist() -> None:
    assert [p.name for p in EXAMPLES] == ["github-actions.yml", "gitlab-ci.yml"]
