"""Store URLs read without the service importing the driver's library, and a database that
cannot be opened reported as the store's own error with the driver's exception."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from autoscaler.fleet.store import FleetStore, StoreError, StoreUnavailableError
from autoscaler.fleet.store_url import (
    StoreUrl,
    StoreUrlError,
    display_url,
    parse_url,
    sqlite_file,
    with_password,
)

PG = "postgresql+psycopg://gas@db.internal:5432/gas"


@pytest.mark.parametrize(("url", "parsed"), [
    ("sqlite:///fleet.db", StoreUrl(backend="sqlite", holds_secret=False)),
    (PG, StoreUrl(backend="postgresql", holds_secret=False)),
    ("postgresql+psycopg://gas:pw@db/gas", StoreUrl(backend="postgresql", holds_secret=True)),
    (f"{PG}?sslpassword=x", StoreUrl(backend="postgresql", holds_secret=True)),
    (f"{PG}?sslkey=/k.pem", StoreUrl(backend="postgresql", holds_secret=False)),
    ("mysql://u@h/d", StoreUrl(backend="mysql", holds_secret=False)),
])
def test_what_a_url_names(url: str, parsed: StoreUrl) -> None:
    assert parse_url(url) == parsed


def test_not_a_url() -> None:
    with pytest.raises(StoreUrlError, match="Could not parse"):
        parse_url("no url at all")


def test_password_in_for_connecting_and_out_for_people() -> None:
    secret = with_password(f"{PG}?sslpassword=k", "p@ss")
    assert parse_url(secret).holds_secret and ":p%40ss@db.internal" in secret
    shown = display_url(secret)
    assert "p%40ss" not in shown and "***" in shown and "sslpassword=redacted" in shown


def test_the_file_of_a_sqlite_store(tmp_path: Path) -> None:
    assert sqlite_file(f"sqlite:///{tmp_path / 'f.db'}") == tmp_path / "f.db"
    assert sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file("sqlite://") is None
    assert sqlite_file(PG) is None


def test_a_database_that_cannot_be_opened(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError) as caught:
        FleetStore(f"sqlite:///{tmp_path / 'missing' / 'fleet.db'}")
    assert isinstance(caught.value, StoreError)
    assert isinstance(caught.value.driver_error, sqlite3.OperationalError)
    assert "unable to open database file" in str(caught.value.driver_error)
