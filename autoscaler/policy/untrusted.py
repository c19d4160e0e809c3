"""Checks on the raw bytes and the parsed shape of a YAML file before anything reads it.

Policy files come from teams and config files from operators; neither may stop the service
or cost it seconds of CPU. A file is refused, with the line of the first offending byte,
when it is larger than a policy could ever be, is not UTF-8, holds control characters, or
nests (or expands through aliases) beyond any real file.
"""

from __future__ import annotations

import re
from typing import Any

# ruamel.yaml's round-trip loader reads ~50 KB/s of structured YAML here; real policy and
# config files are 1-5 KB (a team of 30 pools fits). 32 KiB keeps the worst accepted file
# (dense flow YAML) well under a second on an idle core.
MAX_BYTES = 32 * 1024
MAX_DEPTH = 32
MAX_NODES = 20_000  # mappings, sequences and scalars, counted with aliases expanded
# C0 controls except tab, LF, CR; DEL; C1 controls; bidi overrides that hide text.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_BRACKETS = re.compile(r"[\[\]{}]")


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def decode(data: bytes) -> tuple[str | None, tuple[int, int, str] | None]:
    """(text, None) or (None, (line, column, reason)) for bytes that must not be parsed."""
    if len(data) > MAX_BYTES:
        # Only MAX_BYTES + 1 bytes are read: the file's size is not known, only "too big".
        return None, (1, 1, f"file is larger than {MAX_BYTES} bytes, the most that is read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[:exc.start]
        line = before.count(b"\n") + 1
        col = len(before) - (before.rfind(b"\n") + 1) + 1
        return None, (line, col, f"not UTF-8: byte 0x{data[exc.start]:02x} cannot be decoded")
    text = text.removeprefix("\ufeff")
    bad = _CONTROL.search(text)
    if bad:
        line, col = _position(text, bad.start())
        return None, (line, col, f"control character U+{ord(bad.group()):04X} is not allowed")
    deep = _flow_too_deep(text)
    if deep is not None:
        return None, (*_position(text, deep), f"nested more than {MAX_DEPTH} levels deep")
    return text, None


def _flow_too_deep(text: str) -> int | None:
    """Index of the first bracket past MAX_DEPTH open ones (quotes are not tracked: the
    count is only a guard, the parsed document's depth is checked exactly afterwards)."""
    depth = 0
    for match in _BRACKETS.finditer(text):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_DEPTH:
            return match.start()
        depth = max(depth, 0)
    return None


def shape_problem(doc: Any) -> tuple[list[int | str], str] | None:
    """(key path, reason) when the parsed document nests or expands beyond the limits."""
    stack: list[tuple[Any, list[int | str]]] = [(doc, [])]
    count = 0
    while stack:
        node, path = stack.pop()
        count += 1
        if count > MAX_NODES:
            return path, f"more than {MAX_NODES} values (aliases expanded); this is not a policy"
        if len(path) > MAX_DEPTH:
            return path, f"nested more than {MAX_DEPTH} levels deep"
        if isinstance(node, dict):
            stack.extend((v, [*path, str(k)]) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, [*path, i]) for i, v in enumerate(node))
    return None
