"""SQLAlchemy tables of the fleet store (SQLite by default, PostgreSQL for HA)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UTCDateTime(TypeDecorator[datetime]):
    """Stores naive UTC (SQLite keeps no zone) and always returns aware UTC datetimes."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; pass timezone-aware UTC times")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if not isinstance(value, datetime):
            return None
        return value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    pass


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    team: Mapped[str] = mapped_column(String(39), index=True)
    pool: Mapped[str] = mapped_column(String(39), index=True)
    cloud: Mapped[str] = mapped_column(String(16))
    region: Mapped[str] = mapped_column(String(64))
    zone: Mapped[str | None] = mapped_column(String(64), nullable=True)
    instance_type: Mapped[str] = mapped_column(String(64))
    market: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(24), index=True)
    state_since: Mapped[datetime] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ready_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    instance_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    address: Mapped[str | None] = mapped_column(String(255), nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    drain_trigger: Mapped[str | None] = mapped_column(String(32), nullable=True)
    replacement_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class TransitionRow(Base):
    __tablename__ = "transitions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(63), index=True)
    from_state: Mapped[str | None] = mapped_column(String(24), nullable=True)
    to_state: Mapped[str] = mapped_column(String(24))
    # Indexed (0002): the tick reads the last hours of a table that keeps every move ever.
    at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")


class PlanRow(Base):
    __tablename__ = "plans"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    decided_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    dry_run: Mapped[bool] = mapped_column(Boolean, default=False)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)


class ActionRow(Base):
    __tablename__ = "actions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    plan_id: Mapped[int] = mapped_column(Integer, index=True)
    kind: Mapped[str] = mapped_column(String(24), index=True)
    pool: Mapped[str] = mapped_column(String(80), index=True)
    node: Mapped[str | None] = mapped_column(String(63), nullable=True)
    reason: Mapped[str] = mapped_column(Text)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="planned")
    detail: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class AuditRow(Base):
    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    actor: Mapped[str] = mapped_column(String(128))
    event: Mapped[str] = mapped_column(String(64), index=True)
    pool: Mapped[str | None] = mapped_column(String(80), nullable=True)
    node: Mapped[str | None] = mapped_column(String(63), nullable=True)
    detail: Mapped[str] = mapped_column(Text, default="")


class PoolHistoryRow(Base):
    __tablename__ = "pool_history"

    pool: Mapped[str] = mapped_column(String(80), primary_key=True)
    last_scale_up_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_scale_down_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    next_seq: Mapped[int] = mapped_column(Integer, default=1)


class DemandBinRow(Base):
    """One pool's demand in one 5-minute bin (fleet/demand_history.py): the largest value
    any tick of the bin saw, and the p50 forecast made for the bin before it started."""

    __tablename__ = "demand_history"

    pool: Mapped[str] = mapped_column(String(80), primary_key=True)
    bin_start: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    requested_gpus: Mapped[float] = mapped_column(Float)
    in_use_gpus: Mapped[float | None] = mapped_column(Float, nullable=True)
    nodes_serving: Mapped[int | None] = mapped_column(Integer, nullable=True)
    forecast_gpus: Mapped[float | None] = mapped_column(Float, nullable=True)
    source: Mapped[str] = mapped_column(String(16), default="service")


class OperationRow(Base):
    """One side effect handed to actuation (fleet/operations.py): written when it starts,
    closed when it ends; a row still ``running`` at startup was cut short by a crash."""

    __tablename__ = "operations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16), index=True)
    keys: Mapped[list[str]] = mapped_column(JSON)
    what: Mapped[str] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    outcome: Mapped[str] = mapped_column(String(16), index=True, default="running")
    detail: Mapped[str] = mapped_column(Text, default="")


class LeaseRow(Base):
    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    epoch: Mapped[int] = mapped_column(Integer, default=0)


class RequestRow(Base):
    """A capacity request (fleet/requests.py); ``spec`` is the validated RequestSpec."""

    __tablename__ = "requests"
    __table_args__ = (UniqueConstraint("team", "idempotency_key", name="uq_request_idem"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    team: Mapped[str] = mapped_column(String(39), index=True)
    name: Mapped[str] = mapped_column(String(63))
    idempotency_key: Mapped[str | None] = mapped_column(String(128), nullable=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    condition: Mapped[str] = mapped_column(String(24), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    provisioned_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    nodes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    preview: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
