"""The SQLAlchemy engine of a store URL: SQLite in WAL mode with a bounded busy wait, or
PostgreSQL with pre-pinged connections and every wait bounded (connect, lock, statement, a
server gone silent)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url

SQLITE_BUSY_S = 30  # the longest a connection waits for another one's lock (PostgreSQL too)

# PostgreSQL. libpq waits for ever by default: for a server that accepts and never answers,
# for a row lock held by another instance's stalled transaction, for a server that went
# away mid-answer. Parameters set in the store URL (?connect_timeout=...) win over these.
PG_CONNECT = {
    "connect_timeout": 10,
    # A server that stops answering mid-query is given up on after about a minute.
    "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
    "tcp_user_timeout": 60_000,  # ms
}
PG_STATEMENT_S = 300  # one statement (schema migrations are exempt: fleet/schema._lock)
# A transaction left open (its instance frozen or cut off) holds its row locks, the lease
# row's among them, until the server ends it: the other instance could never take over.
PG_IDLE_IN_TRANSACTION_S = 60


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
    given = make_url(url).query
    engine = create_engine(url, pool_pre_ping=True, connect_args={
        k: v for k, v in PG_CONNECT.items() if k not in given})

    @event.listens_for(engine, "connect")
    def _limits(dbapi_conn: Any, _: Any) -> None:
        # Session settings, not the startup packet's ``options``: poolers (PgBouncer)
        # refuse that. Committed, or the pool's rollback on return would undo them.
        dbapi_conn.execute(f"SET lock_timeout = '{SQLITE_BUSY_S}s'")
        dbapi_conn.execute(f"SET statement_timeout = '{PG_STATEMENT_S}s'")
        dbapi_conn.execute(f"SET idle_in_transaction_session_timeout = '{PG_IDLE_IN_TRANSACTION_S}s'")
        dbapi_conn.commit()

    return engine
