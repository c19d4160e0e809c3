"""Schedules are standard 5-field cron, each field within the values it can take, and fire
every year; what the checks accept, croniter (the engine's evaluator) reads the same way."""

from __future__ import annotations

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.policy.cron import FIELDS, cron_problem, fields_problem


@pytest.mark.parametrize("cron", [
    "0 8 * * 1-5", "*/15 * * * *", "*/60 * * * *", "5/10 * * * *", "0 0 1 JAN,jul *",
    "0 0 * * MON-FRI", "0 0 * * 7", "0 0 * * 0/7", "0 0 * * mon-sat/2", "0-30/10 9-17 * * *",
    "0 0 1,15,31 * *",
])
def test_standard_cron_is_accepted(cron: str) -> None:
    assert cron_problem(cron) is None


@pytest.mark.parametrize(("cron", "needle"), [
    ("*/99999999999 * * * *", "minute field '*/99999999999': the step must be 1 to 60"),
    ("0 */25 * * *", "hour field '*/25': the step must be 1 to 24"),
    ("0 0 */0 * *", "day-of-month field '*/0': the step must be 1 to 31"),
    ("0 0 * 1-12/13 *", "month field '1-12/13': the step must be 1 to 12"),
    ("0 0 * * */9", "day-of-week field '*/9': the step must be 1 to 8"),
    ("0-99 * * * *", "minute field '0-99' is outside 0-59"),
    ("0 24 * * *", "hour field '24' is outside 0-23"),
    ("0 0 0 * *", "day-of-month field '0' is outside 1-31"),
    ("0 0 * FOO *", "month field 'FOO' is outside 1-12 or JAN-DEC"),
    ("0 0 * * 8", "day-of-week field '8' is outside 0-7 or SUN-SAT"),
    ("59-0 * * * *", "minute field '59-0': the range ends before it starts"),
    ("*-5 * * * *", "'*' cannot start a range"),
    ("0 0 L * *", "day-of-month field 'L' is outside 1-31"),  # Quartz, not cron
    ("0 0 1W * *", "day-of-month field '1W'"),
    (",1 * * * *", "minute field '' is not '*', a value or a range"),
    ("0 0 8 * * MON", "has 6 fields; a cron expression has 5"),
    ("0 0 29 2 *", "does not fire in every year"),
    ("0 0 31 2 *", "never fires within a year"),
])
def test_each_field_is_checked_against_its_values(cron: str, needle: str) -> None:
    problem = cron_problem(cron)
    assert problem is not None and needle in problem, problem


def _item(field_index: int) -> st.SearchStrategy[str]:
    f = FIELDS[field_index]
    value = st.integers(f.low - 2, f.high + 2).map(str) | st.sampled_from(
        [*f.names, "L", "W", "99999999999", "*"] if f.names else ["L", "W", "99999999999", "*"])
    step = st.none() | st.integers(-1, 70).map(str) | st.just("99999999999")
    rng = st.tuples(value, st.none() | value, step).map(
        lambda t: t[0] + (f"-{t[1]}" if t[1] else "") + (f"/{t[2]}" if t[2] else ""))
    return st.lists(rng, min_size=1, max_size=3).map(",".join)


@settings(max_examples=150, deadline=None)
@given(st.tuples(*(_item(i) for i in range(5))))
def test_what_the_fields_check_accepts_croniter_reads_within_each_field(parts: tuple[str, ...]) -> None:
    cron = " ".join(parts)
    if fields_problem(cron) is not None:
        return
    assert croniter.is_valid(cron), cron
    expanded, _ = croniter.expand(cron)
    for values, field in zip(expanded, FIELDS, strict=True):
        numbers = [v for v in values if v != "*"]
        assert all(field.low <= v <= field.high for v in numbers), (cron, field.name, values)
