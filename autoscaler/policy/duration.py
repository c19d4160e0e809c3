"""Durations written the way operators write them: ``90s``, ``15m``, ``48h``, ``2d``."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, WithJsonSchema

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
PATTERN = r"^(\d+(\.\d+)?(ms|s|m|h|d|w))+$"
# Longest duration anywhere in a policy or config: a year (and a day). Longer values are
# typos, and would overflow datetime arithmetic in the engine.
MAX = timedelta(days=366)
_MAX_TEXT = 64


def parse_duration(value: Any) -> timedelta:
    """Accept ``1h30m``-style strings, plain seconds, or a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("a duration like '90s', '15m' or '48h' is expected, not a boolean")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError("a duration cannot be negative, infinite or NaN")
        return _bounded(float(value), value)
    if not isinstance(value, str):
        raise ValueError("a duration like '90s', '15m' or '48h' is expected")
    if len(value) > _MAX_TEXT:
        raise ValueError(f"a duration is at most {_MAX_TEXT} characters")
    text = value.strip().lower()
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(
            f"{value!r} is not a duration; write a number and a unit, e.g. '90s', '15m', '48h', '1h30m'"
        )
    return _bounded(total, value)


def _bounded(seconds: float, given: Any) -> timedelta:
    if not seconds <= MAX.total_seconds():  # also false for inf and NaN
        raise ValueError(f"{given!r} is longer than the longest allowed duration "
                         f"({MAX.days}d)")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """Shortest exact form: 900s -> '15m', 5400s -> '1h30m'."""
    seconds = int(value.total_seconds())
    if seconds == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(out)


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": PATTERN, "examples": ["90s", "15m", "48h"]}),
]


def between(minimum: timedelta, maximum: timedelta, why: str) -> AfterValidator:
    """A range for a Duration field, refused with its reason."""
    def check(value: timedelta) -> timedelta:
        if not minimum <= value <= maximum:
            raise ValueError(f"{format_duration(value)} is not between {format_duration(minimum)} "
                             f"and {format_duration(maximum)}: {why}")
        return value
    return AfterValidator(check)


def at_least(minimum: timedelta, why: str) -> AfterValidator:
    """A floor for a Duration field, refused with its reason: ``Annotated[Duration, at_least(...)]``."""
    def check(value: timedelta) -> timedelta:
        if value < minimum:
            raise ValueError(f"{format_duration(value)} is shorter than {format_duration(minimum)}: {why}")
        return value
    return AfterValidator(check)
