"""`gpu-autoscaler store current|upgrade`, and the service refusing a store whose schema is
older than it needs or newer than it knows: one line, exit 1, the fix named (as an operator
runs them: the command line in a subprocess, on SQLite)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from autoscaler.fleet import schema
from autoscaler.fleet.store import FleetStore
from autoscaler.service.instance_lock import InstanceLock
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
    """A service config whose store is a database file not yet made, and the store's URL."""
    db = tmp_path.resolve() / "fleet.db"
    return write(tmp_path, f"policies_dir: policies\nstore: {{url: 'sqlite:///{db}'}}\n"), f"sqlite:///{db}"


def shown(url: str) -> str:
    """How the store commands name a SQLite store: its URL and the file it means."""
    return f"{url} (file {url.removeprefix('sqlite:///')})"


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
        f"{shown(url)}: no schema version (written before gpu-autoscaler had them), head is "
        f"{schema.head()}: run `gpu-autoscaler store upgrade`")
    code, out, _ = cli("store", "upgrade", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == f"{shown(url)}: upgraded from no version to {schema.head()} (head)"
    code, out, _ = cli("store", "current", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == f"{shown(url)}: schema {schema.head()} (head)"
    code, out, _ = cli("store", "upgrade", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == f"{shown(url)}: already at head {schema.head()}"
    assert legacy.rows(url)["nodes"] and len(legacy.rows(url)["actions"]) == len(legacy.ROWS["actions"])


def test_the_service_refuses_a_store_newer_than_it_knows(store, tmp_path):
    config, url = store
    FleetStore(url).close()  # created at head, as the service does
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
    assert code == 1 and error_line(err).startswith(f"error: cannot upgrade the store {shown(url)}: "
                                                    "its schema 0099_future is newer")


def test_an_empty_store_needs_no_step(store, tmp_path):
    config, url = store
    db = Path(url.removeprefix("sqlite:///"))
    # `store current` only reads: a missing file is not made.
    code, out, _ = cli("store", "current", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == (f"{shown(url)}: empty: no such file yet (the service "
                                         "creates it when it starts)")
    assert not db.exists()
    sqlite3.connect(db).close()  # an empty database file
    code, out, _ = cli("store", "current", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == (f"{shown(url)}: empty: no tables yet (the service creates "
                                         f"them at {schema.head()} when it opens it)")
    code, _, err = cli("run", "--once", "--dry-run", "--config", str(config), cwd=tmp_path)
    assert code == 0 and "cannot open the store" not in err
    code, out, _ = cli("store", "current", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == f"{shown(url)}: schema {schema.head()} (head)"


def test_upgrade_refuses_an_empty_store_and_creates_nothing(tmp_path):
    """A relative SQLite path is relative to the current directory: run from elsewhere, the
    command finds no store there, says which file it looked at, and leaves none behind."""
    config = write(tmp_path, "policies_dir: policies\nstore: {url: 'sqlite:///fleet.db'}\n")
    home = tmp_path / "home"
    home.mkdir()
    said = (f"error: cannot upgrade the store sqlite:///fleet.db (file {home.resolve() / 'fleet.db'}): "
            "{why}: nothing to upgrade (is store.url the service's? a relative sqlite path is "
            "relative to the current directory); the service creates the tables itself when it "
            "opens an empty store; nothing was changed")
    code, out, err = cli("store", "upgrade", "--config", str(config), cwd=home)
    assert (code, out, error_line(err)) == (1, "", said.format(why="no such file"))
    assert list(home.iterdir()) == []
    sqlite3.connect(home / "fleet.db").close()
    code, out, err = cli("store", "upgrade", "--config", str(config), cwd=home)
    assert (code, out, error_line(err)) == (1, "", said.format(why="it has no tables"))
    engine = create_engine(f"sqlite:///{home / 'fleet.db'}")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name FROM sqlite_master")).all() == []
    engine.dispose()


def test_store_commands_need_only_the_store_secret(tmp_path):
    """The HTTP and team tokens are the running service's (systemd hands it its credential
    files only while it runs): a store command neither reads nor needs them."""
    db = tmp_path.resolve() / "fleet.db"
    http = ("http: {listen: 0.0.0.0:9464, token_file: /run/credentials/none/http-token, "
            "team_tokens: {vision: {env: GAS_TEST_UNSET_VISION}}}\n")
    config = write(tmp_path, f"policies_dir: policies\nstore: {{url: 'sqlite:///{db}'}}\n{http}")
    legacy.create(f"sqlite:///{db}")
    code, out, err = cli("store", "upgrade", "--config", str(config), cwd=tmp_path)
    assert code == 0 and "upgraded from no version" in out, err
    # The one secret they need, missing: said once, with its name once.
    url = "postgresql+psycopg://gas@127.0.0.1:9/gas"
    config = write(tmp_path, f"policies_dir: policies\nstore: {{url: '{url}', password_env: "
                             f"GAS_TEST_UNSET_PW}}\n{http}")
    for command in ("current", "upgrade"):
        code, out, err = cli("store", command, "--config", str(config), cwd=tmp_path)
        assert (code, out, error_line(err)) == (
            1, "", "error: store password: environment variable GAS_TEST_UNSET_PW is not set")


def test_upgrade_refuses_while_a_controller_holds_the_store_unless_forced(store, tmp_path):
    """audit10 F3: an upgrade under a running controller changes its schema under it."""
    config, url = store
    legacy.create(url)
    lock = InstanceLock(Path(url.removeprefix("sqlite:///") + ".lock")).acquire()  # a controller
    try:
        code, out, err = cli("store", "upgrade", "--config", str(config), cwd=tmp_path)
        assert (code, out) == (1, "")
        assert error_line(err) == (
            f"error: cannot upgrade the store {shown(url)}: {lock.path} is locked by PID "
            f"{os.getpid()}: another gpu-autoscaler controller runs on this store (or is still "
            "stopping): stop the controller first (or pass --force if that process is not a "
            "controller of this store)")
        code, out, _ = cli("store", "current", "--config", str(config), cwd=tmp_path)
        assert code == 0 and "no schema version" in out  # nothing was changed
        code, out, err = cli("store", "upgrade", "--force", "--config", str(config), cwd=tmp_path)
        assert code == 0 and out.splitlines()[-1] == (
            f"{shown(url)}: upgraded from no version to {schema.head()} (head)"), err
        assert out.startswith(f"warning: {lock.path} is locked by PID {os.getpid()}")
    finally:
        lock.release()
    code, out, _ = cli("store", "upgrade", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == f"{shown(url)}: already at head {schema.head()}"
    code, out, _ = cli("store", "upgrade", "--help", cwd=tmp_path)
    assert code == 0 and "--force" in out


def test_upgrade_refuses_while_a_leader_lease_is_live_unless_forced(store, tmp_path):
    """With leader election the controllers hold a lease, not the lock: the upgrade checks
    it too, by the database's clock."""
    from datetime import timedelta

    from autoscaler.fleet import lease

    config, url = store
    s = FleetStore(url)
    try:
        with s.session() as session:
            assert lease.take(session, "gpu-autoscaler", "host-a:4242", timedelta(minutes=5)) == 1
            session.commit()
    finally:
        s.close()
    code, out, err = cli("store", "upgrade", "--config", str(config), cwd=tmp_path)
    assert (code, out) == (1, "")
    assert error_line(err).startswith(
        f"error: cannot upgrade the store {shown(url)}: the leader lease 'gpu-autoscaler' is "
        "held by host-a:4242 until ")
    assert error_line(err).endswith("UTC: stop the controller first (or pass --force)")
    code, out, _ = cli("store", "upgrade", "--force", "--config", str(config), cwd=tmp_path)
    assert code == 0 and out.strip() == f"{shown(url)}: already at head {schema.head()}"
