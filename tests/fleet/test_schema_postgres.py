"""The store's schema version on PostgreSQL (a throwaway server on 127.0.0.1, one database per
test): a c53b69e store is upgraded with every row, the migrations give exactly the models'
tables, two instances create an empty database once, and `store` never prints the password."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.fleet import schema, store_schema
from autoscaler.fleet.schema import Status
from tests.fleet import legacy
from tests.service import postgres
from tests.service.config.test_config import write

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

pg = pytest.fixture(scope="module")(postgres.running)


@pytest.fixture
def url(pg: postgres.Postgres, request: pytest.FixtureRequest) -> str:
    return pg.database(request.node.name[:60].lower())


def test_a_store_of_c53b69e_is_upgraded_and_keeps_every_row(url):
    legacy.upgrade_keeps_every_row(url)


def test_every_migration_gives_exactly_the_models_tables(url):
    legacy.head_matches_models(url)


def test_two_instances_opening_one_empty_database_create_it_once(url):
    legacy.open_at_once(url, 3)
    state = store_schema.current(url)
    assert (state.status, state.revision) == (Status.CURRENT, schema.head())


def test_store_commands_never_print_the_password(url, tmp_path):
    legacy.create(url)
    config = write(tmp_path, f"policies_dir: policies\nstore: {{url: '{url}', password_env: GAS_DB_PASSWORD}}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GAS_DB_PASSWORD": "db-pass-7731"}
    said = []
    for command in ("current", "upgrade", "current"):
        done = subprocess.run([sys.executable, "-m", "autoscaler.cli", "store", command, "--config",
                               str(config)], env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        said.append(done.stdout.strip())
        assert "db-pass-7731" not in done.stdout + done.stderr
    assert said[1] == f"{url}: upgraded from no version to {schema.head()} (head)"
    assert said[2] == f"{url}: schema {schema.head()} (head)"
