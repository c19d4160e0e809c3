"""Pure parsing of Slurm output: gres/TRES strings, host lists, node states, times, job
constraints (``--constraint``).

Spellings differ between Slurm versions and commands; all of these are accepted:
``gpu:2``, ``gpu:t4:2``, ``gres:gpu:t4:2`` (22.05 ``tres_per_node``), ``gres/gpu:t4=2``
(23.02+), ``gpu:t4:1(IDX:0)`` (``gres_used``/``gres_detail``), ``gpu:2(S:0-1)``, and comma
lists mixing other gres (``gpu:2,shard:4``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Set
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

# Slurm GPU type names -> the catalog's GPU model names.
GPU_MODELS = {"t4": "T4", "v100": "V100", "a10g": "A10G", "a10": "A10", "a100": "A100",
              "h100": "H100", "l4": "L4", "p100": "P100", "k80": "K80"}
_NONE = {"", "(null)", "n/a", "none"}
MAX_HOSTS = 65536  # more nodes than one job of a real cluster spans
MAX_NAME = 255  # past any host name; with MAX_HOSTS, bounds what one host list expands to
# One range of a host list or job array: 9 digits is past any node or task index Slurm
# allows, and keeps int() and the zero padding of a name small.
_RANGE = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9}))?")
_ARRAY_RANGE = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9})(?::([0-9]{1,9}))?)?")
# A node name the autoscaler passes to Slurm or believes from it (hostname syntax).
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass(frozen=True)
class Gres:
    name: str
    type: str | None
    count: float


def _split_outside(text: str, opening: str, closing: str) -> list[str]:
    """Split on commas outside brackets: ``gpu:2(IDX:0,2)``, ``gpu[1-2,5],cpu1``."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        depth += (ch == opening) - (ch == closing)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_gres(spec: str | None) -> list[Gres]:
    if spec is None or spec.strip().lower() in _NONE:
        return []
    out = []
    for raw in _split_outside(spec, "(", ")"):
        item = re.sub(r"\(.*\)$", "", raw)  # (IDX:0-1), (S:0)
        item = item.removeprefix("gres:").removeprefix("gres/")
        if "=" in item:  # gres/gpu:t4=2
            name_type, _, amount = item.partition("=")
            parts = [*name_type.split(":"), amount]
        else:
            parts = item.split(":")
        if parts and _is_number(parts[-1]):
            count = float(parts[-1])
            parts = parts[:-1]
        else:
            count = 1.0  # "gpu" alone means one
        if not parts or not parts[0]:
            continue
        out.append(Gres(parts[0], parts[1] if len(parts) > 1 and parts[1] else None, count))
    return out


def absent(text: str) -> bool:
    """Slurm's spellings of no value: empty, ``(null)``, ``N/A``, ``None``."""
    return text.strip().lower() in _NONE


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def gpu_count(spec: str | None) -> float:
    return sum(g.count for g in parse_gres(spec) if g.name == "gpu")


def whole_gpu_count(spec: str | None) -> float | None:
    """GPUs of ``spec`` when every gpu count in it is a whole number from 0 up, else None.

    For a count held against an instance type's GPUs: NaN compares false both ways, and
    inf or a fraction is no number of devices, so neither may pass for enough GPUs."""
    counts = [g.count for g in parse_gres(spec) if g.name == "gpu"]
    if not all(math.isfinite(c) and c >= 0 and c.is_integer() for c in counts):
        return None
    return sum(counts)


def gpu_type(spec: str | None) -> str | None:
    for g in parse_gres(spec):
        if g.name == "gpu" and g.type:
            return g.type
    return None


def gpu_model(slurm_type: str | None) -> str | None:
    if not slurm_type:
        return None
    return GPU_MODELS.get(slurm_type.lower(), slurm_type.upper())


def expand_hostlist(hostlist: str | None, limit: int = MAX_HOSTS) -> list[str]:
    """``gpu[1-3,07],cpu5`` -> ``gpu1 gpu2 gpu3 gpu07 cpu5`` (zero padding kept); at most
    ``limit`` names, so ``gpu[1-1000000000]`` costs what a real cluster's list does."""
    if not hostlist or hostlist.strip().lower() in _NONE:
        return []
    out: list[str] = []
    for item in _split_outside(hostlist, "[", "]"):
        match = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", item)
        if match is None:
            out.append(item)
            continue
        prefix, ranges, suffix = match.groups()
        if len(prefix) + len(suffix) > MAX_NAME:
            continue
        for part in ranges.split(","):
            bounds = _RANGE.fullmatch(part.strip())
            if bounds is None:  # gpu[a-b], gpu[-5], gpu[1-3-5]: no names, not the whole list
                continue
            lo, hi = bounds.group(1), bounds.group(2)
            width = len(lo)
            for i in range(int(lo), min(int(hi or lo) + 1, int(lo) + limit - len(out))):
                out.append(f"{prefix}{i:0{width}d}{suffix}")
    return out[:limit]


def node_state(state: str | list[str] | None, flags: list[str] | None = None) -> tuple[str, bool, bool]:
    """(idle|mixed|allocated|draining|drained|down|unknown, ready, cordoned).

    ``state`` is 22.05's ``"mixed"`` + ``state_flags``, 23.02+'s ``["MIXED", "DRAIN"]``, or
    ``sinfo``'s long text (``draining``, ``idle*``, ``down~``, ``allocated+``).
    """
    if isinstance(state, list):
        base, extra = (state[0] if state else "unknown"), [s.upper() for s in state[1:]]
    else:
        text = (state or "unknown").strip().lower()
        suffix = re.search(r"[*~#!%$@^\-+]+$", text)
        base, extra = re.sub(r"[*~#!%$@^\-+]+$", "", text), []
        if suffix and "*" in suffix.group(0):
            extra.append("NOT_RESPONDING")
    flags = [f.upper() for f in (flags or [])] + extra
    base = base.lower()
    drain = "DRAIN" in flags or base in ("draining", "drained", "drain")
    not_responding = "NOT_RESPONDING" in flags
    if base in ("down", "fail", "failing", "error", "future", "unknown") or not_responding:
        name = "down" if base != "unknown" or not_responding else "unknown"
        return name, False, drain
    if base in ("draining", "drained"):
        return base, True, True
    if drain:
        busy = base in ("mixed", "allocated", "completing")
        return ("draining" if busy else "drained"), True, True
    if base == "completing":
        base = "mixed"
    if base not in ("idle", "mixed", "allocated"):
        return "unknown", False, False
    return base, True, False


def _number(value: Any) -> Any:
    """A 23.02+ ``{"set", "infinite", "number"}`` as its number (None when unset or
    infinite); any other value as it is."""
    if isinstance(value, dict):
        return value.get("number") if value.get("set", True) and not value.get("infinite") else None
    return value


def epoch(value: Any) -> datetime | None:
    """22.05 ints, 23.02+ ``{"set": true, "number": N}``, or squeue's formatted ISO text,
    which ``signals/slurm.py`` has printed in UTC (a time without a zone is UTC)."""
    value = _number(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:  # a year past 9999 (or the platform's time_t) is no time, not a traceback
            return datetime.fromtimestamp(value, UTC) if value > 0 else None
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str) and value.strip() and value.strip().upper() not in ("N/A", "NONE",
                                                                                  "UNKNOWN"):
        try:  # a time past datetime's ends in UTC (0001-01-01T00:00+01:00) is no time either
            parsed = datetime.fromisoformat(value.strip())
            return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
        except (ValueError, OverflowError):
            return None
    return None


# Slurm's INFINITE and NO_VAL time limits (uint32) in 22.05's JSON.
_NO_LIMIT = 0xFFFFFFFE
_LIMIT_TEXT = re.compile(r"^(?:(?P<days>[0-9]{1,5})-)?(?P<clock>[0-9]{1,6}(?::[0-9]{1,2}){0,2})$")


def time_limit(value: Any) -> timedelta | None:
    """A job's time limit: JSON minutes (22.05 int, 23.02+ ``{"set", "infinite", "number"}``)
    or squeue's ``%l`` text (``[days-]hours:minutes:seconds``, ``minutes:seconds``); None
    when unlimited or unknown."""
    value = _number(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return timedelta(minutes=value) if 0 < value < _NO_LIMIT else None
    if not isinstance(value, str):
        return None
    m = _LIMIT_TEXT.match(value.strip())
    if m is None:
        return None  # UNLIMITED, NOT_SET, INVALID
    days, rest = int(m["days"] or 0), [int(x) for x in m["clock"].split(":")]
    h, mi, sec = ([0] * (3 - len(rest)) + rest) if len(rest) > 1 else (0, rest[0], 0)
    limit = timedelta(days=days, hours=h, minutes=mi, seconds=sec)
    return limit if limit > timedelta(0) else None


def array_tasks(spec: str | None, limit: int = 1000) -> list[str]:
    """Task ids of a pending array (``1-10%2``, ``1,3,5-7``); at most ``limit``."""
    if not spec:
        return []
    out: list[str] = []
    for part in spec.split("%", 1)[0].split(","):
        task = _ARRAY_RANGE.fullmatch(part.strip())
        step = int(task.group(3) or 1) if task else 0
        if task is None or step < 1:
            continue  # 1-x, 1-5:0: that range has no tasks; the others still count
        lo, hi = task.group(1), task.group(2)
        for i in range(int(lo), int(hi or lo) + 1, step):
            out.append(str(i))
            if len(out) >= limit:
                return out
    return out


# --constraint: at most this long and nested this deep (slurmctld allows one [...] with
# (...) inside); a feature name of letters, digits, '_', '.', '-' (what the autoscaler gives
# its nodes: team-vision, g4dn.12xlarge, us-east-1a, on-demand).
MAX_CONSTRAINT = 1024
MAX_NESTING = 4
MAX_FEATURE = 64
_CONSTRAINT_TOKEN = re.compile(r"[A-Za-z0-9_.-]+|\*[0-9]{1,6}|[&,|()\[\]]|.", re.S)
_CLOSING = {"(": ")", "[": "]"}


class ConstraintError(ValueError):
    """A constraint outside the syntax read here; the message never quotes the input."""


@dataclass(frozen=True)
class Group:
    """Items joined by operators, evaluated left to right with no precedence, as slurmctld
    does (``a|b&c`` is ``(a|b)&c``): ``ops[i]`` joins the result so far and ``items[i+1]``."""

    items: tuple[Expr, ...]
    ops: tuple[str, ...]  # "&" or "|"


Expr: TypeAlias = "str | Group"


@dataclass(frozen=True)
class Constraint:
    text: str  # as squeue reported it, checked: only the characters of the syntax
    expr: Expr

    def __str__(self) -> str:
        return self.text if len(self.text) <= 120 else self.text[:117] + "..."

    def admits(self, features: Set[str]) -> bool:
        """Whether a node with ``features`` satisfies the constraint."""
        return _admits(self.expr, features)

    def names(self) -> frozenset[str]:
        out: set[str] = set()
        todo = [self.expr]
        while todo:
            expr = todo.pop()
            if isinstance(expr, str):
                out.add(expr)
            else:
                todo.extend(expr.items)
        return frozenset(out)


def _admits(expr: Expr, features: Set[str]) -> bool:
    if isinstance(expr, str):
        return expr in features
    result = _admits(expr.items[0], features)
    for op, item in zip(expr.ops, expr.items[1:], strict=True):
        result = (result and _admits(item, features)) if op == "&" else (
            result or _admits(item, features))
    return result


def parse_constraint(text: str | None) -> Constraint | None:
    """A job's constraint as squeue gives it (``features``, ``%f``), None when it has none.

    ``&`` and ``,`` are AND (slurmctld stores ``a,b`` as ``a&b``), ``|`` is OR, ``(...)``
    groups, ``[...]`` (matching OR, multiple counts) is read as a group: one node must
    satisfy it. A count (``a*2``) is read as the feature alone. Anything else (``!``,
    spaces, other characters) raises ConstraintError."""
    if text is None or text.strip().lower() in _NONE:
        return None
    if len(text) > MAX_CONSTRAINT:
        raise ConstraintError(f"longer than {MAX_CONSTRAINT} characters")
    frames: list[tuple[list[Expr], list[str], str]] = [([], [], "")]
    want_item = True
    for match in _CONSTRAINT_TOKEN.finditer(text):
        token, at = match.group(0), match.start() + 1
        items, ops, closing = frames[-1]
        if token[0] in _CLOSING and want_item:
            if len(frames) > MAX_NESTING:
                raise ConstraintError(f"nested deeper than {MAX_NESTING} at character {at}")
            frames.append(([], [], _CLOSING[token[0]]))
        elif token in (")", "]") and not want_item and token == closing:
            frames.pop()
            frames[-1][0].append(items[0] if len(items) == 1 else Group(tuple(items), tuple(ops)))
        elif token in ("&", ",", "|") and not want_item:
            ops.append("|" if token == "|" else "&")
            want_item = True
        elif token[0] == "*" and len(token) > 1 and not want_item:
            pass  # a node count: the nodes that have the feature are what a pool can be
        elif re.fullmatch(r"[A-Za-z0-9_.-]+", token) and want_item:
            if len(token) > MAX_FEATURE:
                raise ConstraintError(f"a feature name longer than {MAX_FEATURE} characters")
            items.append(token)
            want_item = False
        else:
            raise ConstraintError(f"character {at} does not belong there in Slurm's syntax")
    if want_item or len(frames) > 1:
        raise ConstraintError("it ends before its expression does")
    items, ops, _ = frames[0]
    return Constraint(text, items[0] if len(items) == 1 else Group(tuple(items), tuple(ops)))
