"""Load the service config file with every problem reported as ``file:line:column``.

The same approach as the policy loader (:mod:`autoscaler.policy.loader`): ruamel.yaml keeps
line numbers, pydantic validates, :func:`autoscaler.policy.locate.locate` maps each error
back to its line. Before validation the document is scanned for inline secrets
(:mod:`autoscaler.service.config.secret_scan`), which are refused with a message that says
where the secret belongs instead; the value itself is never repeated in any message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml.comments import CommentedMap

from autoscaler.policy.errors import PolicyError
from autoscaler.policy.locate import format_path, locate
from autoscaler.policy.yaml_errors import read_yaml, validation_errors
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.config.secret_scan import inline_secrets


class ConfigError(Exception):
    """The config file is invalid; ``errors`` are ``file:line:column`` problems."""

    def __init__(self, errors: list[PolicyError]):
        self.errors = sorted(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


def _read(path: Path) -> Any:
    doc, errors = read_yaml(path)
    if errors:
        raise ConfigError(errors)
    return doc


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
        "ansible": ans.model_copy(update=given(ans, "playbook", "runs_dir", "private_key_file",
                                                   "known_hosts_file")),
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
        raise ConfigError(validation_errors(name, doc, exc, ServiceConfig)) from None
    return _relative_to(config, path.resolve().parent)


__all__ = ["ConfigError", "inline_secrets", "load_config"]
