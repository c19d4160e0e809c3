"""One controller per store without leader election: an exclusive ``flock`` on a file
beside the store, which the kernel drops when the process dies however it dies, so a
SIGKILL'd controller's successor starts at once. ``store upgrade`` takes it too."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path

from autoscaler.fleet.store_url import parse_url, sqlite_file
from autoscaler.service.app import ServiceError, one_line
from autoscaler.service.config.models import ServiceConfig

log = logging.getLogger(__name__)


class InstanceLocked(ServiceError):
    """Another process holds the instance lock: a controller runs (or is still stopping)."""


class InstanceLock:
    """An exclusive ``flock`` on one file, with the holder's PID written in it. The kernel
    drops it when the process dies, however it dies (a SIGKILL'd controller's successor
    starts at once); the file stays, so nobody ever locks an unlinked inode."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> InstanceLock:
        """Take the lock now or raise :class:`InstanceLocked` (never waits)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            writable = True
        except PermissionError:  # another user's file (the service's): locking needs no write
            fd, writable = os.open(self.path, os.O_RDONLY), False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            by = f"PID {pid}" if pid.isdigit() else "another process (PID not written yet)"
            raise InstanceLocked(f"{self.path} is locked by {by}: another gpu-autoscaler "
                                 "controller runs on this store (or is still stopping)") from None
        except BaseException:
            os.close(fd)
            raise
        if writable:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # no stale PID for the next reader
        os.close(fd)  # closing the only descriptor drops the flock


def instance_lock_path(config: ServiceConfig) -> Path | None:
    """The lock file that keeps a second controller off this store: ``<db>.lock`` beside a
    SQLite file. A networked store (PostgreSQL) gets one in the Terraform workdir, which
    keeps a second controller off this host only; None for an in-memory SQLite store."""
    file = sqlite_file(config.store.url)
    if file is not None:
        file = file.resolve()
        return file.with_name(f"{file.name}.lock")
    if parse_url(config.store.url).backend == "sqlite":
        return None  # in memory: no other process can reach it
    return config.terraform.workdir.resolve() / "gpu-autoscaler.lock"


def hold_instance_lock(config: ServiceConfig) -> InstanceLock | None:
    """The single-instance mode's fence (``leader.enabled: false``): the instance lock, held
    until the service closes, or :class:`ServiceError` saying who holds it."""
    path = instance_lock_path(config)
    if path is None:
        return None
    if sqlite_file(config.store.url) is None:
        log.warning("leader.enabled is false: the lock %s keeps a second controller off this "
                    "host only; enable leader.enabled if more than one host may run the "
                    "controller on store %s", path, config.store.display_url())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return InstanceLock(path).acquire()
    except InstanceLocked as exc:
        raise InstanceLocked(f"cannot start: {exc}; stop it first (leader.enabled is false: "
                             "one controller per store)") from None
    except OSError as exc:
        raise ServiceError(f"cannot take the instance lock {path}: {one_line(exc)}") from None
