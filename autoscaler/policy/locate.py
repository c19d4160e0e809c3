"""Map a key path inside a ruamel.yaml document back to its line and column."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq, merge_attrib


def format_path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def locate(doc: Any, loc: Sequence[int | str], *, key: bool = False) -> tuple[int, int]:
    """1-based (line, column) of the value at ``loc`` (or of its key when ``key``).

    Walks as deep as the document goes and never raises: a missing key points at its
    parent mapping, which is where the operator has to add it, and a key that came in
    through a ``<<`` merge points at the mapping that writes it.
    """
    node, line, col = doc, 0, 0
    if isinstance(doc, CommentedMap | CommentedSeq) and doc.lc.line is not None:
        line, col = doc.lc.line, doc.lc.col
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, CommentedMap) and isinstance(part, str) and part in node:
            where = _written(node, part)
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            where = _own(node, part)
        else:
            break
        if where is not None:  # [key line, key column, value line, value column]
            line, col = (where[0], where[1]) if key and last else (where[2], where[3])
        node = node[part]
    return line + 1, col + 1


def _own(node: CommentedMap | CommentedSeq, part: int | str) -> list[int] | None:
    """[key line, key column, value line, value column] that ruamel recorded for ``part``
    in this node's own text (an item of a sequence has only its own), if any."""
    where = (node.lc.data or {}).get(part)
    if not isinstance(where, list | tuple) or len(where) not in (2, 4):
        return None
    return [*where, *where] if len(where) == 2 else list(where)


def _written(node: CommentedMap, key: str) -> list[int] | None:
    """Positions of ``key`` in the mapping that writes it: ``node`` itself, or a mapping
    merged in with ``<<`` (earlier merges win, as in YAML). Merge chains can be long and
    shared, so they are walked without recursion and each mapping once."""
    todo: list[Any] = [node]
    seen: set[int] = set()
    while todo:
        current = todo.pop()
        if not isinstance(current, CommentedMap) or id(current) in seen:
            continue
        seen.add(id(current))
        where = _own(current, key)
        if where is not None:
            return where
        todo.extend(reversed(list(getattr(current, merge_attrib, ()))))
    return None
