"""The store's tables as of commit c53b69e, the last version without schema versions, frozen:
the first revision creates them, and a store written by such a version (tables, no
``alembic_version``) is compared with them before it is stamped (fleet/schema.py).

Never edit this to follow ``fleet/tables.py``: a change is a new revision in ``versions/``.
Times are plain DateTime (UTCDateTime's column type); the indexes are the ones ``index=True``
made, with SQLAlchemy's default names.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

TABLES = ("nodes", "transitions", "plans", "actions", "audit", "pool_history", "demand_history",
          "operations", "leases", "requests")


def metadata() -> MetaData:
    """A new MetaData holding the ten tables of c53b69e."""
    md = MetaData()
    Table(
        "nodes", md,
        Column("name", String(63), primary_key=True),
        Column("team", String(39), nullable=False, index=True),
        Column("pool", String(39), nullable=False, index=True),
        Column("cloud", String(16), nullable=False),
        Column("region", String(64), nullable=False),
        Column("zone", String(64), nullable=True),
        Column("instance_type", String(64), nullable=False),
        Column("market", String(16), nullable=False),
        Column("state", String(24), nullable=False, index=True),
        Column("state_since", DateTime(), nullable=False),
        Column("created_at", DateTime(), nullable=False),
        Column("ready_at", DateTime(), nullable=True),
        Column("instance_id", String(64), nullable=True, index=True),
        Column("address", String(255), nullable=True),
        Column("reason", Text, nullable=False),
        Column("drain_trigger", String(32), nullable=True),
        Column("replacement_requested", Boolean, nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("meta", JSON, nullable=False),
    )
    Table(
        "transitions", md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("node", String(63), nullable=False, index=True),
        Column("from_state", String(24), nullable=True),
        Column("to_state", String(24), nullable=False),
        Column("at", DateTime(), nullable=False),
        Column("reason", Text, nullable=False),
    )
    Table(
        "plans", md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("decided_at", DateTime(), nullable=False, index=True),
        Column("dry_run", Boolean, nullable=False),
        Column("body", JSON, nullable=False),
    )
    Table(
        "actions", md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("plan_id", Integer, nullable=False, index=True),
        Column("kind", String(24), nullable=False, index=True),
        Column("pool", String(80), nullable=False, index=True),
        Column("node", String(63), nullable=True),
        Column("reason", Text, nullable=False),
        Column("body", JSON, nullable=False),
        Column("status", String(16), nullable=False),
        Column("detail", Text, nullable=False),
        Column("updated_at", DateTime(), nullable=False),
    )
    Table(
        "audit", md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("at", DateTime(), nullable=False, index=True),
        Column("actor", String(128), nullable=False),
        Column("event", String(64), nullable=False, index=True),
        Column("pool", String(80), nullable=True),
        Column("node", String(63), nullable=True),
        Column("detail", Text, nullable=False),
    )
    Table(
        "pool_history", md,
        Column("pool", String(80), primary_key=True),
        Column("last_scale_up_at", DateTime(), nullable=True),
        Column("last_scale_down_at", DateTime(), nullable=True),
        Column("next_seq", Integer, nullable=False),
    )
    Table(
        "demand_history", md,
        Column("pool", String(80), primary_key=True),
        Column("bin_start", DateTime(), primary_key=True),
        Column("requested_gpus", Float, nullable=False),
        Column("in_use_gpus", Float, nullable=True),
        Column("nodes_serving", Integer, nullable=True),
        Column("forecast_gpus", Float, nullable=True),
        Column("source", String(16), nullable=False),
    )
    Table(
        "operations", md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("kind", String(16), nullable=False, index=True),
        Column("keys", JSON, nullable=False),
        Column("what", Text, nullable=False),
        Column("started_at", DateTime(), nullable=False),
        Column("finished_at", DateTime(), nullable=True),
        Column("outcome", String(16), nullable=False, index=True),
        Column("detail", Text, nullable=False),
    )
    Table(
        "leases", md,
        Column("name", String(64), primary_key=True),
        Column("holder", String(128), nullable=False),
        Column("expires_at", DateTime(), nullable=False),
        Column("epoch", Integer, nullable=False),
    )
    Table(
        "requests", md,
        Column("id", String(32), primary_key=True),
        Column("team", String(39), nullable=False, index=True),
        Column("name", String(63), nullable=False),
        Column("idempotency_key", String(128), nullable=True),
        Column("spec", JSON, nullable=False),
        Column("condition", String(24), nullable=False, index=True),
        Column("reason", Text, nullable=False),
        Column("created_at", DateTime(), nullable=False),
        Column("updated_at", DateTime(), nullable=False),
        Column("provisioned_at", DateTime(), nullable=True),
        Column("claimed_at", DateTime(), nullable=True),
        Column("nodes", JSON, nullable=False),
        Column("preview", JSON, nullable=True),
        UniqueConstraint("team", "idempotency_key", name="uq_request_idem"),
    )
    return md
