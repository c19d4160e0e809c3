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
from typing import Self


class ProcessError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, what: str,
               interval: float = 0.2, proc: ManagedProcess | None = None) -> None:
    """Poll ``predicate`` until true; raise with ``what`` (and the log tail) after ``timeout``.
    A check that raises counts as not yet (a service still starting refuses connections);
    the last exception it raised is in the timeout's message, since a check that can never
    pass (a typo, a changed API) would otherwise look like a slow service."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            if predicate():
                return
        except Exception as exc:
            last = exc
        if proc is not None and not proc.alive():
            raise ProcessError(f"{proc.name} exited ({proc.returncode()}) while waiting for {what}:\n"
                               f"{proc.log_tail()}")
        if time.monotonic() >= deadline:
            tail = f"\n{proc.log_tail()}" if proc is not None else ""
            raised = f"; the last check raised {type(last).__name__}: {last}" if last is not None else ""
            raise ProcessError(f"timed out after {timeout:.0f}s waiting for {what}{raised}{tail}")
        time.sleep(interval)


def proc_stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` as fields: [comm, state, ppid, ...] (field 21 of stat(5) is
    index 20, the start time); None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after it.
    head, _, tail = text.rpartition(")")
    return [head.split(" (", 1)[-1], *tail.split()]


def pid_alive(pid: int) -> bool:
    """Running: a zombie (which still answers kill(pid, 0)) counts as gone."""
    fields = proc_stat(pid)
    return fields is not None and fields[1] != "Z"


def child_pids(pid: int) -> list[int]:
    """Live direct children of ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = proc_stat(int(entry))
            if fields is not None and fields[2] == str(pid) and fields[1] != "Z":
                out.append(int(entry))
    return out


def stop_pids(pids: Sequence[int], timeout: float = 10.0, *,
              alive: Callable[[int], bool] = pid_alive, groups: bool = False) -> list[int]:
    """The one way the sandbox stops processes, by PID: SIGTERM each live one, wait up to
    ``timeout`` for all to go, SIGKILL what is left and wait again. Returns the PIDs still
    alive. With ``groups`` a PID that leads its own process group (every ManagedProcess)
    is signalled with its group, so it takes its helpers with it. ``alive`` decides what is
    still the process meant (a recorded start time, a Popen that reaps its child)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            if not alive(pid):
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if groups and os.getpgid(pid) == pid:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)
        pids = [p for p in pids if alive(p)]
        if not pids:
            break
    return list(pids)


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
        left = stop_pids([self.pid], timeout, alive=lambda _pid: self.alive(), groups=True)
        if left:
            raise subprocess.TimeoutExpired(self.argv, timeout)
        self._log.close()

    def kill(self) -> None:
        """SIGKILL at once (crash tests)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()


class ServiceProcess:
    """A sandbox service that runs as one :class:`ManagedProcess` (``proc``): a subclass
    starts it in ``start()``; ``stop()``, and leaving a ``with`` block, stop it by PID."""

    proc: ManagedProcess | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            # A start that failed half way (its process up, its readiness wait failed):
            # ``with`` runs no __exit__ for it, so it is stopped here, by PID.
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
