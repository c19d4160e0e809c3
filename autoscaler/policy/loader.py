"""Load team policy files with every error reported as ``file:line:column``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml.scalarbool import ScalarBoolean

from autoscaler.catalog import Catalog
from autoscaler.policy.checks import check_policy
from autoscaler.policy.errors import PolicyError, PolicyLoadError
from autoscaler.policy.locate import format_path, locate
from autoscaler.policy.models import TeamPolicy
from autoscaler.policy.yaml_errors import read_yaml, validation_errors


def plain(node: Any) -> Any:
    """The document as plain dict/list/str/int/float/bool: ruamel's scalar subclasses
    (an anchored ``true`` is an int subclass) must not reach strict validation."""
    if isinstance(node, dict):
        return {plain(k): plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    if isinstance(node, ScalarBoolean):  # before int: it is one
        return bool(node)
    if type(node) in (bool, str, int, float):
        return node
    for kind in (str, int, float):
        if isinstance(node, kind) and type(node) is not kind:
            return kind(node)
    return node


def _parse(path: Path, catalog: Catalog) -> tuple[Any, TeamPolicy | None, list[PolicyError]]:
    """(YAML document or None, valid policy or None, errors)."""
    name = str(path)
    doc, errors = read_yaml(path)
    if errors:
        return None, None, errors
    if not isinstance(doc, dict):
        return None, None, [PolicyError(name, 1, 1, "", "a policy file must be a YAML mapping")]
    try:
        policy = TeamPolicy.model_validate(plain(doc))
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
            clash = name_clash(policy, policies)
            if clash:
                errors.append(PolicyError(str(path), *locate(doc, clash[0]), format_path(clash[0]),
                                          f"{clash[1]} (defined in {sources[clash[2]]})"))
                continue
            policies[policy.team] = policy
    return policies, sorted(errors)


def node_prefix(team: str, pool: str) -> str:
    """How the fleet names a pool's nodes: ``<team>-<pool>-<n>``."""
    return f"{team}-{pool}"


def name_clash(policy: TeamPolicy,
                others: dict[str, TeamPolicy]) -> tuple[list[int | str], str, str] | None:
    """(where, why, other team) when a pool's node names read like another team's pool.

    ``a-b``/``c`` and ``a``/``b-c`` both name nodes ``a-b-c-<n>``. The store never hands
    out a name twice, but people, dashboards and Prometheus' per-pool rules tell pools
    apart by the name, so such a pair is refused."""
    taken = {node_prefix(t, p.name): (t, p.name) for t, other in others.items()
             for p in other.pools}
    for i, pool in enumerate(policy.pools):
        owner = taken.get(node_prefix(policy.team, pool.name))
        if owner is not None and owner[0] != policy.team:
            return (["pools", i, "name"],
                    f"pool {policy.team}/{pool.name} and pool {owner[0]}/{owner[1]} would both "
                    f"name their nodes {node_prefix(policy.team, pool.name)}-<n>; rename one",
                    owner[0])
    return None


def load_policies(directory: Path, catalog: Catalog) -> dict[str, TeamPolicy]:
    """Strict form for commands that cannot run on a partly valid policy set."""
    policies, errors = load_dir(directory, catalog)
    if errors:
        raise PolicyLoadError(errors)
    return policies
