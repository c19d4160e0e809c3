"""A time limit on a whole call, for clients that bound only each socket read.

requests, urllib3, botocore and the Alibaba SDK give up when one read waits longer than
the timeout, not when the whole answer is late: a server (or proxy) that sends its
headers and then a byte a second holds the call for ever. So a call that must end runs on
a daemon thread of its own and is waited for at most its limit. Python cannot stop a
thread: one still running then is left to end by itself, and until it has, every call
with the same key (one per client, say) fails at once instead of starting another thread,
so a dead endpoint never piles up stuck threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")
# The SDKs' longest wait before a retry: botocore (standard mode) waits up to 2^(i-1) s
# before retry i, at most 20 s, and up to 5 s more when the server asks (x-amz-retry-after);
# the Alibaba SDK waits less (0.5 s doubling, at most 20 s).
SDK_MAX_BACKOFF_S = 20.0
SDK_RETRY_AFTER_S = 5.0

class Overran(Exception):
    """A call did not end within its limit (``still_running`` False), or a call with the
    same key that overran earlier still runs, so this one was not started (True)."""

    def __init__(self, message: str, *, limit: float, still_running: bool):
        super().__init__(message)
        self.limit, self.still_running = limit, still_running


def sdk_call_limit(connect_s: float, read_s: float, attempts: int, extra_s: float = 0.0) -> float:
    """The longest a legitimate SDK call may take, from the client's own settings: per
    attempt the connect timeout, ``extra_s`` (a long poll's wait) and twice the read timeout
    (an answer may take as long to arrive as the server took to start it), and before each
    retry the SDK's longest backoff. 52 s for connect 3 s, read 10 s and 2 attempts."""
    attempts = max(1, attempts)
    backoff = sum(min(2.0 ** i, SDK_MAX_BACKOFF_S) + SDK_RETRY_AFTER_S for i in range(attempts - 1))
    return attempts * (connect_s + extra_s + 2 * read_s) + backoff

class Bound:
    """Calls waited for at most a limit each, keyed: see the module's docstring. Concurrent
    calls with one key still run side by side; a key never has more stuck threads than it
    had calls running when one of them overran."""

    def __init__(self, name: str = "bounded-call") -> None:
        self.name = name  # the worker threads' name
        self._stuck: dict[Hashable, list[threading.Thread]] = {}
        self._lock = threading.Lock()

    def running(self, key: Hashable) -> bool:
        """Whether a call with ``key`` that overran its limit still runs."""
        with self._lock:
            alive = [t for t in self._stuck.get(key, []) if t.is_alive()]
            if alive:
                self._stuck[key] = alive
            else:
                self._stuck.pop(key, None)
            return bool(alive)

    def call(self, key: Hashable, limit: float, fn: Callable[[], T], what: str = "the call") -> T:
        """``fn()``'s answer, or its exception raised again here, if it ends within
        ``limit`` seconds; else :class:`Overran`."""
        if self.running(key):
            raise Overran(f"{what}: an earlier call that overran its time still runs: "
                          "nothing sent", limit=limit, still_running=True)
        outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                outcome.append((True, fn()))
            except BaseException as exc:  # raised again on the caller's thread
                outcome.append((False, exc))

        worker = threading.Thread(target=run, name=self.name, daemon=True)
        worker.start()
        worker.join(limit)
        if not outcome:
            with self._lock:
                self._stuck.setdefault(key, []).append(worker)
            raise Overran(f"{what}: did not finish its answer within {limit:g}s", limit=limit,
                          still_running=False)
        ok, value = outcome[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]
