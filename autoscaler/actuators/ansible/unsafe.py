"""Variables for Ansible as data that is never templated.

Ansible renders every ``{{ }}`` and ``{% %}`` it finds in inventory and extra variables, so
a pool setting, a node address or a secret that holds one would run as code on the
controller (``{{ lookup('pipe', ...) }}``). Ansible's own answer is the ``!unsafe`` YAML
tag: a value carrying it is used as a literal string wherever it goes, including inside
other templates. Every string (mapping keys included) of the files written here carries the
tag, whatever its source, so no caller can forget it and no validation has to be perfect.
The one exception is the operator's own ``ansible.extra_vars`` from the service config: they
may be templates on purpose (the sandbox sets a path with ``{{ inventory_hostname }}``), so
:func:`write_extravars` writes them as plain JSON before the tagged secrets.

The files are YAML flow style: JSON with a tag before each string. JSON's string escapes
are YAML's double-quoted escapes; ``ensure_ascii`` keeps the text printable ASCII, which
every YAML reader accepts, and characters beyond U+FFFF (which JSON writes as a surrogate
pair) are written as YAML's 8-digit ``U`` escape.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TAG = "!unsafe"
# A \uD8xx\uDCxx pair not preceded by an escaped backslash.
_PAIR = re.compile(r"(?<!\\)((?:\\\\)*)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def _astral(match: re.Match[str]) -> str:
    high, low = int(match.group(2), 16), int(match.group(3), 16)
    return f"{match.group(1)}\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08x}"


def _string(text: str) -> str:
    return f"{TAG} {_PAIR.sub(_astral, json.dumps(text, ensure_ascii=True))}"


def dump_unsafe(value: Any) -> str:
    """``value`` as YAML in which every string is tagged ``!unsafe``."""
    if isinstance(value, str):
        return _string(value)
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)  # null, true/false, numbers: no template can hide in them
    if isinstance(value, Mapping):
        items = (f"{_string(str(k))}: {dump_unsafe(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(dump_unsafe(v) for v in value) + "]"
    if isinstance(value, os.PathLike):
        return _string(os.fspath(value))
    raise TypeError(f"cannot pass a {type(value).__name__} to Ansible")


def write_unsafe(path: Path, value: Any) -> Path:
    """Write ``value`` to ``path`` (owner-only: extra variables may hold secrets)."""
    return _write(path, dump_unsafe(value))


def write_extravars(path: Path, operator: Mapping[str, Any], untrusted: Mapping[str, Any]) -> Path:
    """The operator's variables as written (templates allowed), then ``untrusted`` ones
    (secrets) tagged ``!unsafe``; a name in both takes the untrusted value, as before."""
    entries = [f"{json.dumps(str(k))}: {json.dumps(v, default=str)}"
               for k, v in operator.items() if k not in untrusted]
    entries += [f"{_string(str(k))}: {dump_unsafe(v)}" for k, v in untrusted.items()]
    return _write(path, "{" + ", ".join(entries) + "}")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
    return path
