"""Pure parsing of Slurm output: gres/TRES strings, host lists, node states, times.

Spellings differ between Slurm versions and commands; all of these are accepted:
``gpu:2``, ``gpu:t4:2``, ``gres:gpu:t4:2`` (22.05 ``tres_per_node``), ``gres/gpu:t4=2``
(23.02+), ``gpu:t4:1(IDX:0)`` (``gres_used``/``gres_detail``), ``gpu:2(S:0-1)``, and comma
lists mixing other gres (``gpu:2,shard:4``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

# Slurm GPU type names -> the catalog's GPU model names.
GPU_MODELS = {"t4": "T4", "v100": "V100", "a10g": "A10G", "a10": "A10", "a100": "A100",
              "h100": "H100", "l4": "L4", "p100": "P100", "k80": "K80"}
_NONE = {"", "(null)", "n/a", "none"}
MAX_HOSTS = 65536  # more nodes than one job of a real cluster spans


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


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def gpu_count(spec: str | None) -> float:
    return sum(g.count for g in parse_gres(spec) if g.name == "gpu")


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
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
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
    """22.05 ints, 23.02+ ``{"set": true, "number": N}``, or sinfo/squeue local ISO text."""
    value = _number(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:  # a year past 9999 (or the platform's time_t) is no time, not a traceback
            return datetime.fromtimestamp(value, UTC) if value > 0 else None
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str) and value.strip() and value.strip().upper() not in ("N/A", "NONE",
                                                                                  "UNKNOWN"):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        # Slurm prints the controller's local time without a zone.
        return parsed.astimezone(UTC) if parsed.tzinfo is None else parsed
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
        lo, _, hi = part.partition("-")
        if not lo.isdigit():
            continue
        step = 1
        if ":" in hi:
            hi, _, s = hi.partition(":")
            step = int(s) if s.isdigit() else 1
        for i in range(int(lo), int(hi or lo) + 1, step):
            out.append(str(i))
            if len(out) >= limit:
                return out
    return out
