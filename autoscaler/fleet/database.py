"""The SQLAlchemy engine of a store URL: SQLite in WAL mode with a bounded busy wait, or
PostgreSQL with pre-pinged connections."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine

SQLITE_BUSY_S = 30  # the longest a SQLite connection waits for another one's lock


def _enable_wal(dbapi_conn: sqlite3.Connection) -> None:
    """Switch a new database to WAL (the mode is kept in the file). SQLite answers "database
    is locked" at once, without its busy handler, when another connection holds a lock during
    the switch: two instances opening one new file both see that, so it is retried, bounded."""
    deadline = time.monotonic() + SQLITE_BUSY_S
    while True:
        try:
            if dbapi_conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                dbapi_conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_S})

        @event.listens_for(engine, "connect")
        def _wal(dbapi_conn: Any, _: Any) -> None:
            dbapi_conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_S * 1000}")
            # WAL lets the status API read while the loop writes.
            if ":memory:" not in url:
                _enable_wal(dbapi_conn)

        return engine
    return create_engine(url, pool_pre_ping=True)
