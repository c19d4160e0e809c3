"""Secrets written into the config file, found by their key's name or by their form.

A secret in a config file is already in backups, diffs and tickets, so it is refused, never
redacted; the message says where it belongs instead and never repeats the value. Free text
(``terraform.regions.*.user_data``, a cloud-init script; env and header maps) is searched
for secrets by form too: a URL with ``user:password@`` or a secret query parameter, a JSON
Web Token, a PEM private key, an AWS access key id, a bearer token, or a secret-named variable assigned a
literal (``export DB_PASSWORD=...``, ``password: ...``, ``--token ...``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

# Keys whose scalar value would be a secret (also header names such as X-Api-Key and
# environment names such as SLURM_JWT or MUNGE_KEY). Names ending in _env/_file point at
# one instead.
_SECRET_KEY = re.compile(
    r"(secret|password|passwd|pwd|access[-_]?key|api[-_]?key|token|credential|private[-_]?key"
    r"|auth|cookie|session|munge|jwt|signature)", re.IGNORECASE)
_CLOUD_KEY = re.compile(r"(aws_|alibaba|aliyun|access[-_]?key)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"\b[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@", re.IGNORECASE)
_URL_QUERY = re.compile(r"\b[a-z][a-z0-9+.-]*://[^?#\s]*\?(?P<query>[^#\s]*)", re.IGNORECASE)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")
_PEM_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")
_BEARER = re.compile(r"\bBearer[ \t]+[A-Za-z0-9._~+/-]{8,}")
# A variable assigned a literal in a script or cloud-config: NAME=value, NAME: value,
# --name value (kubeadm join --token ...). The names are narrower than _SECRET_KEY's (PWD,
# XDG_SESSION_TYPE and Authorization headers are ordinary in a script); values that refer
# to a secret ($VAR, ${...}, $(cat file)), names of what is not one (..._file, ..._hash: the
# CA hash kubeadm join checks is public) and words that switch something on or off are not
# secrets.
_ASSIGNED = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)[ \t]*(?:=|:[ \t])[ \t]*[\"']?(?P<value>[^\s\"'$`<{]"
    r"[^\s\"';|&]*)")
_FLAG = re.compile(
    r"--(?P<name>[A-Za-z][A-Za-z0-9_-]*)[ \t]+[\"']?(?P<value>[^\s\"'$`<{-][^\s\"';|&]*)")
_SECRET_NAME = re.compile(r"(secret|passw(or)?d|token|api[-_]?key|access[-_]?key|private[-_]?key"
                          r"|credential|munge[-_]?key|jwt)", re.IGNORECASE)
_NOT_SECRET_NAME = re.compile(r"[-_.](env|file|path|dir|url|uri|type|name|id|stdin|hash)$",
                              re.IGNORECASE)
_SWITCHES = {"yes", "no", "true", "false", "on", "off", "none", "null", "0", "1"}
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
_PATH_HINTS: dict[tuple[int | str, ...], str] = {
    ("store", "url"): "remove it and name an environment variable in store.password_env "
                      "(or use PGPASSWORD / ~/.pgpass)"}
# Keys whose hint does not depend on where they are (terraform.regions.<any>.user_data).
_KEY_HINTS = {
    "user_data": "user_data is readable by every process on the instance (the metadata "
                 "service) and is kept in Terraform's state: give the node an instance role "
                 "to fetch it at boot, or let Ansible deliver it (ansible.secret_env)"}


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


def _assigned_secret(value: str) -> str | None:
    for match in [*_ASSIGNED.finditer(value), *_FLAG.finditer(value)]:
        name, given = match["name"], match["value"]
        if (_SECRET_NAME.search(name) and not _NOT_SECRET_NAME.search(name)
                and given.lower() not in _SWITCHES):
            return f"a value assigned to '{name[:40]}'"
    return None


def secret_in_value(value: str) -> str | None:
    """What kind of secret ``value`` visibly holds, or None (the value is never repeated)."""
    if _URL_PASSWORD.search(value):
        return "a URL with a password in it (user:password@)"
    for query in _URL_QUERY.finditer(value):
        for part in query["query"].split("&"):
            name, eq, given = part.partition("=")
            if eq and given and _SECRET_KEY.search(name):
                return f"a URL whose query string holds a '{name}'"
    if _JWT.search(value):
        return "a JSON Web Token"
    if _PEM_KEY.search(value):
        return "a private key"
    if _AWS_KEY_ID.search(value):
        return "an AWS access key id"
    if _BEARER.search(value):
        return "a bearer token"
    return _assigned_secret(value)


def _hint(path: tuple[int | str, ...]) -> str:
    key = str(path[-1])
    if path in _PATH_HINTS:
        return _PATH_HINTS[path]
    if key in _KEY_HINTS:
        return _KEY_HINTS[key]
    return CLOUD_HINT if _CLOUD_KEY.search(key) else SECRET_HINT


def inline_secrets(doc: Any) -> list[tuple[tuple[int | str, ...], str]]:
    """(key path, message) for every scalar under a secret-looking key, and every string
    that holds a secret by its form."""
    found = []
    for path, value in _walk(doc):
        key = path[-1]
        if isinstance(value, dict | list) or value in (None, ""):
            continue
        lower = str(key).lower()
        if (isinstance(key, str) and not lower.endswith(_POINTER_SUFFIXES)
                and _SECRET_KEY.search(lower)):
            found.append((path, f"'{key}' looks like an inline secret; {_hint(path)}"))
        elif isinstance(value, str) and (kind := secret_in_value(value)) is not None:
            what = f"'{key}'" if isinstance(key, str) else f"item {key}"
            found.append((path, f"{what} holds {kind}; {_hint(path)}"))
    return found
