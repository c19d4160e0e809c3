"""Alembic's environment: runs the revisions on the connection that fleet/schema.py hands over
in ``config.attributes["connection"]``, inside that connection's transaction (schema.py
commits it), so a store is changed wholly or not at all where the database allows (PostgreSQL;
SQLite also rolls back DDL in a transaction)."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from autoscaler.fleet.tables import Base

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("the store's migrations run through autoscaler.fleet.schema, which passes "
                       "the connection (offline --sql mode is not supported)")
# render_as_batch: SQLite alters a table by copying it, which Alembic's batch mode does.
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
