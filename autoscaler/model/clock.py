"""The one wall clock of the service; everything that reads the time takes a ``Clock`` so
tests and the simulator inject their own (the engine takes ``now`` and reads none)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)
