"""``gpu-autoscaler store current|upgrade`` on a store URL: fleet/schema.py's work with the
database's errors raised as StoreUnavailableError, so the command line needs no SQLAlchemy."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from autoscaler.fleet import schema
from autoscaler.fleet.database import make_engine
from autoscaler.fleet.schema import SchemaState
from autoscaler.fleet.store import StoreUnavailableError

T = TypeVar("T")


def _on(url: str, work: Callable[[Engine], T]) -> T:
    try:
        engine = make_engine(url)
        try:
            return work(engine)
        finally:
            engine.dispose()
    except SQLAlchemyError as exc:
        raise StoreUnavailableError(exc) from exc


def current(url: str) -> SchemaState:
    return _on(url, schema.current)


def upgrade(url: str) -> tuple[SchemaState, SchemaState]:
    """The states before and after; raises SchemaError (newer than known, or tables without a
    version that differ from the baseline) or StoreUnavailableError."""
    return _on(url, schema.upgrade)
