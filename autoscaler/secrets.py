"""Secrets are never in a config file: the file names an environment variable or a file
that holds them, read when a client is built.

The variables that held one are remembered for the process, so that the tools it runs
are started without them: the store password or Ansible's munge key is none of a
Terraform provider's business (``child_env``), and Ansible, which talks to no cloud API,
gets neither those nor the clouds' credentials (``blanked``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

_HELD: set[str] = set()  # environment variables this process read a secret from
# The variables the clouds' SDKs and Terraform providers read credentials from.
CLOUD_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                     "ALICLOUD_ACCESS_KEY", "ALICLOUD_SECRET_KEY", "ALICLOUD_SECURITY_TOKEN",
                     "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
                     "ALIBABA_CLOUD_SECURITY_TOKEN")


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


def blanked(also: Iterable[str] = ()) -> dict[str, str]:
    """Every variable of this environment that holds a secret, and each of ``also`` that is
    set, mapped to "": overrides for a child that is handed the whole environment and can
    only be given more (ansible-runner copies ``os.environ``, adds its ``envvars`` and
    writes the lot to its artifacts)."""
    return {name: "" for name in (*_HELD, *also) if os.environ.get(name)}
