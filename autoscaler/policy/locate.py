"""Map a key path inside a ruamel.yaml document back to its line and column."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq


def format_path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def locate(doc: Any, loc: Sequence[int | str], *, key: bool = False) -> tuple[int, int]:
    """1-based (line, column) of the value at ``loc`` (or of its key when ``key``).

    Walks as deep as the document goes: a missing key points at its parent mapping,
    which is where the operator has to add it.
    """
    node, line, col = doc, 0, 0
    if isinstance(doc, CommentedMap | CommentedSeq) and doc.lc.line is not None:
        line, col = doc.lc.line, doc.lc.col
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, CommentedMap) and isinstance(part, str) and part in node:
            line, col = node.lc.key(part) if (key and last) else node.lc.value(part)
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            line, col = node.lc.item(part)
            node = node[part]
        else:
            break
    return line + 1, col + 1
