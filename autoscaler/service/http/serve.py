"""uvicorn (h11, asyncio) in a thread of its own, with the two limits uvicorn lacks.

A connection costs a protocol object on one event loop, not a thread: 300 half-open
connections hold no worker, and a handler thread is only taken once a request is whole
(``routes.py`` bounds those threads). uvicorn's socket-level timeouts apply between
events, so a client that sends one header byte every few seconds would keep its
connection for ever, and it has no cap on open connections (``limit_concurrency``
answers 503 to every request over the limit, probes included). So:

* **a deadline for a whole request** (``Limits.request_timeout``): from the connection's
  opening (or the previous response) until the request's last body byte. Past it the
  connection is closed, answered ``408`` first if the client had begun a request that no
  handler has yet. A client that does not read its answer gets the same time to take it,
  then the connection is aborted.
* **a cap on open connections** (``Limits.max_connections``): a connection over the cap
  closes the *oldest connection still waiting for its client* (sending nothing, trickling
  headers or a body, idle between requests), never one whose request a handler serves.
  A probe's fresh connection therefore gets in while stalled clients hold the rest; the
  alternative, refusing newcomers (or answering them 503), would make a slow-client
  flood fail the liveness probe and restart a healthy service. Only when every open
  connection is being served is the newcomer itself closed.

Headers are bounded by h11 (16 KiB), malformed framing (a bad ``Content-Length``, a
broken request line) is answered 400 by uvicorn. Client departures and limits are logged
at DEBUG, without a traceback: they are the client's business.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 16 * 1024
_TOO_SLOW = b"the request was not complete within its deadline\n"
REQUEST_TIMEOUT_ANSWER = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\n"
                          b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
                          % (len(_TOO_SLOW), _TOO_SLOW))


class ServeError(RuntimeError):
    pass


@dataclass(frozen=True)
class Limits:
    request_timeout: float = 10.0  # open (or last response) -> the request's last byte
    max_connections: int = 256
    keep_alive: float = 5.0  # idle between requests on one connection
    backlog: int = 128  # the listen queue: the event loop accepts at once


class BoundedH11Protocol(H11Protocol):
    limits: ClassVar[Limits] = Limits()

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.opened = 0.0
        self.begun = False  # a byte of the current request has arrived
        self._deadline: asyncio.TimerHandle | None = None

    # -- uvicorn's hooks -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.opened = time.monotonic()
        self._arm()
        self._enforce_cap()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.begun = True
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and not self.cycle.more_body and not self.cycle.response_complete:
            self._disarm()  # the request is whole: the handler has it

    def on_response_complete(self) -> None:
        # The next request on this connection gets a deadline of its own; a closing
        # connection gets the same time to take its answer.
        self.begun = False
        self._arm()
        super().on_response_complete()

    def shutdown(self) -> None:
        try:
            super().shutdown()
        except h11.LocalProtocolError:  # a connection h11 already gave up on
            self.transport.close()

    # -- the limits ----------------------------------------------------------------------
    @property
    def waiting_for_client(self) -> bool:
        """No handler runs for this connection: it sends, trickles, or idles."""
        return self.cycle is None or self.cycle.response_complete or self.cycle.more_body

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.limits.request_timeout, self._deadline_passed)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _deadline_passed(self) -> None:
        self._deadline = None
        if self.transport.is_closing():  # closed, but the client has not read its answer:
            self.transport.abort()  # its unsent bytes would hold the socket for ever
            return
        log.debug("http client %s: no whole request within %gs, closed", self.client,
                  self.limits.request_timeout)
        if self.begun and (self.cycle is None or self.cycle.response_complete):
            self.transport.write(REQUEST_TIMEOUT_ANSWER)  # no handler will answer it
        self.transport.close()  # silent ones just go; a handler waiting for a body sees a disconnect

    def _enforce_cap(self) -> None:
        live = [c for c in self.connections if not c.transport.is_closing()]
        if len(live) <= self.limits.max_connections:
            return
        waiting = [c for c in live if isinstance(c, BoundedH11Protocol) and c.waiting_for_client]
        victim = min(waiting, key=lambda c: c.opened, default=self)
        log.debug("http: %d connections open, over the cap of %d: closed %s, the oldest "
                  "waiting for its client", len(live), self.limits.max_connections, victim.client)
        victim.transport.close()


def bounded_protocol(limits: Limits) -> type[BoundedH11Protocol]:
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"limits": limits})


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=backlog)
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


class ServerThread:
    """``ServerThread(app, host, port).start()``; ``stop()`` from any other thread."""

    def __init__(self, app: Any, host: str, port: int, limits: Limits = Limits()):
        self.limits = limits
        self.socket = listening_socket(host, port, limits.backlog)
        config = uvicorn.Config(
            app, http=bounded_protocol(limits), ws="none", lifespan="on", loop="asyncio",
            log_config=None, log_level=logging.ERROR, access_log=False, server_header=False,
            timeout_keep_alive=max(1, round(limits.keep_alive)), timeout_graceful_shutdown=2,
            backlog=limits.backlog, h11_max_incomplete_event_size=MAX_HEADER_BYTES)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]},
                                        name="http-api", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.socket.getsockname()[:2]
        return str(host), int(port)

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise ServeError("the HTTP server did not start (see the log)")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():  # its loop still owns the socket: it closes it on exit
            log.warning("the HTTP server did not stop within %gs", timeout)
            return
        self.socket.close()

    def open_connections(self) -> int:
        """Connections open now (for tests and benchmarks; len() of a set is atomic)."""
        return len(self.server.server_state.connections)

    def running_tasks(self) -> int:
        """Requests whose handler runs now."""
        return len(self.server.server_state.tasks)


__all__ = ["BoundedH11Protocol", "Limits", "ServeError", "ServerThread"]
