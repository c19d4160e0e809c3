"""Load one policy text as the service would, for the policy tests."""

from __future__ import annotations

from pathlib import Path

from autoscaler.catalog import default_catalog
from autoscaler.policy import load_file

CATALOG = default_catalog()


def load_text(tmp_path: Path, text: str) -> tuple[object, list[tuple[str, str]]]:
    """The policy ``text`` loaded from a file, and its errors as (path, message)."""
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    policy, errors = load_file(path, CATALOG)
    return policy, [(e.path, e.message) for e in errors]
