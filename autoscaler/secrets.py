"""Secrets are never in a config file: the file names an environment variable or a file
that holds them, read when a client is built."""

from __future__ import annotations

import os
from pathlib import Path


class SecretError(RuntimeError):
    """A configured secret (env var or file) is not there."""


def read_secret(env: str | None, file: Path | None, what: str) -> str | None:
    """The secret from ``env`` (a variable NAME) or ``file``; None when neither is set."""
    if env is not None:
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
