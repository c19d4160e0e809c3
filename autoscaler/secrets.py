"""Secrets are never in a config file: the file names an environment variable or a file
that holds them, read when a client is built.

The variables that held one are remembered for the process, so that the tools it runs
(Terraform and its provider plugins) are started without them: the store password or
Ansible's munge key is none of a provider's business (``child_env``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

_HELD: set[str] = set()  # environment variables this process read a secret from


class SecretError(RuntimeError):
    """A configured secret (env var or file) is not there."""


def read_secret(env: str | None, file: Path | None, what: str) -> str | None:
    """The secret from ``env`` (a variable NAME) or ``file``; None when neither is set."""
    if env is not None:
        _HELD.add(env)
        value = os.environ.get(env)
        if not value:
            raise SecretError(f"{what}: environment variable {env} is not set")
        return value
    if file is not None:
        try:
            return file.read_text().strip()
        except OSError as exc:
            raise SecretError(f"{what}: cannot read {file}: {exc.strerror}") from exc
    return None


def hold(names: Iterable[str]) -> None:
    """Remember ``names`` as variables holding secrets (read elsewhere, e.g. by Ansible)."""
    _HELD.update(names)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the variables that hold its secrets, plus
    ``extra`` (which may name one again on purpose)."""
    return {**{k: v for k, v in os.environ.items() if k not in _HELD}, **(extra or {})}
