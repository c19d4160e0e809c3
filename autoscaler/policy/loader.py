"""Load team policy files with every error reported as ``file:line:column``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autoscaler.catalog import Catalog
from autoscaler.policy.checks import check_policy
from autoscaler.policy.errors import PolicyError, PolicyLoadError
from autoscaler.policy.locate import format_path, locate
from autoscaler.policy.models import TeamPolicy
from autoscaler.policy.yaml_errors import read_yaml, validation_errors


def _parse(path: Path, catalog: Catalog) -> tuple[Any, TeamPolicy | None, list[PolicyError]]:
    """(YAML document or None, valid policy or None, errors)."""
    name = str(path)
    doc, errors = read_yaml(path)
    if errors:
        return None, None, errors
    if not isinstance(doc, dict):
        return None, None, [PolicyError(name, 1, 1, "", "a policy file must be a YAML mapping")]
    try:
        policy = TeamPolicy.model_validate(doc)
    except ValidationError as exc:
        return doc, None, validation_errors(name, doc, exc, TeamPolicy)
    errors = [
        PolicyError(name, *locate(doc, loc), format_path(loc), message)
        for loc, message in check_policy(policy, catalog)
    ]
    return doc, (None if errors else policy), errors


def load_file(path: Path, catalog: Catalog) -> tuple[TeamPolicy | None, list[PolicyError]]:
    """Parse and validate one team file; never raises for content problems."""
    _, policy, errors = _parse(path, catalog)
    return policy, errors


def policy_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_dir(directory: Path, catalog: Catalog) -> tuple[dict[str, TeamPolicy], list[PolicyError]]:
    """Every valid team in ``directory`` plus every error found in any file."""
    if not directory.is_dir():
        return {}, [PolicyError(str(directory), 1, 1, "", "policy directory does not exist")]
    policies: dict[str, TeamPolicy] = {}
    sources: dict[str, Path] = {}
    errors: list[PolicyError] = []
    for path in policy_files(directory):
        doc, policy, file_errors = _parse(path, catalog)
        errors.extend(file_errors)
        # Team names must be unique even when a file has other errors.
        team = doc.get("team") if isinstance(doc, dict) else None
        if isinstance(team, str) and team in sources:
            errors.append(PolicyError(
                str(path), *locate(doc, ["team"]), "team",
                f"team '{team}' is already defined in {sources[team]}",
            ))
            continue
        if isinstance(team, str):
            sources[team] = path
        if policy is not None:
            policies[policy.team] = policy
    return policies, sorted(errors)


def load_policies(directory: Path, catalog: Catalog) -> dict[str, TeamPolicy]:
    """Strict form for commands that cannot run on a partly valid policy set."""
    policies, errors = load_dir(directory, catalog)
    if errors:
        raise PolicyLoadError(errors)
    return policies
