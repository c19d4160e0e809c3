"""`gpu-autoscaler store current|upgrade`, and the service refusing a store whose schema is
older than it needs or newer than it knows: one line, exit 1, the fix named (as an operator
runs them: the command line in a subprocess, on SQLite)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from autoscaler.fleet import schema
from tests.fleet import legacy
from tests.service.config.test_config import write

# Each command is a new Python process importing the service (~3 s of CPU each).
pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def cli(*argv: str, cwd: Path) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-m", "autoscaler.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    return done.returncode, done.stdout, done.stderr


def error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str]:
    """A service config whose store is a database file not yet made."""
    db = tmp_path / "fleet.db"
    return write(tmp_path, f"policies_dir: policies\nstore: {{url: 'sqlite:///{db}'}}\n"), f"sqlite:///{db}"


def test_the_service_refuses_a_store_of_c53b69e_until_store_upgrade(store, tmp_path):
    config, url = store
    legacy.create(url)
    code, out, err = cli("run", "--once", "--dry-run", "--config", str(config), cwd=tmp_path)
    line = error_line(err)
    assert code == 1 and out == ""
    assert line.startswith(f"error: cannot open the store {url}: it has no schema version")
    assert "run `gpu-autoscaler store upgrade --config" in line

    code, out, _ = cli("store", "current", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == (
        f"{url}: no schema version (written before gpu-autoscaler had them), head is "
        f"{schema.head()}: run `gpu-autoscaler store upgrade`")
    code, out, _ = cli("store", "upgrade", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == f"{url}: upgraded from no version to {schema.head()} (head)"
    code, out, _ = cli("store", "current", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == f"{url}: schema {schema.head()} (head)"
    code, out, _ = cli("store", "upgrade", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == f"{url}: already at head {schema.head()}"
    assert legacy.rows(url)["nodes"] and len(legacy.rows(url)["actions"]) == len(legacy.ROWS["actions"])


def test_the_service_refuses_a_store_newer_than_it_knows(store, tmp_path):
    config, url = store
    code, out, _ = cli("store", "upgrade", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == f"{url}: upgraded from no tables to {schema.head()} (head)"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099_future'"))
    engine.dispose()
    code, _, err = cli("run", "--once", "--dry-run", "--config", str(config), cwd=tmp_path)
    assert code == 1 and error_line(err) == (
        f"error: cannot open the store {url}: its schema 0099_future is newer than this version "
        f"of gpu-autoscaler knows (head {schema.head()}): run the version that upgraded it, or "
        "restore the backup taken before that upgrade (docs/operators/store.md)")
    code, _, err = cli("store", "upgrade", "--config", str(config), cwd=tmp_path)
    assert code == 1 and error_line(err).startswith(f"error: cannot upgrade the store {url}: its "
                                                    "schema 0099_future is newer")


def test_an_empty_store_needs_no_step(store, tmp_path):
    config, url = store
    code, out, _ = cli("store", "current", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == (f"{url}: empty: no tables yet (the service creates them "
                                         f"at {schema.head()} when it opens it)")
    code, _, err = cli("run", "--once", "--dry-run", "--config", str(config), cwd=tmp_path)
    assert code == 0 and "cannot open the store" not in err
    code, out, _ = cli("store", "current", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == f"{url}: schema {schema.head()} (head)"
