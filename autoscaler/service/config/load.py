"""Load the service config file with every problem reported as ``file:line:column``.

The same approach as the policy loader (:mod:`autoscaler.policy.loader`): ruamel.yaml keeps
line numbers, pydantic validates, :func:`autoscaler.policy.locate.locate` maps each error
back to its line. Before validation the document is scanned for inline secrets
(:mod:`autoscaler.service.config.secret_scan`), which are refused with a message that says
where the secret belongs instead; the value itself is never repeated in any message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml.comments import CommentedMap

from autoscaler.policy.errors import PolicyError
from autoscaler.policy.locate import format_path, locate
from autoscaler.policy.paths import relative_to
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
        # Paths written in the file are relative to the file's directory.
        return ServiceConfig.model_validate(doc, context=relative_to(path.resolve().parent))
    except ValidationError as exc:
        raise ConfigError(validation_errors(name, doc, exc, ServiceConfig)) from None


__all__ = ["ConfigError", "inline_secrets", "load_config"]
