"""Ctrl-C during ``gpu-autoscaler demo`` tears everything down: no process, no namespace."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from autoscaler.sandbox.hosts import netns
from autoscaler.sandbox.hosts.procs import ManagedProcess, wait_until
from autoscaler.sandbox.stack.local import privileged
from autoscaler.sandbox.stack.state import alive, read_state

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not privileged(), reason="needs root, network namespaces, Slurm and sshd")
def test_ctrl_c_mid_demo_leaves_nothing_behind(tmp_path):
    d = tmp_path / "demo"
    proc = ManagedProcess("demo", [sys.executable, "-m", "autoscaler.cli", "demo", "--dir", str(d)],
                          tmp_path / "demo.out", env={"PYTHONPATH": str(REPO)}, cwd=tmp_path)
    try:
        # Interrupt once the first instance has its SSH host (a namespace) in the sandbox.
        wait_until(lambda: (s := read_state(d)) is not None and s.status == "ready"
                   and bool(s.namespaces), 400, "the first node's SSH host", proc=proc)
        state = read_state(d)
        recorded = [p for p in state.children if alive(p)]
        os.kill(proc.pid, signal.SIGINT)
        proc.proc.wait(timeout=400)
        out = proc.log_tail(40)
        assert "interrupted: tearing down" in out and "Torn down" in out, out
        assert proc.returncode() == 1
    finally:
        proc.stop()
    assert recorded and not [p for p in recorded if alive(p)]
    assert all(not (netns.NETNS_DIR / n).exists() for n in state.namespaces)
    assert read_state(d).status == "stopped"
