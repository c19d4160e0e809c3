"""Run terraform commands in one workspace: own CLI config, own environment, a deadline.

Command lines are built with python-terraform's ``generate_cmd_string``; the process is
run here with ``subprocess.run`` because python-terraform's ``cmd()`` has no timeout,
always passes the whole ``os.environ`` (no per-workspace ``TF_CLI_CONFIG_FILE``), and adds
``-var-file``/``-auto-approve=false`` defaults that break applying a saved plan.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from python_terraform import IsFlagged, Terraform

from autoscaler.actuators.terraform.errors import (
    Diagnostic,
    TerraformError,
    classify,
    diagnostics_from_text,
)
from autoscaler.secrets import child_env

AUTOMATION_ENV = {"CHECKPOINT_DISABLE": "1", "TF_INPUT": "0", "TF_IN_AUTOMATION": "1"}
FLAG = IsFlagged


@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    diagnostics: list[Diagnostic] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


class Runner:
    """Runs ``terraform <cmd>`` in ``workdir`` with ``cli_config`` and logs to ``log_dir``."""

    def __init__(self, workdir: Path, cli_config: Path, terraform_bin: str = "terraform",
                 timeout_s: float = 1800, extra_env: Mapping[str, str] | None = None):
        self.workdir = workdir
        self.cli_config = cli_config
        self.timeout_s = timeout_s
        self.extra_env = dict(extra_env or {})
        self._tf = Terraform(working_dir=str(workdir), terraform_bin_path=terraform_bin)

    def env(self) -> dict[str, str]:
        # GOGC: terraform starts the AWS provider four times per apply (schemas, validate,
        # plan, apply), and each start builds its whole schema; a lazier Go collector cuts
        # an apply's CPU by ~30% (12 -> 8.4 s against moto) for ~60 MB more per provider
        # process. An operator's own GOGC wins.
        # Without the service's own secrets (the store password, Ansible's secret_env):
        # a provider plugin needs its cloud's credentials, not those (secrets.child_env).
        env = {"GOGC": "400", **child_env(), **AUTOMATION_ENV, **self.extra_env,
               "TF_CLI_CONFIG_FILE": str(self.cli_config)}
        env.pop("TF_LOG", None)  # debug logs would print request bodies
        return env

    def run(self, cmd: str, *args: str, json_lines: bool = False, ok_codes: tuple[int, ...] = (0,),
            **options: Any) -> Result:
        """Run one command; raise the most specific TerraformError if its code is not ok."""
        options.setdefault("no_color", FLAG)
        if json_lines:
            options["json"] = FLAG
        argv = [str(a) for a in self._tf.generate_cmd_string(cmd, *args, **options)]
        started = time.monotonic()
        stdout, stderr, returncode = self._execute(argv, cmd)
        result = Result(argv, returncode, stdout, stderr, time.monotonic() - started)
        if json_lines:
            result.events = _json_events(stdout)
            result.diagnostics = [_diagnostic(e) for e in result.events
                                  if e.get("type") == "diagnostic"]
        result.diagnostics += diagnostics_from_text(stderr)
        self._log(cmd, result)
        if returncode not in ok_codes:
            raise classify(f"terraform {cmd} failed in {self.workdir} (exit {returncode})",
                           result.diagnostics or [Diagnostic("error", stderr.strip()[-2000:])])
        return result

    def _execute(self, argv: list[str], cmd: str) -> tuple[str, str, int]:
        """Run in its own process group so a timeout also ends the provider plugins.

        Output goes to unlinked files, not pipes: when the service dies mid-run (SIGKILL,
        OOM), terraform finishes and releases its state lock. Writing to a pipe whose
        reader died would kill it by SIGPIPE, leaving a remote backend's lock behind
        until ``stale_lock_after``, so the next leader could not apply for that long."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(argv, cwd=self.workdir, env=self.env(), stdout=out,
                                    stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired as exc:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                raise TerraformError(f"terraform {cmd} timed out after {self.timeout_s:.0f}s in "
                                     f"{self.workdir}") from exc
            except BaseException:
                # Interrupted (Ctrl-C, test teardown): never leave terraform holding the lock.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
                raise
            return _read(out), _read(err), proc.returncode

    def _log(self, cmd: str, result: Result) -> None:
        log_dir = self.workdir / "logs"
        log_dir.mkdir(exist_ok=True)
        name = cmd.split()[0]
        text = (f"$ {' '.join(result.argv)}\n# exit {result.returncode} after "
                f"{result.seconds:.1f}s\n{result.stdout}\n{result.stderr}")
        (log_dir / f"{name}.log").write_text(text)


def _read(file: IO[bytes]) -> str:
    file.seek(0)
    return file.read().decode("utf-8", errors="replace")


def _json_events(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def _diagnostic(event: dict[str, Any]) -> Diagnostic:
    diag = event.get("diagnostic") or {}
    return Diagnostic(
        severity=str(diag.get("severity", event.get("@level", "error"))),
        summary=str(diag.get("summary", event.get("@message", ""))),
        detail=str(diag.get("detail", "")),
        address=str(diag.get("address", "")),
    )
