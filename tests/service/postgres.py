"""A throwaway PostgreSQL 15 (the image's binaries) for the leader-lease tests.

initdb refuses to run as root: the cluster belongs to the ``postgres`` user, in a
directory of its own under /tmp (pytest's temporary directories are root-only). The
server listens on 127.0.0.1 on a free port with its socket in that directory, and is
stopped by PID.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.sandbox.hosts.procs import ManagedProcess, free_port, port_open, wait_until

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_USER = "postgres"


def available() -> str | None:
    """Why PostgreSQL cannot run here, or None."""
    if not (PG_BIN / "initdb").exists():
        return f"PostgreSQL binaries not found in {PG_BIN}"
    if os.geteuid() != 0:
        return "the fixture needs root to run initdb as the postgres user"
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        return f"no {PG_USER} user"
    return None


class Postgres:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gas-pg-"))
        user = pwd.getpwnam(PG_USER)
        os.chown(self.dir, user.pw_uid, user.pw_gid)
        self.data = self.dir / "data"
        self.port = free_port()
        self.proc: ManagedProcess | None = None

    def _as_postgres(self, *argv: str) -> list[str]:
        return ["setpriv", f"--reuid={PG_USER}", f"--regid={PG_USER}", "--init-groups", "--",
                *argv]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://gas@127.0.0.1:{self.port}/gas"

    def start(self) -> Postgres:
        subprocess.run(self._as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-U",
                                         "gas", "-A", "trust", "--no-sync"),
                       check=True, capture_output=True, timeout=120)
        self.proc = ManagedProcess("postgres", self._as_postgres(
            str(PG_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port),
            "-k", str(self.dir), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"),
            self.dir / "postgres.log")
        wait_until(lambda: port_open("127.0.0.1", self.port), 60, "postgres port", proc=self.proc)
        import psycopg

        def create() -> bool:
            with psycopg.connect(f"host=127.0.0.1 port={self.port} user=gas dbname=postgres",
                                 autocommit=True, connect_timeout=3) as conn:
                conn.execute("CREATE DATABASE gas")
            return True

        wait_until(create, 30, "CREATE DATABASE", proc=self.proc)
        return self

    def database(self, name: str) -> str:
        """A new empty database on this server, as a store URL."""
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=gas dbname=postgres",
                             autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://gas@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=20)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


def running() -> Iterator[Postgres]:
    """A module fixture body: ``pg = pytest.fixture(scope="module")(postgres.running)``."""
    why = available()
    if why:
        pytest.skip(why)
    server = Postgres()
    try:  # a start that fails half way (the server up, no database) is stopped too
        yield server.start()
    finally:
        server.stop()
