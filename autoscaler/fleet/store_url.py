"""Store URLs (SQLAlchemy's syntax: ``sqlite:///FILE``, ``postgresql+psycopg://user@host/db``)
read and rewritten here, so the service's configuration checks them without importing the
database driver's library (layers.toml: only fleet/ imports sqlalchemy)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

# libpq connection parameters that carry a secret (password, sslpassword); sslkey is a path
SECRET_QUERY = re.compile(r"(pass|secret|token)", re.IGNORECASE)


class StoreUrlError(ValueError):
    """Not a database URL (the message is the parser's)."""


@dataclass(frozen=True)
class StoreUrl:
    backend: str  # "sqlite", "postgresql", ...: the dialect, without the driver
    holds_secret: bool  # a password, or a query parameter named like one


def _parse(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError as exc:
        raise StoreUrlError(str(exc)) from None


def parse_url(url: str) -> StoreUrl:
    parsed = _parse(url)
    return StoreUrl(backend=parsed.get_backend_name(),
                    holds_secret=bool(parsed.password)
                    or any(SECRET_QUERY.search(k) for k in parsed.query))


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` in it, for connecting (never for display)."""
    return _parse(url).set(password=password).render_as_string(hide_password=False)


def display_url(url: str) -> str:
    """``url`` for people: no password, the values of secret-looking parameters masked."""
    parsed = _parse(url)
    if any(SECRET_QUERY.search(k) for k in parsed.query):
        parsed = parsed.set(query={k: "redacted" if SECRET_QUERY.search(k) else v
                                   for k, v in parsed.query.items()})
    return parsed.render_as_string(hide_password=True)


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL; None for an in-memory one or another backend."""
    parsed = _parse(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)
