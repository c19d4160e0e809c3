"""Durations written the way operators write them: ``90s``, ``15m``, ``48h``, ``2d``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
PATTERN = r"^(\d+(\.\d+)?(ms|s|m|h|d|w))+$"


def parse_duration(value: Any) -> timedelta:
    """Accept ``1h30m``-style strings, plain seconds, or a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("a duration like '90s', '15m' or '48h' is expected, not a boolean")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return timedelta(seconds=value)
    if not isinstance(value, str):
        raise ValueError("a duration like '90s', '15m' or '48h' is expected")
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
    return timedelta(seconds=total)


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
