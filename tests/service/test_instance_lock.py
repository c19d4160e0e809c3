"""One controller per store without leader election: the instance lock build_service
takes (a second controller on the store would launch for the same need)."""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.instance_lock import InstanceLock, InstanceLocked, hold_instance_lock
from autoscaler.service.wiring import build_service
from tests.service.service_fakes import write_policy

REPO = Path(__file__).resolve().parents[2]


def lone_config(tmp_path: Path) -> ServiceConfig:
    """A config whose store is a SQLite file and that starts nothing else."""
    write_policy(tmp_path / "policies", "vision", name="gpu", max_nodes=5)
    return ServiceConfig.model_validate({
        "policies_dir": tmp_path / "policies", "store": {"url": f"sqlite:///{tmp_path / 'fleet.db'}"}})


def test_a_second_controller_on_the_same_sqlite_store_refuses_to_start(tmp_path: Path) -> None:
    """Without leader election nothing else fences it: two would both launch for one need."""
    config = lone_config(tmp_path)
    first = build_service(config)
    try:
        lock = tmp_path.resolve() / "fleet.db.lock"
        with pytest.raises(InstanceLocked) as refused:
            build_service(config)
        assert str(refused.value).startswith(f"cannot start: {lock} is locked by PID {os.getpid()}")
        assert "stop it first" in str(refused.value)
        # A dry run (`plan --config`) changes nothing: it may run beside the controller.
        build_service(config, dry_run=True).close()
    finally:
        first.close()
    build_service(config).close()  # released at shutdown: the next one starts


def test_a_killed_controllers_successor_starts_at_once(tmp_path: Path) -> None:
    """The kernel drops the lock of a SIGKILL'd process: no stale lock file to clean up."""
    config = lone_config(tmp_path)
    code = ("import sys; from autoscaler.service.config.load import load_config; "
            "from autoscaler.service.wiring import build_service; "
            "build_service(load_config(sys.argv[1])); print('running', flush=True); sys.stdin.read()")
    (tmp_path / "service.yaml").write_text(f"policies_dir: {tmp_path / 'policies'}\n"
                                           f"store: {{url: '{config.store.url}'}}\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "service.yaml")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert child.stdout is not None
        assert select.select([child.stdout], [], [], 60)[0], "the child never started"
        assert child.stdout.readline() == "running\n"
        with pytest.raises(InstanceLocked, match=f"locked by PID {child.pid}:"):
            build_service(config)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    build_service(config).close()


def test_a_networked_store_without_leader_election_is_locked_on_this_host_and_warned(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = ServiceConfig.model_validate({
        "policies_dir": tmp_path / "policies", "terraform": {"workdir": tmp_path / "tf"},
        "store": {"url": "postgresql+psycopg://gas@127.0.0.1:9/gas"}})
    with caplog.at_level(logging.WARNING):
        lock = hold_instance_lock(config)
    assert lock is not None
    try:
        assert "enable leader.enabled if more than one host may run" in caplog.text
        with pytest.raises(InstanceLocked):
            InstanceLock(tmp_path.resolve() / "tf" / "gpu-autoscaler.lock").acquire()
    finally:
        lock.release()
