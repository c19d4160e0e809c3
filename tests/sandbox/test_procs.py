"""stop_pids, the sandbox's one way to stop processes: SIGTERM, a bounded wait, SIGKILL."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoscaler.sandbox.hosts.procs import (
    ManagedProcess,
    ProcessError,
    ServiceProcess,
    child_pids,
    pid_alive,
    stop_pids,
    wait_until,
)

IGNORES_TERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ready', flush=True); time.sleep(60)")
SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"
# A group leader with a helper: signalled alone, the helper would outlive it.
PARENT = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {SLEEPER!r}]); time.sleep(60)"


def started(tmp_path: Path, name: str, code: str) -> ManagedProcess:
    proc = ManagedProcess(name, [sys.executable, "-c", code], tmp_path / f"{name}.log")
    wait_until(lambda: "ready" in proc.log_tail(), 10, f"{name} ready", proc=proc)
    return proc


def test_a_process_that_ignores_sigterm_is_killed_after_the_wait(tmp_path: Path) -> None:
    proc = started(tmp_path, "stubborn", IGNORES_TERM)
    began = time.monotonic()
    left = stop_pids([proc.pid], timeout=0.5, alive=lambda _pid: proc.alive())
    took = time.monotonic() - began
    assert left == []
    assert proc.returncode() == -9  # SIGKILL, after the SIGTERM was ignored
    assert 0.5 <= took < 5, took


def test_a_process_that_obeys_sigterm_is_not_waited_for(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        began = time.monotonic()
        assert stop_pids([child.pid], timeout=30, alive=lambda _pid: child.poll() is None) == []
        assert time.monotonic() - began < 10
        assert child.returncode == -15
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


def test_a_group_leader_takes_its_helpers_with_it(tmp_path: Path) -> None:
    proc = started(tmp_path, "parent", PARENT)
    helpers = child_pids(proc.pid)
    try:
        assert len(helpers) == 1 and pid_alive(helpers[0])
        proc.stop(timeout=10)  # ManagedProcess.stop is stop_pids(groups=True)
        assert not proc.alive()
        wait_until(lambda: not pid_alive(helpers[0]), 10, "the helper gone with its group")
    finally:
        stop_pids([p for p in helpers if pid_alive(p)], timeout=1)


def test_what_is_gone_already_is_not_signalled() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(10)
    assert stop_pids([child.pid], timeout=5, alive=lambda _pid: child.poll() is None) == []


def test_a_wait_that_times_out_says_what_its_check_last_raised() -> None:
    """A check that raises counts as not yet, but one that can never pass (here a typo'd
    attribute, as a record's changed API once did for 90 s) is named when the wait ends."""
    calls = []

    def check() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionRefusedError("not listening yet")
        return bool(object().missing)  # type: ignore[attr-defined]

    began = time.monotonic()
    with pytest.raises(ProcessError, match="waiting for the typo; the last check raised "
                                           "AttributeError: 'object' object has no attribute 'missing'"):
        wait_until(check, 0.3, "the typo", interval=0.05)
    assert len(calls) >= 2 and time.monotonic() - began < 5
    with pytest.raises(ProcessError, match=r"^timed out after 0s waiting for nothing$"):
        wait_until(lambda: False, 0.1, "nothing", interval=0.05)


def test_a_service_whose_start_fails_half_way_is_stopped_by_its_with(tmp_path: Path) -> None:
    """Its process is up when its readiness wait fails: ``with`` runs no __exit__ then."""
    pids: list[int] = []

    class NeverReady(ServiceProcess):
        def start(self) -> NeverReady:
            self.proc = proc = ManagedProcess("never-ready", [sys.executable, "-c", SLEEPER],
                                              tmp_path / "never-ready.log")
            pids.append(proc.pid)
            wait_until(lambda: "listening" in proc.log_tail(), 1, "never-ready listening",
                       proc=proc)
            return self

    service = NeverReady()
    with pytest.raises(ProcessError), service:
        pytest.fail("the block runs only after a start that succeeded")
    assert service.proc is None and not pid_alive(pids[0])
