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


def test_through_an_ssh_prefix_each_argument_arrives_whole_and_never_as_shell(tmp_path: Path) -> None:
    """ssh joins everything after the host into one line for the remote shell: a drain
    reason with spaces became several arguments (scontrol refused it), squeue's format was
    cut at its pipes, and a ';' in an argument would have run a command there."""
    from autoscaler.actuators.drain.slurm import SlurmOps
    from autoscaler.schedulers.slurm.client import SlurmConfig

    # As ssh does: drop the host, join the rest with spaces, hand it to a shell.
    ssh = _script(tmp_path / "ssh", 'shift\nexec sh -c "$*"')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "scontrol", 'for a in "$@"; do echo "[$a]"; done >> "$SEEN"')
    _script(bin_dir / "squeue", 'for a in "$@"; do echo "[$a]"; done >> "$SEEN"; echo "$TZ"')
    seen, pwned = tmp_path / "seen", tmp_path / "pwned"
    cfg = SlurmConfig(bin_dir=bin_dir, command_prefix=[str(ssh), "slurm-login"],
                      env={"SEEN": str(seen)})
    SlurmOps(cfg).cordon("vision-gpu-1", f"idle for 15m; touch {pwned} | x")
    assert seen.read_text().splitlines() == [
        "[update]", "[nodename=vision-gpu-1]", "[state=DRAIN]",
        f"[reason=idle for 15m; touch {pwned} | x]"]
    assert not pwned.exists()
    seen.unlink()
    out = run_command(cfg.command("squeue", "-o", "%i|%P %j", env=("TZ=UTC",)), 5, cfg.env)
    assert seen.read_text().splitlines() == ["[-o]", "[%i|%P %j]"] and out == "UTC\n"
