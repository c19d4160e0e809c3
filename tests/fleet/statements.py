"""Counting the SQL statements a piece of code sends to a store: the regression guard for
reads that must not grow with the fleet (one query per node, per transition, per row)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from autoscaler.fleet.store import FleetStore


@contextmanager
def counted(store: FleetStore) -> Iterator[list[str]]:
    """The statements sent to ``store`` inside the block, in order."""
    sent: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(store.engine, "before_cursor_execute", before)
    try:
        yield sent
    finally:
        event.remove(store.engine, "before_cursor_execute", before)
