"""``/ui`` sign-in: a random session per login, kept here with an expiry and ended by
logout; failed logins from one client are throttled.

A cookie that is a function of the token (the old HMAC) is the same at every login and
outlives any logout: whoever copied it once keeps the page. A session is 256 random bits,
known to the server only as its SHA-256 (what a memory dump shows cannot be replayed),
and it dies at logout, at its expiry, or when the table is full and it is the oldest.
Sessions live in this process only: a restart signs everyone out, which is the safe way
round.

Both clocks are injected (``time.monotonic`` by default) so tests move time, not sleep.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from time import monotonic

SESSION_TTL = 8 * 3600.0  # a working day; then sign in again
MAX_SESSIONS = 1024  # a login flood evicts the oldest sessions, it cannot grow memory
FREE_FAILURES = 3  # typos; from the 4th failure on, the client waits
FIRST_WAIT, MAX_WAIT = 1.0, 60.0  # seconds, doubling per further failure
MAX_CLIENTS = 4096  # clients remembered by the throttle, oldest forgotten first


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


@dataclass
class Sessions:
    ttl: float = SESSION_TTL
    limit: int = MAX_SESSIONS
    clock: Callable[[], float] = monotonic
    _expiry: OrderedDict[str, float] = field(default_factory=OrderedDict)  # digest -> expires
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self) -> str:
        """A new session id for the cookie."""
        session_id = secrets.token_urlsafe(32)
        now = self.clock()
        with self._lock:
            self._expire(now)
            while len(self._expiry) >= self.limit:
                self._expiry.popitem(last=False)
            self._expiry[_digest(session_id)] = now + self.ttl
        return session_id

    def valid(self, session_id: str) -> bool:
        now = self.clock()
        with self._lock:
            expires = self._expiry.get(_digest(session_id))
            if expires is not None and expires <= now:
                del self._expiry[_digest(session_id)]
                return False
            return expires is not None

    def close(self, session_id: str) -> None:
        with self._lock:
            self._expiry.pop(_digest(session_id), None)

    def __len__(self) -> int:
        with self._lock:
            self._expire(self.clock())
            return len(self._expiry)

    def _expire(self, now: float) -> None:
        # Insertion order is expiry order (one ttl for all): stop at the first live one.
        while self._expiry:
            digest, expires = next(iter(self._expiry.items()))
            if expires > now:
                return
            del self._expiry[digest]


@dataclass
class LoginThrottle:
    """Per client address: after ``free`` failures each attempt waits out a doubling delay
    (answered 429 with Retry-After, not slept on: a sleeping request would hold a
    connection). A success forgets the client. Behind a proxy every client shares one
    address: a guesser then delays the operator too, by at most ``most`` seconds."""

    free: int = FREE_FAILURES
    first: float = FIRST_WAIT
    most: float = MAX_WAIT
    clock: Callable[[], float] = monotonic
    limit: int = MAX_CLIENTS
    _failed: OrderedDict[str, tuple[int, float]] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wait(self, client: str) -> float:
        """Seconds before ``client`` may try again (0: now)."""
        with self._lock:
            _, not_before = self._failed.get(client, (0, 0.0))
        return max(0.0, not_before - self.clock())

    def failed(self, client: str) -> None:
        now = self.clock()
        with self._lock:
            count, _ = self._failed.pop(client, (0, 0.0))
            count += 1
            extra = count - self.free
            delay = min(self.most, self.first * 2 ** (extra - 1)) if extra > 0 else 0.0
            self._failed[client] = (count, now + delay)
            while len(self._failed) > self.limit:
                self._failed.popitem(last=False)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failed.pop(client, None)


def same_origin(headers: Mapping[str, str] | Message[str, str]) -> bool:
    """The form was posted by a page of this server: ``Origin`` names the ``Host`` the
    request was sent to. A cross-site form (login CSRF, forced logout), a missing or a
    ``null`` Origin is refused; browsers send Origin on every POST."""
    origin = (headers.get("Origin") or "").strip().lower()
    host = (headers.get("Host") or "").strip().lower()
    return bool(host) and origin in (f"http://{host}", f"https://{host}")


__all__ = ["LoginThrottle", "Sessions", "same_origin"]
