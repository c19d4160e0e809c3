"""One row per check, and running the checks side by side, each under its own deadline.

A check is a function of the :class:`Context` that returns its :class:`Result`; a check
that raises or overruns its deadline is a ``fail`` row saying so, never a traceback. Every
check also bounds its own I/O (client timeouts below its deadline), so a check that
overran still ends on its own shortly after the report is printed. Its thread is a daemon
all the same: one whose I/O is bounded per read only (a server that answers a byte at a
time) never keeps the command from exiting once the report is printed.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)
C = TypeVar("C")
T = TypeVar("T")


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"  # works, but not as production should run it; not a failure
    FAIL = "fail"
    SKIP = "skip"  # does not apply to this config (no Slurm pools, no queue...)


@dataclass(frozen=True)
class Result:
    name: str
    status: Status
    reason: str
    seconds: float = 0.0


def ok(name: str, reason: str) -> Result:
    return Result(name, Status.OK, reason)


def warn(name: str, reason: str) -> Result:
    return Result(name, Status.WARN, reason)


def fail(name: str, reason: str) -> Result:
    return Result(name, Status.FAIL, reason)


def skip(name: str, reason: str) -> Result:
    return Result(name, Status.SKIP, reason)


@dataclass(frozen=True)
class Check(Generic[C]):
    """``run(context)`` returns one row per thing checked (one per region, per pool...)."""

    name: str
    run: Callable[[C], list[Result]]
    timeout_s: float = 10.0
    help: str = ""


def run_checks(checks: Sequence[Check[C]], context: C) -> list[Result]:
    """Every check at once on its own thread; rows in the order of ``checks``."""
    started = time.monotonic()
    futures = [in_background(f"doctor-{check.name}", _timed, check, context) for check in checks]
    rows: list[Result] = []
    for check, future in zip(checks, futures, strict=True):
        left = max(0.0, started + check.timeout_s - time.monotonic())
        try:
            rows += future.result(timeout=left)
        except concurrent.futures.TimeoutError:
            rows.append(Result(check.name, Status.FAIL,
                               f"no answer within {check.timeout_s:g}s", check.timeout_s))
        except Exception as exc:  # the row says what broke; the log keeps the detail
            log.debug("doctor check %s", check.name, exc_info=True)
            rows.append(Result(check.name, Status.FAIL, f"unexpected {type(exc).__name__}: "
                               f"{str(exc)[:300]}", round(time.monotonic() - started, 1)))
    return rows


def in_background(name: str, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
    """``fn(*args)`` on a daemon thread of its own. Not a ThreadPoolExecutor: Python joins
    its threads at exit, so a check past its deadline would hold the command after its
    report."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # the caller's result() raises it
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _timed(check: Check[C], context: C) -> list[Result]:
    started = time.monotonic()
    rows = check.run(context)
    seconds = round(time.monotonic() - started, 1)
    return [Result(r.name, r.status, r.reason, seconds) for r in rows]


def passed(rows: Sequence[Result]) -> bool:
    """Exit status 0 only when nothing failed (a skip or a warning is not a failure)."""
    return all(r.status is not Status.FAIL for r in rows)
