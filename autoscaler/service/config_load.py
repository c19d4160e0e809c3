"""Load the service config file with every problem reported as ``file:line:column``.

The same approach as the policy loader (:mod:`autoscaler.policy.loader`): ruamel.yaml keeps
line numbers, pydantic validates, :func:`autoscaler.policy.locate.locate` maps each error
back to its line. Before validation the document is scanned for inline secrets, which are
refused with a message that says where the secret belongs instead; the value itself is
never repeated in any message.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import MarkedYAMLError

from autoscaler.policy.errors import PolicyError
from autoscaler.policy.locate import format_path, locate
from autoscaler.service.config import ServiceConfig

# Keys whose scalar value would be a secret. Names ending in _env/_file point at one instead.
_SECRET_KEY = re.compile(
    r"(secret|password|passwd|access_?key|api_?key|token|credential|private_?key|authorization)",
    re.IGNORECASE)
_CLOUD_KEY = re.compile(r"(aws_|alibaba|aliyun|access_?key)", re.IGNORECASE)
_POINTER_SUFFIXES = ("_env", "_file")
# Mappings whose keys are variable names, not secrets (ansible.secret_env: {var: ENV_NAME}).
_NAME_MAPS = {"secret_env"}
CLOUD_HINT = (
    "cloud credentials are never read from the config file: use the standard chain "
    "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or an instance role; "
    "ALIBABA_CLOUD_ACCESS_KEY_ID/ALIBABA_CLOUD_ACCESS_KEY_SECRET)"
)
SECRET_HINT = (
    "secrets never go in the config file: name an environment variable (<key>_env) or a "
    "file (<key>_file) that holds it"
)


class ConfigError(Exception):
    """The config file is invalid; ``errors`` are ``file:line:column`` problems."""

    def __init__(self, errors: list[PolicyError]):
        self.errors = sorted(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


def _walk(node: Any, path: tuple[int | str, ...] = ()) -> Iterator[tuple[tuple[int | str, ...], Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*path, str(key)), value
            if str(key) not in _NAME_MAPS:
                yield from _walk(value, (*path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, (*path, i))


def inline_secrets(doc: Any) -> list[tuple[tuple[int | str, ...], str]]:
    """(key path, message) for every scalar under a secret-looking key."""
    found = []
    for path, value in _walk(doc):
        key = path[-1]
        if not isinstance(key, str) or isinstance(value, dict | list) or value in (None, ""):
            continue
        lower = key.lower()
        if lower.endswith(_POINTER_SUFFIXES) or not _SECRET_KEY.search(lower):
            continue
        hint = CLOUD_HINT if _CLOUD_KEY.search(lower) else SECRET_HINT
        found.append((path, f"'{key}' looks like an inline secret; {hint}"))
    return found


def _unwrap(annotation: Any) -> Any:
    """The model, dict or list type inside Optional/Annotated/unions."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _unwrap(arg)
            if found is not None:
                return found
        return None
    if origin in (list, dict) or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return annotation
    return None


def _model_at(loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model whose fields are the valid keys at ``loc`` (None if unknown)."""
    current: Any = ServiceConfig
    for part in loc:
        origin = typing.get_origin(current)
        if origin is list and isinstance(part, int):
            current = _unwrap(typing.get_args(current)[0])
        elif origin is dict:
            current = _unwrap(typing.get_args(current)[1])
        elif isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            current = _unwrap(field.annotation) if field is not None else None
        else:
            return None
        if current is None:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _message(err: Any) -> str:
    kind, loc = err["type"], err["loc"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        known = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.5)
        hint = (f"; did you mean '{close[0]}'?" if close
                else f"; known keys: {', '.join(known)}" if known else "")
        return f"unknown key '{loc[-1]}'{hint}"
    if kind == "missing":
        return "required key is missing"
    return str(err["msg"]).removeprefix("Value error, ")


def _read(path: Path) -> Any:
    name = str(path)
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        return yaml.load(path.read_text())
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise ConfigError([PolicyError(name, line, col, "", f"not valid YAML: {exc.problem}")]) from None
    except OSError as exc:
        raise ConfigError([PolicyError(name, 1, 1, "", f"cannot read file: {exc.strerror}")]) from None


def _relative_to(config: ServiceConfig, base: Path) -> ServiceConfig:
    """Paths written in the file are relative to the file's directory."""

    def fix(p: Path | None) -> Path | None:
        return p if p is None or p.is_absolute() else Path(os.path.normpath(base / p))

    def given(model: BaseModel, *names: str) -> dict[str, Any]:
        return {n: fix(getattr(model, n)) for n in names
                if n in model.model_fields_set and getattr(model, n) is not None}

    tf, ans = config.terraform, config.ansible
    return config.model_copy(update={
        "policies_dir": fix(config.policies_dir),
        "prices_file": fix(config.prices_file),
        "terraform": tf.model_copy(update=given(tf, "workdir", "modules_dir")),
        "ansible": ans.model_copy(update=given(ans, "playbook", "runs_dir", "private_key_file")),
        "http": config.http.model_copy(update=given(config.http, "token_file")),
        "addresses": config.addresses.model_copy(update=given(config.addresses, "file")),
    })


def load_config(path: Path) -> ServiceConfig:
    """Parse and validate ``path``; raise :class:`ConfigError` with every problem found."""
    path = Path(path)
    name = str(path)
    doc = _read(path)
    if not isinstance(doc, CommentedMap):
        raise ConfigError([PolicyError(name, 1, 1, "", "the config file must be a YAML mapping")])
    secrets = inline_secrets(doc)
    if secrets:
        raise ConfigError([PolicyError(name, *locate(doc, loc, key=True), format_path(loc), msg)
                           for loc, msg in secrets])
    try:
        config = ServiceConfig.model_validate(doc)
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            loc = err["loc"]
            line, col = locate(doc, loc, key=err["type"] == "extra_forbidden")
            errors.append(PolicyError(name, line, col, format_path(loc), _message(err)))
        raise ConfigError(errors) from None
    return _relative_to(config, path.resolve().parent)


__all__ = ["ConfigError", "inline_secrets", "load_config"]
