"""The store's schema version on SQLite (fleet/schema.py's table of states): an empty database
is created at head when opened, any other is refused until `store upgrade` brings it there,
and an upgrade keeps every row. PostgreSQL: test_schema_postgres.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from autoscaler.fleet import schema, store_schema
from autoscaler.fleet.schema import SchemaError, Status
from autoscaler.fleet.store import FleetStore
from tests.fleet import legacy

NEXT_REVISION = '''"""A column for a later version (test only)."""
import sqlalchemy as sa
from alembic import op

revision = "9999_driver"
down_revision = "{down}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("gpu_driver", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("gpu_driver")
'''


def url_of(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'fleet.db'}"


def sql(url: str, *statements: str) -> list[tuple[object, ...]]:
    """Run ``statements``; the rows of the last one (if it returns rows)."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            result = None
            for statement in statements:
                result = conn.execute(text(statement))
            return [tuple(r) for r in result] if result is not None and result.returns_rows else []
    finally:
        engine.dispose()


def test_a_store_of_c53b69e_is_upgraded_and_keeps_every_row(tmp_path):
    legacy.upgrade_keeps_every_row(url_of(tmp_path))


def test_every_migration_gives_exactly_the_models_tables(tmp_path):
    legacy.head_matches_models(url_of(tmp_path))


def test_an_empty_database_is_created_at_head_when_opened(tmp_path):
    url = url_of(tmp_path)
    assert store_schema.current(url).status is Status.EMPTY
    FleetStore(url).close()
    state = store_schema.current(url)
    assert (state.status, state.revision) == (Status.CURRENT, schema.head())
    FleetStore(url).close()  # opened again as it is
    assert sql(url, "SELECT version_num FROM alembic_version") == [(schema.head(),)]


def test_two_instances_opening_one_empty_database_create_it_once(tmp_path):
    # Twenty new files: one round lost the race about one time in four before the switch to
    # WAL was retried (SQLite answers "locked" there without waiting).
    for round_ in range(20):
        (tmp_path / str(round_)).mkdir()
        url = url_of(tmp_path / str(round_))
        legacy.open_at_once(url, 2)
        assert sql(url, "SELECT version_num FROM alembic_version") == [(schema.head(),)]


def test_a_store_newer_than_this_version_is_refused_and_left_alone(tmp_path):
    url = url_of(tmp_path)
    FleetStore(url).close()
    sql(url, "UPDATE alembic_version SET version_num = '0099_future'")
    with pytest.raises(SchemaError, match=r"schema 0099_future is newer than this version .* restore"):
        FleetStore(url)
    with pytest.raises(SchemaError, match="newer than this version"):
        store_schema.upgrade(url)
    assert store_schema.current(url).status is Status.NEWER
    assert sql(url, "SELECT version_num FROM alembic_version") == [("0099_future",)]


def test_another_applications_alembic_version_is_named_as_such_not_as_newer(tmp_path):
    """A database shared with another Alembic-managed application: "restore the backup" was
    the wrong advice."""
    url = url_of(tmp_path)
    FleetStore(url).close()
    sql(url, "UPDATE alembic_version SET version_num = 'ae1027a6acf'")
    with pytest.raises(SchemaError, match=r"alembic_version ae1027a6acf is no revision of "
                                          r"gpu-autoscaler's .* a database of its own"):
        FleetStore(url)
    assert sql(url, "SELECT version_num FROM alembic_version") == [("ae1027a6acf",)]


def test_a_store_behind_a_later_revision_is_refused_then_upgraded(tmp_path, monkeypatch):
    """The path of every future schema change: a revision this store lacks."""
    url = url_of(tmp_path)
    legacy.create(url)
    store_schema.upgrade(url)
    before, previous = legacy.rows(url), schema.head()
    later = tmp_path / "migrations"
    shutil.copytree(schema.MIGRATIONS, later, ignore=shutil.ignore_patterns("__pycache__"))
    (later / "versions" / "9999_driver.py").write_text(NEXT_REVISION.format(down=schema.head()))
    monkeypatch.setattr(schema, "MIGRATIONS", later)
    with pytest.raises(SchemaError, match=rf"schema {previous} is older than this version needs "
                                          r"\(9999_driver\): back it up, then run `gpu-autoscaler store upgrade"):
        FleetStore(url)
    was, now = store_schema.upgrade(url)
    assert (was.status, was.revision, now.status, now.revision) == (
        Status.BEHIND, previous, Status.CURRENT, "9999_driver")
    assert legacy.rows(url) == before
    assert sql(url, "SELECT count(*) FROM nodes WHERE gpu_driver IS NULL") == [(len(legacy.NODES),)]
    FleetStore(url).close()


def test_an_unversioned_store_that_differs_from_the_baseline_is_refused_and_left_alone(tmp_path):
    url = url_of(tmp_path)
    legacy.create(url)
    sql(url, "ALTER TABLE requests DROP COLUMN preview", "DROP INDEX ix_audit_event")
    objects = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    before = sql(url, objects)
    with pytest.raises(SchemaError, match=r"differ from the schema before versions \(c53b69e\): "
                                          r"index ix_audit_event missing; column requests.preview "
                                          r"missing; nothing was changed$"):
        store_schema.upgrade(url)
    assert store_schema.current(url).status is Status.UNVERSIONED and sql(url, objects) == before
    assert sql(url, "SELECT name FROM nodes ORDER BY name") == [(n,) for n in legacy.NODES]


def test_an_unversioned_store_without_a_later_table_gets_it(tmp_path):
    """Each version before schema versions created its new tables at start: a store last run
    before the requests table existed lacks it, and the upgrade adds it."""
    url = url_of(tmp_path)
    legacy.create(url)
    sql(url, "DROP TABLE requests")
    was, now = store_schema.upgrade(url)
    assert (was.status, now.status) == (Status.UNVERSIONED, Status.CURRENT)
    assert legacy.rows(url)["requests"] == []
    FleetStore(url).close()


def test_an_unversioned_store_without_requests_claimed_at_gets_it(tmp_path):
    """The builds of 8648048..35a72ae made the requests table without claimed_at (nullable)."""
    url = url_of(tmp_path)
    legacy.create(url)
    before = legacy.rows(url)  # its requests' claimed_at are all NULL
    sql(url, "ALTER TABLE requests DROP COLUMN claimed_at")
    columns = "SELECT name FROM pragma_table_info('requests') ORDER BY name"
    without = sql(url, columns)
    # Refused for another difference: the column is not added either.
    [(index,)] = sql(url, "SELECT sql FROM sqlite_master WHERE name = 'ix_audit_event'")
    sql(url, "DROP INDEX ix_audit_event")
    with pytest.raises(SchemaError, match=r": index ix_audit_event missing; nothing was changed$"):
        store_schema.upgrade(url)
    assert sql(url, columns) == without
    sql(url, str(index))
    was, now = store_schema.upgrade(url)
    assert (was.status, now.status) == (Status.UNVERSIONED, Status.CURRENT)
    assert legacy.rows(url) == before and before["requests"]
    FleetStore(url).close()
