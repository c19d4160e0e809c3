"""A recorded engine input (``plan --snapshot FILE.json``) read as untrusted data.

The file may come from anyone (a bug report, another site), and whatever it says changes a
plan. It is refused, every problem as ``file:line:column: path: reason``, when it is not
UTF-8 JSON, nests deeper than any snapshot, holds NaN or infinities, says ``now: 5`` or a
time without a zone (strict types: no number is read as a time, no string as a number), a
``now`` or ``taken_at`` outside 2000..9000 or a ``now`` more than a year (``MAX_AGE``) from
``taken_at`` (a time past datetime's ends would raise, not be refused), has
a node report what its instance type cannot have (negative or too many GPUs, utilization
outside 0..100: ``model/bounds.py``), lists a node twice (or in two pools), or repeats a key.
A pending job's submit time, not given or not believable, is the snapshot's ``taken_at``,
as the signal reader counts it from the tick it first saw the job (``model/bounds.Times``):
it waits burst_after and max_wait from there, not never (the engine reads no time as no
wait at all: it cannot count from a first tick it does not remember).
Pure: it takes the file's name and bytes, and reads no clock.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from autoscaler.catalog import default_catalog
from autoscaler.model.bounds import MAX_AGE, NodeBounds, Times, metrics_problem, scheduler_problem
from autoscaler.model.snapshot import DecisionInput
from autoscaler.policy.locate import format_path

MAX_DEPTH = 64
# A recorded input of 10,000 nodes is ~10 MB; anything far larger is not one.
MAX_BYTES = 64 * 1024 * 1024
_DECODER = json.JSONDecoder()
# The years a snapshot may be taken in: every real one, and far enough from datetime's ends
# that Times(taken_at) (taken_at -/+ MAX_AGE, SKEW) and the engine's sums stay within them.
YEARS = (datetime(2000, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC))


class SnapshotFileError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def locate_json(text: str, loc: Sequence[int | str]) -> tuple[int, int]:
    """(line, column) of the value at ``loc``, or of the deepest part of it that exists."""
    pos = _skip_ws(text, 0)
    try:
        for part in loc:
            found = _member(text, pos, part)
            if found is None:
                break
            pos = found
    except ValueError:  # only valid JSON is located; anything else points where we were
        pass
    return _position(text, pos)


def _member(text: str, pos: int, part: int | str) -> int | None:
    """Start of member ``part`` of the object or array starting at ``pos``."""
    if pos >= len(text) or text[pos] not in "{[":
        return None
    is_object, index = text[pos] == "{", 0
    pos = _skip_ws(text, pos + 1)
    while pos < len(text) and text[pos] not in "}]":
        key: Any = index
        if is_object:
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _skip_ws(text, _skip_ws(text, pos) + 1)  # past ':'
        if str(key) == str(part):
            return pos
        _, pos = _DECODER.raw_decode(text, pos)
        pos = _skip_ws(text, pos)
        if pos >= len(text) or text[pos] != ",":
            return None  # the end of the object or array: ``part`` is not in it
        pos = _skip_ws(text, pos + 1)
        index += 1
    return None


_CONSTANT = re.compile(r"[:\[,]\s*(-?Infinity|NaN)\b")


def _constant_at(text: str) -> int:
    match = _CONSTANT.search(text)
    return match.start(1) if match else 0


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a snapshot may hold")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def _too_deep(doc: Any) -> bool:
    stack = [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((c, depth + 1) for c in children)
    return False


def _problems(data: DecisionInput) -> Iterator[tuple[list[int | str], str]]:
    times: list[tuple[list[int | str], datetime]] = [
        (["now"], data.now), (["snapshot", "taken_at"], data.snapshot.taken_at)]
    for loc, when in times:
        if when.tzinfo is None or when.utcoffset() is None:
            yield loc, "a time needs its zone (e.g. 2026-11-30T12:00:00Z); this one has none"
        elif not YEARS[0] <= when <= YEARS[1]:
            yield loc, f"{when.isoformat()} is no time a snapshot was taken at (2000..9000)"
    now, taken = data.now, data.snapshot.taken_at
    if now.utcoffset() is not None and taken.utcoffset() is not None and abs(now - taken) > MAX_AGE:
        yield ["now"], f"more than {MAX_AGE.days} days from snapshot.taken_at ({taken.isoformat()})"
    seen: dict[str, int] = {}
    for i, node in enumerate(data.fleet.nodes):
        if node.name in seen:
            other = data.fleet.nodes[seen[node.name]]
            where = (f"in pool {node.pool_key} and also in pool {other.pool_key}"
                     if other.pool_key != node.pool_key else "listed twice")
            yield (["fleet", "nodes", i, "name"],
                   f"node {node.name!r} is {where} (fleet.nodes[{seen[node.name]}])")
        seen.setdefault(node.name, i)
    # What the signal reader would not believe of a node (model/bounds.py): no negative or
    # NaN count, no more GPUs than the node's type has, utilization within 0..100.
    bounds = NodeBounds(default_catalog(), {n.name: n for n in data.fleet.nodes}, {}, lambda _: None)
    for name, obs in data.snapshot.nodes.items():
        bound = bounds.of(name)
        if obs.scheduler is not None and (why := scheduler_problem(obs.scheduler, bound)):
            yield ["snapshot", "nodes", name, "scheduler"], why
        if obs.metrics is not None and (why := metrics_problem(obs.metrics, bound)):
            yield ["snapshot", "nodes", name, "metrics"], why


def parse_decision_input(name: str, data: bytes) -> DecisionInput:
    """The engine input in ``data``, or :class:`SnapshotFileError` listing every problem."""
    if len(data) > MAX_BYTES:
        raise SnapshotFileError([f"{name}:1: larger than {MAX_BYTES // 2**20} MiB; not a snapshot"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise SnapshotFileError([f"{name}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x})"]) from None
    try:
        doc = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise SnapshotFileError([f"{name}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}"]) from None
    except ValueError as exc:  # from the hooks, which do not know the position
        line, col = _position(text, _constant_at(text))
        raise SnapshotFileError([f"{name}:{line}:{col}: {exc}"]) from None
    except RecursionError:
        raise SnapshotFileError([f"{name}:1:1: nested more than {MAX_DEPTH} levels deep"]) from None
    if _too_deep(doc):
        raise SnapshotFileError([f"{name}:1:1: nested more than {MAX_DEPTH} levels deep"])
    try:
        # strict: "5" is not a number, 5 is not a time; no coercion of what a file says.
        parsed = DecisionInput.model_validate_json(text, strict=True)
    except ValidationError as exc:
        raise SnapshotFileError([_at(name, text, list(e["loc"]), str(e["msg"]))
                                 for e in exc.errors()[:20]]) from None
    problems = [_at(name, text, loc, why) for loc, why in _problems(parsed)]
    problems += [_at(name, text, loc, "not a finite number") for loc in _non_finite(doc)]
    if problems:
        raise SnapshotFileError(problems)
    return _dated(parsed)


def _dated(data: DecisionInput) -> DecisionInput:
    """``data`` with its pending jobs' submit times as the reader makes them, at taken_at."""
    times = Times(data.snapshot.taken_at, {}, {})
    pools = {}
    for key, obs in data.snapshot.pools.items():
        pending = [times.pending(job) for job in obs.pending]
        shapes = [times.shape(shape) for shape in obs.pending_shapes]
        if any(a is not b for a, b in zip([*pending, *shapes], [*obs.pending, *obs.pending_shapes],
                                          strict=True)):
            pools[key] = obs.model_copy(update={"pending": pending, "pending_shapes": shapes})
    if not pools:
        return data
    return data.model_copy(update={"snapshot": data.snapshot.model_copy(
        update={"pools": {**data.snapshot.pools, **pools}})})


def _non_finite(doc: Any, loc: list[int | str] | None = None) -> Iterator[list[int | str]]:
    """Floats too large for a double (1e999) parse as infinity without a NaN token."""
    loc = loc or []
    if isinstance(doc, float) and not math.isfinite(doc):
        yield loc
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield from _non_finite(v, [*loc, k])
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _non_finite(v, [*loc, i])


def _at(name: str, text: str, loc: list[int | str], why: str) -> str:
    line, col = locate_json(text, loc)
    path = format_path(loc)
    return f"{name}:{line}:{col}: {path}: {why}" if path else f"{name}:{line}:{col}: {why}"


__all__ = ["SnapshotFileError", "locate_json", "parse_decision_input"]
