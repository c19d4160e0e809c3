"""The Terraform tests' moto server (terraform_fixtures.moto_running) is stopped by PID, also
when its start fails half way: the process up, its readiness wait failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler.sandbox.hosts.procs import ManagedProcess, ProcessError
from autoscaler.sandbox.services import moto_server
from tests.actuators.terraform_fixtures import moto_running


@pytest.mark.timeout(60)
def test_a_server_whose_start_fails_half_way_is_stopped(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[ManagedProcess] = []
    real_process = moto_server.ManagedProcess

    def recorded(*args: Any, **kwargs: Any) -> ManagedProcess:
        started.append(real_process(*args, **kwargs))
        return started[-1]

    def never_ready(predicate: Any, timeout: float, what: str, **kwargs: Any) -> None:
        raise ProcessError(f"timed out waiting for {what}")

    monkeypatch.setattr(moto_server, "ManagedProcess", recorded)
    monkeypatch.setattr(moto_server, "wait_until", never_ready)
    try:
        with pytest.raises(ProcessError, match="moto server port"):
            next(moto_running(tmp_path / "moto"))
        [server] = started
        assert not server.alive(), "the moto server outlived its fixture"
    finally:
        for proc in started:
            if proc.alive():
                proc.stop()
