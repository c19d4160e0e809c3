"""Every wait of a PostgreSQL store is bounded: a server that accepts and never answers
(a stub on 127.0.0.1), and a row lock another connection holds (a throwaway server,
tests/service/postgres.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from autoscaler.fleet import database
from autoscaler.fleet.store import FleetStore, StoreUnavailableError
from tests.service import postgres

pg = pytest.fixture(scope="module")(postgres.running)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never says a word."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:  # closed: the test is over
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        server.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone does not)
        server.close()
        for conn in held:
            conn.close()
        thread.join(timeout=5)


def _opening_takes(url: str) -> float:
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="timeout"):
        FleetStore(url)
    return time.monotonic() - started


@pytest.mark.timeout(30)
def test_a_server_that_never_answers_fails_the_open_at_the_connect_timeout(
        silent_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(database.PG_CONNECT, "connect_timeout", 1)
    took = _opening_takes(f"postgresql+psycopg://gas@127.0.0.1:{silent_port}/gas")
    assert took < 5  # libpq waits at least 2 s


@pytest.mark.timeout(30)
def test_a_connect_timeout_in_the_url_wins(silent_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(database.PG_CONNECT, "connect_timeout", 60)
    took = _opening_takes(f"postgresql+psycopg://gas@127.0.0.1:{silent_port}/gas?connect_timeout=1")
    assert took < 5


@pytest.mark.slow
def test_every_connection_runs_with_bounded_lock_statement_and_idle_waits(
        pg: postgres.Postgres) -> None:
    store = FleetStore(pg.database("limits"))
    try:
        with store.engine.connect() as conn:
            shown = {name: conn.exec_driver_sql(f"SHOW {name}").scalar() for name in
                     ("lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout")}
    finally:
        store.close()
    assert shown == {"lock_timeout": "30s", "statement_timeout": "5min",
                     "idle_in_transaction_session_timeout": "1min"}


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_lease_row_locked_by_a_stalled_transaction_is_waited_for_only_so_long(
        pg: postgres.Postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database, "SQLITE_BUSY_S", 1)
    url = pg.database("stalled")
    store, other = FleetStore(url), FleetStore(url)
    try:
        assert store.try_lease("gpu-autoscaler", "a", timedelta(seconds=30)) == 1
        with other.session() as stalled:
            stalled.connection().exec_driver_sql("SELECT * FROM leases FOR UPDATE")
            started = time.monotonic()
            with pytest.raises(Exception, match="lock timeout"):
                store.try_lease("gpu-autoscaler", "a", timedelta(seconds=30))
            assert time.monotonic() - started < 10
    finally:
        store.close()
        other.close()
