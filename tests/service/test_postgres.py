"""The throwaway PostgreSQL of the tests (tests/service/postgres.py) is stopped by PID, and
its directory removed, also when its start fails half way."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.sandbox.hosts.procs import ManagedProcess, ProcessError
from tests.service import postgres

pytestmark = pytest.mark.slow


@pytest.mark.timeout(120)
def test_a_server_whose_start_fails_half_way_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    why = postgres.available()
    if why:
        pytest.skip(why)
    started: list[ManagedProcess] = []
    real_process, real_wait = postgres.ManagedProcess, postgres.wait_until

    def recorded(*args: Any, **kwargs: Any) -> ManagedProcess:
        started.append(real_process(*args, **kwargs))
        return started[-1]

    def database_never_created(predicate: Any, timeout: float, what: str, **kwargs: Any) -> None:
        if what == "CREATE DATABASE":
            raise ProcessError("timed out waiting for CREATE DATABASE")
        real_wait(predicate, timeout, what, **kwargs)

    monkeypatch.setattr(postgres, "ManagedProcess", recorded)
    monkeypatch.setattr(postgres, "wait_until", database_never_created)
    fixture = postgres.running()
    try:
        with pytest.raises(ProcessError, match="CREATE DATABASE"):
            next(fixture)
        [server] = started
        assert not server.alive(), "the server outlived its fixture"
        assert not server.log_path.parent.exists(), "its directory was left behind"
    finally:
        for proc in started:
            if proc.alive():
                proc.stop(timeout=20)
