"""The service's HTTP API (stdlib ``http.server`` in a thread; loopback by default).

* ``GET /healthz``  liveness: 200 when the loop ticked within 3 x the tick interval,
  else 503 with the reason (no token: probes must reach it).
* ``GET /metrics``  Prometheus exposition of :class:`ServiceMetrics` (no token).
* ``GET /status``   JSON: fleet, last plan with reasons, policy errors, leader, data.
* ``GET /plan``     JSON: the last plan only.
* ``GET /ui``       the status page for people (``ui.py``); ``POST /ui/login|logout``.
* ``/v1/requests``  capacity requests with per-team tokens (``requests_api.py``).

``/status`` and ``/plan`` need ``Authorization: Bearer <token>`` when a token is
configured (an empty or missing value never matches); without one the API refuses to
listen anywhere but loopback. Connections are served by
:class:`~autoscaler.service.http.server.BoundedHTTPServer` (a fixed worker pool, silent
connections hold no thread, socket timeouts, client disconnects are not errors).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from autoscaler.service.http import requests_api, ui
from autoscaler.service.http.server import CLIENT_GONE, BoundedHTTPServer
from autoscaler.service.observe.metrics import CONTENT_TYPE

log = logging.getLogger(__name__)


MIN_TOKEN_LENGTH = 16  # shorter bearer tokens are refused (config load and here)


class ApiError(RuntimeError):
    pass


@dataclass(frozen=True)
class Health:
    ok: bool
    reason: str


@dataclass(frozen=True)
class ApiHandlers:
    health: Callable[[], Health]
    metrics: Callable[[], bytes]
    status: Callable[[], dict[str, Any]]
    plan: Callable[[], dict[str, Any] | None]
    links: tuple[tuple[str, str], ...] = ()  # (title, url) of the dashboards /ui links to
    # /v1/requests: (method, path, Authorization header, body) -> (code, JSON)
    requests: Callable[[str, str, str, bytes], tuple[int, Any]] | None = None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _handler(api: ApiHandlers, token: str | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "gpu-autoscaler"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http %s %s", self.address_string(), format % args)

        def _send(self, code: int, body: bytes, ctype: str,
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, code: int, data: Any, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(data, indent=1, default=str).encode()
            self._send(code, body, "application/json", headers)

        def _authorized(self) -> bool:
            if token is None:
                return True
            given = self.headers.get("Authorization", "")
            scheme, _, value = given.partition(" ")
            value = value.strip()
            if scheme.lower() == "bearer" and value and token and hmac.compare_digest(
                    value.encode(), token.encode()):
                return True
            self._json(401, {"error": "a bearer token is required"},
                       {"WWW-Authenticate": 'Bearer realm="gpu-autoscaler"'})
            return False

        def do_GET(self) -> None:
            self._guarded(self._route)

        def do_POST(self) -> None:
            self._guarded(self._post)

        def do_DELETE(self) -> None:
            self._guarded(lambda path: self._requests("DELETE", path))

        def _requests(self, method: str, path: str) -> bool:
            """Serve /v1/requests; False when the path is not one of its paths."""
            if path != "/v1/requests" and not path.startswith("/v1/requests/"):
                if method == "DELETE":
                    self._json(404, {"error": "not found"})
                return method == "DELETE"
            if api.requests is None:
                self._json(404, {"error": "capacity requests are not enabled (http.team_tokens)"})
                return True
            body = b""
            if method == "POST":
                text = self.headers.get("Content-Length") or ""
                length = int(text) if text.isdigit() else -1
                if not 0 <= length <= requests_api.MAX_BODY:
                    self._json(413 if length > 0 else 411, {
                        "error": f"a body of at most {requests_api.MAX_BODY} bytes with a "
                                 "Content-Length is required"})
                    return True
                body = self.rfile.read(length)
            code, data = api.requests(method, path, self.headers.get("Authorization", ""), body)
            self._json(code, data)
            return True

        def _guarded(self, route: Callable[[str], object]) -> None:
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            try:
                route(path)
            except CLIENT_GONE as exc:  # the client left: nothing to answer, not an error
                log.debug("http %s: client went away: %s", path, exc)
            except Exception:  # one bad request must not take the API down
                log.exception("http %s failed", path)
                self._json(500, {"error": "internal error (see the service log)"})

        def _route(self, path: str) -> None:
            if self._requests("GET", path):
                return
            if path == "/healthz":
                health = api.health()
                self._json(200 if health.ok else 503,
                           {"status": "ok" if health.ok else "unhealthy", "reason": health.reason})
            elif path == "/metrics":
                self._send(200, api.metrics(), CONTENT_TYPE)
            elif path in ("/status", "/plan"):
                if self._authorized():
                    self._json(200, api.status() if path == "/status" else api.plan())
            elif path == "/ui":
                self._page(ui.get(self.headers, token, api.status, api.links))
            else:
                self._json(404, {"error": "not found", "paths": ["/healthz", "/metrics",
                                                                 "/status", "/plan"]})

        def _page(self, page: ui.Page) -> None:
            self._send(page.code, page.body, page.ctype, page.headers)

        def _post(self, path: str) -> None:
            if self._requests("POST", path):
                return
            if path not in ("/ui/login", "/ui/logout"):
                self._json(404, {"error": "not found"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 <= length <= ui.MAX_FORM:
                self._json(413, {"error": "form too large"})
                return
            self._page(ui.post(path, self.rfile.read(length), token))

    return Handler


class ApiServer:
    """``ApiServer(handlers, host, port, token).start()``; ``stop()`` on shutdown."""

    def __init__(self, handlers: ApiHandlers, host: str = "127.0.0.1", port: int = 9464,
                 token: str | None = None):
        token = token.strip() if token is not None else None  # the header value is stripped too
        if token is not None and len(token) < MIN_TOKEN_LENGTH:
            raise ApiError(f"refusing a bearer token of {len(token)} characters: it "
                           f"must have at least {MIN_TOKEN_LENGTH} (an empty token file is a "
                           "mistake, never 'no authentication')")
        if token is None and not is_loopback(host):
            raise ApiError(f"refusing to serve /status on {host} without a token: set "
                           "http.token_env or http.token_file, or listen on 127.0.0.1")
        self._httpd = BoundedHTTPServer((host, port), _handler(handlers, token))
        self._thread = threading.Thread(target=self._httpd.serve, name="http-api", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> ApiServer:
        self._thread.start()
        log.info("HTTP API on %s (/healthz /metrics /status /plan)", self.url)
        return self

    def stop(self) -> None:
        self._httpd.stop()
        self._thread.join(timeout=10)
