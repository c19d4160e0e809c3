"""The committed reference pages (docs/reference/) are the generator's output, and every
key they document has a description."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.docs_reference import COMMAND, PAGES, render_all

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = f"run `{COMMAND}` and commit docs/reference/"


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return render_all()


def test_committed_reference_pages_equal_the_generator_output(rendered):
    committed = {p.name: p.read_text() for p in (ROOT / "docs" / "reference").glob("*.md")}
    assert set(committed) == set(PAGES), REGENERATE
    for name, text in rendered.items():
        assert committed[name] == text, f"docs/reference/{name} differs: {REGENERATE}"


@pytest.mark.parametrize("page", ["policy.md", "config.md"])
def test_every_key_has_a_description(rendered, page):
    # A key line is `- **`key`** (facts): description`, unless the key holds objects that
    # have a section of their own (their keys are listed there).
    sections = ("(object", "(list of object", "(map of string to object")
    bare = [line for line in rendered[page].splitlines()
            if line.startswith("- **`") and "): " not in line
            and not any(kind in line for kind in sections)]
    assert bare == [], "add description= to these fields' Field(...)"


def test_the_cli_reference_lists_every_command(rendered):
    from autoscaler.cli import COMMANDS

    for name in COMMANDS:
        assert f"## `gpu-autoscaler {name}" in rendered["cli.md"]
    assert "/work/" not in "".join(rendered.values())  # no path of this machine
