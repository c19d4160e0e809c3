"""The service's HTTP API (FastAPI on uvicorn in a thread; loopback by default).

* ``GET /healthz``  liveness: 200 when the loop ticked within 3 x the tick interval,
  else 503 with the reason (no token: probes must reach it).
* ``GET /metrics``  Prometheus exposition of :class:`ServiceMetrics` (no token).
* ``GET /status``   JSON: fleet, last plan with reasons, policy errors, leader, data.
* ``GET /plan``     JSON: the last plan only.
* ``GET /ui``       the status page for people (``ui.py``); ``POST /ui/login|logout``.
* ``/v1/requests``  capacity requests with per-team tokens (``requests_api.py``).
* ``GET /openapi.json``  the description of all of it (``openapi.py``).

``/status`` and ``/plan`` need ``Authorization: Bearer <token>`` when a token is
configured (an empty or missing value never matches); without one the API refuses to
listen anywhere but loopback. The routes are ``routes.py``; connections are served by
``serve.py`` (uvicorn with a deadline for a whole request and a cap on open connections,
so slow or half-open clients cannot take the probes down).
"""

from __future__ import annotations

import ipaddress
import logging

from autoscaler.service.http.handlers import ApiHandlers, Health
from autoscaler.service.http.routes import build_app
from autoscaler.service.http.serve import Limits, ServerThread
from autoscaler.service.http.sessions import LoginThrottle, Sessions

log = logging.getLogger(__name__)


MIN_TOKEN_LENGTH = 16  # shorter bearer tokens are refused (config load and here)


class ApiError(RuntimeError):
    pass


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiServer:
    """``ApiServer(handlers, host, port, token).start()``; ``stop()`` on shutdown."""

    def __init__(self, handlers: ApiHandlers, host: str = "127.0.0.1", port: int = 9464,
                 token: str | None = None, *, limits: Limits = Limits(),
                 sessions: Sessions | None = None, throttle: LoginThrottle | None = None):
        token = token.strip() if token is not None else None  # the header value is stripped too
        if token is not None and len(token) < MIN_TOKEN_LENGTH:
            raise ApiError(f"refusing a bearer token of {len(token)} characters: it "
                           f"must have at least {MIN_TOKEN_LENGTH} (an empty token file is a "
                           "mistake, never 'no authentication')")
        if token is None and not is_loopback(host):
            raise ApiError(f"refusing to serve /status on {host} without a token: set "
                           "http.token_env or http.token_file, or listen on 127.0.0.1")
        self.sessions = Sessions() if sessions is None else sessions  # empty is falsy
        self.throttle = LoginThrottle() if throttle is None else throttle
        self.app = build_app(handlers, token, self.sessions, self.throttle)
        self.server = ServerThread(self.app, host, port, limits)

    @property
    def address(self) -> tuple[str, int]:
        return self.server.address

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> ApiServer:
        self.server.start()
        log.info("HTTP API on %s (/healthz /metrics /status /plan /ui /v1/requests)", self.url)
        return self

    def stop(self) -> None:
        self.server.stop()


__all__ = ["MIN_TOKEN_LENGTH", "ApiError", "ApiHandlers", "ApiServer", "Health", "is_loopback"]
