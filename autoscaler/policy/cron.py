"""Whether a schedule's cron expression is standard 5-field cron that fires every year.

croniter (which the engine evaluates schedules with) accepts more than standard cron:
steps of any size (``*/99999999999``), reversed ranges (``59-0``) and Quartz extensions
(``L``, ``W``). Each field is checked here against the values it can take, as Vixie cron
and crontab(5) define them, before croniter is asked when it fires.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import NamedTuple

from croniter import croniter


class Field(NamedTuple):
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] stands for low + i


MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
FIELDS = (Field("minute", 0, 59), Field("hour", 0, 23), Field("day-of-month", 1, 31),
          Field("month", 1, 12, MONTHS), Field("day-of-week", 0, 7, DAYS))  # 0 and 7: Sunday
# "*", "5", "1-5", "MON-FRI", each optionally "/step" (CronText bounds the whole text to
# 100 characters, so every number converts quickly).
_ITEM = re.compile(r"(?P<start>\*|[0-9A-Za-z]+)(?:-(?P<end>[0-9A-Za-z]+))?(?:/(?P<step>[0-9]+))?")
# A schedule must fire in every year: tried from starts spread over a leap cycle, so a
# February 29th (or 30th) schedule is refused rather than failing in decide().
_STARTS = tuple(datetime(2001 + half // 2, 1 + 6 * (half % 2), 1) for half in range(10))
_YEAR = timedelta(days=366)
USAGE = "minute hour day-of-month month day-of-week"


def _value(text: str, field: Field) -> int | None:
    if text.isdigit():
        value = int(text)
    elif text.upper() in field.names:
        value = field.low + field.names.index(text.upper())
    else:
        return None
    return value if field.low <= value <= field.high else None


def _item_problem(item: str, field: Field) -> str | None:
    match = _ITEM.fullmatch(item)
    if match is None:
        return f"'{item[:20]}' is not '*', a value or a range, with an optional /step"
    start, end, step = match["start"], match["end"], match["step"]
    bounds = f"{field.low}-{field.high}" + (f" or {field.names[0]}-{field.names[-1]}"
                                           if field.names else "")
    low = field.low if start == "*" else _value(start, field)
    high = field.high if start == "*" else _value(end, field) if end else low
    if start == "*" and end is not None:
        return f"'{item}': '*' cannot start a range"
    if low is None or high is None:
        return f"'{item}' is outside {bounds}"
    if low > high:
        return f"'{item}': the range ends before it starts"
    size = field.high - field.low + 1
    if step is not None and not 1 <= int(step) <= size:
        return f"'{item}': the step must be 1 to {size}, the number of values the field has"
    return None


def fields_problem(cron: str) -> str | None:
    """Why ``cron`` is not standard 5-field cron, naming the field, or None."""
    parts = cron.split()
    if len(parts) != len(FIELDS):
        return f"'{cron}' has {len(parts)} fields; a cron expression has 5 ({USAGE})"
    for text, field in zip(parts, FIELDS, strict=True):
        for item in text.split(","):
            problem = _item_problem(item, field)
            if problem:
                return f"{field.name} field {problem}"
    return None


def cron_problem(cron: str) -> str | None:
    """Why the engine could not use this cron, or None."""
    problem = fields_problem(cron)
    if problem is None and not croniter.is_valid(cron):
        problem = f"'{cron}' is not a valid 5-field cron expression ({USAGE})"
    if problem:
        return problem
    try:
        for start in _STARTS:
            fire: datetime = croniter(cron, start).get_next(datetime)
            if fire - start > _YEAR:
                return (f"'{cron}' does not fire in every year (next after {start:%Y-%m-%d} "
                        f"is {fire:%Y-%m-%d}); a schedule must fire at least once a year")
    except (ValueError, KeyError, OverflowError) as exc:  # croniter's CroniterError is a ValueError
        return f"'{cron}' never fires within a year ({type(exc).__name__})"
    return None
