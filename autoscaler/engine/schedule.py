"""Scheduled floors: ``{cron, min_nodes, duration}`` holds a minimum while active."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from croniter import croniter

from autoscaler.policy.duration import format_duration
from autoscaler.policy.models import Pool


def schedule_floor(pool: Pool, now: datetime) -> tuple[int, str]:
    """The highest active scheduled floor and a sentence saying which entry set it."""
    best, why = 0, ""
    for entry in pool.schedule:
        local_now = now.astimezone(ZoneInfo(entry.timezone))
        started = last_fire(entry.cron, entry.timezone, now)
        ends = started + entry.duration
        if started <= local_now < ends and entry.min_nodes > best:
            best = entry.min_nodes
            why = (
                f"schedule '{entry.cron}' holds {entry.min_nodes} nodes for "
                f"{format_duration(entry.duration)} until {ends:%a %H:%M} {entry.timezone}"
            )
    return best, why


@lru_cache(maxsize=1024)
def last_fire(cron: str, timezone: str, now: datetime) -> datetime:
    """Latest fire time at or before ``now`` (pure; cached because pools share crons)."""
    local = now.astimezone(ZoneInfo(timezone))
    # Starting one second later makes a fire time equal to now count as "before".
    prev: datetime = croniter(cron, local + timedelta(seconds=1)).get_prev(datetime)
    return prev


def floor(pool: Pool, now: datetime) -> tuple[int, str]:
    scheduled, why = schedule_floor(pool, now)
    if scheduled > pool.min_nodes:
        return scheduled, why
    return pool.min_nodes, f"min_nodes is {pool.min_nodes}"
