"""How Slurm commands run: a command that overruns its timeout is stopped with everything
it started (a wrapper script's children, an ssh prefix's), and its error says so."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from autoscaler.sandbox.hosts.procs import pid_alive
from autoscaler.schedulers.slurm.client import SlurmCommandError, run_command


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_output_and_exit_status(tmp_path: Path) -> None:
    ok = _script(tmp_path / "squeue", 'echo "$SLURM_CONF"')
    assert run_command([str(ok)], 5, {"SLURM_CONF": "/etc/x.conf"}) == "/etc/x.conf\n"
    bad = _script(tmp_path / "sinfo", "echo first >&2; echo 'no controller' >&2; exit 3")
    with pytest.raises(SlurmCommandError, match=r"failed \(3\): no controller"):
        run_command([str(bad)], 5, {})
    with pytest.raises(SlurmCommandError, match="not found"):
        run_command([str(tmp_path / "missing")], 5, {})


@pytest.mark.timeout(30)
def test_a_command_that_times_out_is_stopped_with_the_processes_it_started(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    wrapper = _script(tmp_path / "squeue", f"sleep 300 &\necho $! > {pidfile}\nwait")
    started = time.monotonic()
    with pytest.raises(SlurmCommandError, match=r"squeue --json timed out after 1s"):
        run_command([str(wrapper), "--json"], 1, {})
    assert time.monotonic() - started < 10
    child = int(pidfile.read_text())
    try:
        deadline = time.monotonic() + 5
        while pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(child), "the wrapper's child outlived the timeout"
    finally:
        if pid_alive(child):
            os.kill(child, signal.SIGKILL)
