"""Load team policy files with every error reported as ``file:line:column``."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError

from autoscaler.catalog import Catalog
from autoscaler.policy.checks import check_policy
from autoscaler.policy.errors import PolicyError, PolicyLoadError
from autoscaler.policy.locate import format_path, locate
from autoscaler.policy.models import NAME_PATTERN, TeamPolicy

_NAME_HINT = (
    "must start with a lowercase letter and use only a-z, 0-9 and '-', at most 39 characters "
    "(it becomes a Terraform key and a hostname)"
)


def _model_at(loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The pydantic model whose fields are valid keys at ``loc``."""
    model: Any = TeamPolicy
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(model, "model_fields", {})
        field = fields.get(part)
        if field is None:
            return None
        model = _unwrap_model(field.annotation)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (list, typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _unwrap_model(arg)
            if found is not None:
                return found
    return None


def _message(err: Any) -> str:
    kind, loc = err["type"], err["loc"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        known = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(known)}"
        return f"unknown key '{loc[-1]}'{hint}"
    if kind == "missing":
        return "required key is missing"
    if kind == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") == NAME_PATTERN:
        return f"{err['input']!r} {_NAME_HINT}"
    msg: str = err["msg"]
    return msg.removeprefix("Value error, ")


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    return yaml


def _parse(path: Path, catalog: Catalog) -> tuple[Any, TeamPolicy | None, list[PolicyError]]:
    """(YAML document or None, valid policy or None, errors)."""
    name = str(path)
    try:
        doc = _yaml().load(path.read_text())
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        return None, None, [PolicyError(name, line, col, "", f"not valid YAML: {exc.problem}")]
    except OSError as exc:
        return None, None, [PolicyError(name, 1, 1, "", f"cannot read file: {exc.strerror}")]
    if not isinstance(doc, dict):
        return None, None, [PolicyError(name, 1, 1, "", "a policy file must be a YAML mapping")]
    try:
        policy = TeamPolicy.model_validate(doc)
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            loc = err["loc"]
            line, col = locate(doc, loc, key=err["type"] == "extra_forbidden")
            errors.append(PolicyError(name, line, col, format_path(loc), _message(err)))
        return doc, None, errors
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
