"""Start, wait for and stop the sandbox's processes: bounded waits, stop by PID only."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


class ProcessError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, what: str,
               interval: float = 0.2, proc: ManagedProcess | None = None) -> None:
    """Poll ``predicate`` until true; raise with ``what`` (and the log tail) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if predicate():
                return
        if proc is not None and not proc.alive():
            raise ProcessError(f"{proc.name} exited ({proc.returncode()}) while waiting for {what}:\n"
                               f"{proc.log_tail()}")
        if time.monotonic() >= deadline:
            tail = f"\n{proc.log_tail()}" if proc is not None else ""
            raise ProcessError(f"timed out after {timeout:.0f}s waiting for {what}{tail}")
        time.sleep(interval)


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


class ManagedProcess:
    """One child process with its own log file and process group."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None):
        self.name = name
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=None if env is None else {**os.environ, **env}, cwd=cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group we created, then SIGKILL after ``timeout``."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=timeout)
        self._log.close()

    def kill(self) -> None:
        """SIGKILL at once (crash tests)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()
