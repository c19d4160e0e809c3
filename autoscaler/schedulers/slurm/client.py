"""How Slurm commands are run: where they are, a prefix (e.g. ssh to a login node), their
environment and timeout; one error type for every way a command fails."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.policy.duration import Duration

Runner = Callable[[Sequence[str], float, Mapping[str, str]], str]


class SlurmConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bin_dir: Path | None = Field(
        None, description="Directory of squeue/sinfo; default: found on PATH."
    )
    command_prefix: list[str] = Field(
        default_factory=list, description="Prepended to every command, e.g. [ssh, slurm-login]. "
        "When it runs ssh, every argument after it is quoted for the remote shell."
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra env, e.g. SLURM_CONF.")
    timeout: Duration = Field(timedelta(seconds=10), description="Per command.")
    use_json: bool = Field(True, description="Try --json first (falls back to formatted output).")
    registration: Literal["dynamic", "declared"] = Field(
        "dynamic", description="How cloud nodes enter the cluster. dynamic (Slurm >= 22.05): "
        "each node registers itself (slurmd -Z --conf with its gres, features and weight) and "
        "is removed with 'scontrol delete nodename' once its instance is gone; no name is "
        "declared in advance, but slurm.conf needs MaxNodeCount and, per partition, a "
        "Nodeset whose Feature is partition-<name>. declared (older Slurm): every node name "
        "(<team>-<pool>-<n>, never reused) must already be in slurm.conf, e.g. as "
        "State=CLOUD; a terminated node is set DOWN, so a pool stops joining nodes when its "
        "declared names run out.")

    def command(self, name: str, *args: str, env: Sequence[str] = ()) -> list[str]:
        """The command line: the prefix, then ``env`` (``VAR=value``, set by env(1) where the
        command runs), the command and its arguments. Through ssh, which joins everything
        after the host into one line for the remote shell, each part after the prefix is
        quoted for that shell: a reason with spaces, a format with pipes, reach the command
        as one argument each, and never as shell syntax."""
        exe = str(self.bin_dir / name) if self.bin_dir is not None else name
        remote = [*(("env", *env) if env else ()), exe, *args]
        if self.command_prefix and Path(self.command_prefix[0]).name == "ssh":
            remote = [shlex.quote(part) for part in remote]
        return [*self.command_prefix, *remote]


class SlurmCommandError(RuntimeError):
    pass


def run_command(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> str:
    """Run one command within ``timeout``. It runs in a process group of its own, killed
    whole on timeout: a wrapper script or a ``command_prefix`` (ssh) has children of its
    own, which killing the direct child alone would leave running."""
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, **env},
                                start_new_session=True)
    except FileNotFoundError:
        raise SlurmCommandError(f"{argv[0]} not found") from None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException as exc:  # the timeout, or the caller interrupted
        _kill_group(proc)
        if isinstance(exc, subprocess.TimeoutExpired):
            raise SlurmCommandError(f"{' '.join(argv[-2:])} timed out after {timeout:g}s") from None
        raise
    if proc.returncode != 0:
        err = (stderr or stdout).strip().splitlines()
        raise SlurmCommandError(f"{' '.join(argv)} failed ({proc.returncode}): "
                                f"{err[-1] if err else 'no output'}")
    return stdout


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the command's process group; reap it and close our ends of its pipes (not
    read to their end: a process that left the group, an ssh master, may hold them)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
