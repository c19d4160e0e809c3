"""The store's schema version, kept by Alembic (``fleet/migrations/``).

What a database holds, and what each way in does with it:

| the database holds                        | Status      | opening the store | ``store upgrade``   |
|-------------------------------------------|-------------|-------------------|---------------------|
| none of the store's tables, no version    | EMPTY       | created at head   | refused 2)          |
| the tables, no version (before versions)  | UNVERSIONED | refused (upgrade) | checked, stamped 1) |
| a known revision before head              | BEHIND      | refused (upgrade) | upgraded            |
| the head revision                         | CURRENT     | opened            | nothing to do       |
| a revision this version does not know     | NEWER       | refused (newer)   | refused             |

1) checked against the baseline (the schema of c53b69e), stamped with it, then upgraded.
2) by the command (cli/store.py: most likely not the service's database); :func:`upgrade`
   itself creates it at head.
"refused (upgrade)": the one-line reason names ``gpu-autoscaler store upgrade``.

Only an empty database is changed without being asked: an existing store is changed only by
``gpu-autoscaler store upgrade``, after the operator's backup (docs/operators/store.md). Every change
runs in one transaction that holds the database's write lock (SQLite ``BEGIN IMMEDIATE``,
PostgreSQL an advisory lock), so two instances starting on one empty database create it once.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, MetaData, String, Table, inspect, select, text
from sqlalchemy.engine import Connection, Engine

from autoscaler.fleet.migrations import baseline
from autoscaler.fleet.tables import Base
from autoscaler.words import first_few

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")
BASELINE = "0001_baseline"  # the schema of c53b69e, the last version without schema versions
VERSION_TABLE = Table("alembic_version", MetaData(), Column("version_num", String(32)))
# Serialises schema changes between instances on one PostgreSQL database (any fixed key).
PG_LOCK_KEY = 0x6761735F736368  # "gas_sch"
LOCK_TIMEOUT_S = 60  # PostgreSQL: the longest wait for that lock, or a table's, in a schema change
UPGRADE_HINT = ("back it up, then run `gpu-autoscaler store upgrade --config <the service config>` "
                "(docs/operators/store.md)")


# How the project's revisions are named (migrations/versions/NNNN_name.py): a store whose
# alembic_version is not so was versioned by another application sharing the database.
OURS = re.compile(r"\d{4}_\w+")


class Status(StrEnum):
    EMPTY = "empty"
    UNVERSIONED = "unversioned"
    BEHIND = "behind"
    CURRENT = "current"
    NEWER = "newer"


class SchemaError(Exception):
    """The store's schema cannot be used or upgraded; the message is one line that says why
    and what to do."""


@dataclass(frozen=True)
class SchemaState:
    status: Status
    revision: str | None  # the store's revision(s), comma-separated; None: no version
    head: str  # the revision this version of gpu-autoscaler needs

    def describe(self) -> str:
        """One line for ``store current``."""
        match self.status:
            case Status.EMPTY:
                return f"empty: no tables yet (the service creates them at {self.head} when it opens it)"
            case Status.UNVERSIONED:
                return (f"no schema version (written before gpu-autoscaler had them), head is "
                        f"{self.head}: run `gpu-autoscaler store upgrade`")
            case Status.BEHIND:
                return (f"schema {self.revision}, behind head {self.head}: run "
                        "`gpu-autoscaler store upgrade`")
            case Status.CURRENT:
                return f"schema {self.revision} (head)"
        return f"schema {self.revision}, newer than this version knows (head {self.head})"

    def refusal(self) -> str | None:
        """Why the service cannot use a store in this state (None: it can)."""
        match self.status:
            case Status.CURRENT:
                return None
            case Status.EMPTY:
                return f"it has no tables yet (head is {self.head})"
            case Status.UNVERSIONED:
                return (f"it has no schema version (written before gpu-autoscaler had them), older "
                        f"than this version needs ({self.head}): {UPGRADE_HINT}")
            case Status.BEHIND:
                return (f"its schema {self.revision} is older than this version needs "
                        f"({self.head}): {UPGRADE_HINT}")
        if not all(OURS.fullmatch(r) for r in (self.revision or "").split(",")):
            return (f"its alembic_version {self.revision} is no revision of gpu-autoscaler's "
                    f"(ours are named like {self.head}): the database holds another "
                    "application's tables; give gpu-autoscaler a database of its own")
        return (f"its schema {self.revision} is newer than this version of gpu-autoscaler knows "
                f"(head {self.head}): run the version that upgraded it, or restore the backup "
                "taken before that upgrade (docs/operators/store.md)")


@functools.cache
def _scripts(directory: Path) -> tuple[ScriptDirectory, frozenset[str]]:
    script = ScriptDirectory(str(directory))
    return script, frozenset(s.revision for s in script.walk_revisions())


def _script() -> ScriptDirectory:
    return _scripts(MIGRATIONS)[0]


def _known() -> frozenset[str]:
    return _scripts(MIGRATIONS)[1]


def head() -> str:
    found = _script().get_current_head()
    if found is None:
        raise SchemaError(f"no revision in {MIGRATIONS / 'versions'}")
    return found


def read(conn: Connection) -> SchemaState:
    """The store's schema state, read without Alembic's context (which logs on every use)."""
    names = set(inspect(conn).get_table_names())
    revisions = (sorted(conn.scalars(select(VERSION_TABLE.c.version_num)))
                 if VERSION_TABLE.name in names else [])
    top = head()
    if not revisions:
        ours = names & set(Base.metadata.tables)
        return SchemaState(Status.UNVERSIONED if ours else Status.EMPTY, None, top)
    revision = ",".join(revisions)
    if not set(revisions) <= _known():
        return SchemaState(Status.NEWER, revision, top)
    return SchemaState(Status.CURRENT if revisions == [top] else Status.BEHIND, revision, top)


def _lock(conn: Connection) -> None:
    """Begin the connection's transaction holding the database's schema lock. Waits are
    bounded: SQLite's busy_timeout (fleet/database.make_engine), PostgreSQL's lock_timeout.
    A migration's statements are not: rewriting a large table may take longer than the
    statement_timeout the store's other work runs under."""
    if conn.in_transaction():
        conn.rollback()
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_S}s'")
        conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_LOCK_KEY})


def _config(conn: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn  # env.py runs on it, in its transaction
    return config


def prepare(engine: Engine) -> SchemaState:
    """For opening the store: an empty database is created at head (by the migrations);
    anything else must already be at head, or :class:`SchemaError` says why and what to do."""
    with engine.connect() as conn:
        state = read(conn)
        if state.status is Status.EMPTY:
            _lock(conn)
            state = read(conn)  # another instance may have created it meanwhile
            if state.status is Status.EMPTY:
                command.upgrade(_config(conn), "head")
                state = read(conn)
                log.info("the store was empty: its tables were created at schema %s", state.revision)
            conn.commit()
    refusal = state.refusal()
    if refusal is not None:
        raise SchemaError(refusal)
    return state


def current(engine: Engine) -> SchemaState:
    with engine.connect() as conn:
        return read(conn)


def upgrade(engine: Engine) -> tuple[SchemaState, SchemaState]:
    """Bring the store to head in one transaction; returns the states before and after. A
    store without a version is first checked against the baseline and stamped with it."""
    with engine.connect() as conn:
        _lock(conn)
        before = read(conn)
        if before.status is Status.NEWER:
            raise SchemaError(str(before.refusal()))
        if before.status is not Status.CURRENT:
            config = _config(conn)
            if before.status is Status.UNVERSIONED:
                _check_baseline(conn)
                command.stamp(config, BASELINE)
            command.upgrade(config, "head")
        after = read(conn)
        conn.commit()
    return before, after


def _check_baseline(conn: Connection) -> None:
    """A store without a version must hold the baseline's tables exactly (a table it lacks is
    created first: each version before schema versions created its new tables at start; so is
    the one column a version before them lacked)."""
    frozen = baseline.metadata()
    frozen.create_all(conn)
    _add_claimed_at(conn, frozen)
    context = MigrationContext.configure(conn, opts={
        "include_name": lambda name, kind, _parents: kind != "table" or name in baseline.TABLES})
    found = [_difference(d) for d in compare_metadata(context, frozen)]
    if found:
        raise SchemaError("the store has no schema version and its tables differ from the schema "
                          f"before versions (c53b69e): {first_few(found, sep='; ')}; nothing was "
                          "changed")


def _add_claimed_at(conn: Connection, frozen: MetaData) -> None:
    """The builds of 8648048..35a72ae (23 minutes on 2026-12-01) made the requests table
    without this nullable column, which the next one's models had: added as a later build
    would have needed it (in the upgrade's transaction: a refusal below undoes it)."""
    column = frozen.tables["requests"].c.claimed_at
    if column.name not in {c["name"] for c in inspect(conn).get_columns("requests")}:
        conn.exec_driver_sql(f"ALTER TABLE requests ADD COLUMN {column.name} "
                             f"{column.type.compile(dialect=conn.dialect)}")


def _difference(diff: Any) -> str:
    """One of Alembic's autogenerate differences, in words (store minus expected)."""
    if isinstance(diff, list):  # the modify_* changes of one column
        kind, _schema, table, column, _kw, stored, expected = diff[0]
        return f"{table}.{column}: {kind.removeprefix('modify_')} is {stored!r}, expected {expected!r}"
    kind, *rest = diff
    if kind in ("add_column", "remove_column"):
        where = f"column {rest[1]}.{rest[2].name}"
    else:
        subject = rest[0]
        where = f"{kind.split('_', 1)[1]} {getattr(subject, 'name', subject)}"
    return f"{where} {'missing' if kind.startswith('add_') else 'not expected'}"


__all__ = ["BASELINE", "SchemaError", "SchemaState", "Status", "current", "head", "prepare", "read",
           "upgrade"]
