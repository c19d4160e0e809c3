"""``gpu-autoscaler store current|upgrade`` on a store URL: fleet/schema.py's work with the
database's errors raised as StoreUnavailableError, so the command line needs no SQLAlchemy."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from sqlalchemy import inspect, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from autoscaler.fleet import lease, schema
from autoscaler.fleet.database import make_engine
from autoscaler.fleet.schema import SchemaState
from autoscaler.fleet.store import StoreUnavailableError
from autoscaler.fleet.tables import LeaseRow

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


def live_lease(url: str, name: str) -> tuple[str, datetime] | None:
    """The holder of lease ``name`` and its expiry while it has not expired by the
    database's clock (fleet/lease.py); None when it has, or there is none (nor a table)."""
    def read(engine: Engine) -> tuple[str, datetime] | None:
        if not inspect(engine).has_table(LeaseRow.__tablename__):
            return None
        with Session(engine) as s:
            row = s.execute(select(LeaseRow.holder, LeaseRow.expires_at)
                            .where(LeaseRow.name == name)).one_or_none()
            if row is None or row.expires_at <= lease.db_now(s):
                return None
            return row.holder, row.expires_at
    return _on(url, read)
