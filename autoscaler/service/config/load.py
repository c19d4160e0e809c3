"""Load the service config file with every problem reported as ``file:line:column``.

The same approach as the policy loader (:mod:`autoscaler.policy.loader`): ruamel.yaml keeps
line numbers, pydantic validates, :func:`autoscaler.policy.locate.locate` maps each error
back to its line. Before validation the document is scanned for inline secrets, which are
refused with a message that says where the secret belongs instead; the value itself is
never repeated in any message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml.comments import CommentedMap

from autoscaler.policy.errors import PolicyError
from autoscaler.policy.locate import format_path, locate
from autoscaler.policy.yaml_errors import read_yaml, validation_errors
from autoscaler.service.config.models import ServiceConfig

# Keys whose scalar value would be a secret (also header names such as X-Api-Key and
# environment names such as SLURM_JWT or MUNGE_KEY). Names ending in _env/_file point at
# one instead.
_SECRET_KEY = re.compile(
    r"(secret|password|passwd|pwd|access[-_]?key|api[-_]?key|token|credential|private[-_]?key"
    r"|auth|cookie|session|munge|jwt|signature)", re.IGNORECASE)
_CLOUD_KEY = re.compile(r"(aws_|alibaba|aliyun|access[-_]?key)", re.IGNORECASE)
# Secrets recognised by their value wherever they are: a URL with user:password@, a URL
# whose query string carries a secret-looking parameter, a JSON Web Token (Slurm's
# auth/jwt, Kubernetes service account tokens).
_URL_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@", re.IGNORECASE)
_URL_QUERY = re.compile(r"^[a-z][a-z0-9+.-]*://[^?#\s]*\?(?P<query>[^#\s]*)", re.IGNORECASE)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")
_POINTER_SUFFIXES = ("_env", "_file")
# Mappings whose keys are variable names, not secrets (ansible.secret_env: {var: ENV_NAME}).
_NAME_MAPS = {"secret_env"}
CLOUD_HINT = (
    "cloud credentials are never read from the config file: use the standard chain "
    "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or an instance role; "
    "ALIBABA_CLOUD_ACCESS_KEY_ID/ALIBABA_CLOUD_ACCESS_KEY_SECRET)"
)
_PATH_HINTS: dict[tuple[int | str, ...], str] = {
    ("store", "url"): "remove it and name an environment variable in store.password_env "
                      "(or use PGPASSWORD / ~/.pgpass)"}
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
            yield (*path, i), value
            yield from _walk(value, (*path, i))


def secret_in_value(value: str) -> str | None:
    """What kind of secret ``value`` visibly holds, or None (the value is never repeated)."""
    if _URL_PASSWORD.search(value):
        return "a URL with a password in it (user:password@)"
    query = _URL_QUERY.search(value)
    if query is not None:
        for part in query["query"].split("&"):
            name, eq, given = part.partition("=")
            if eq and given and _SECRET_KEY.search(name):
                return f"a URL whose query string holds a '{name}'"
    if _JWT.search(value):
        return "a JSON Web Token"
    return None


def inline_secrets(doc: Any) -> list[tuple[tuple[int | str, ...], str]]:
    """(key path, message) for every scalar under a secret-looking key, and every string
    that holds a secret by its form (URL password or secret query parameter, JWT)."""
    found = []
    for path, value in _walk(doc):
        key = path[-1]
        if isinstance(value, dict | list) or value in (None, ""):
            continue
        lower = str(key).lower()
        hint = CLOUD_HINT if _CLOUD_KEY.search(lower) else SECRET_HINT
        if (isinstance(key, str) and not lower.endswith(_POINTER_SUFFIXES)
                and _SECRET_KEY.search(lower)):
            found.append((path, f"'{key}' looks like an inline secret; {hint}"))
        elif isinstance(value, str) and (kind := secret_in_value(value)) is not None:
            what = f"'{key}'" if isinstance(key, str) else f"item {key}"
            found.append((path, f"{what} holds {kind}; {_PATH_HINTS.get(path, hint)}"))
    return found


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
