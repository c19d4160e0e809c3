"""The API's routes as a FastAPI app: what each path answers, who may ask, and how much of
a body is read.

Handlers the service hands in are plain blocking callables (the store, the metrics
registry): each runs in a worker thread, at most ``WORKERS`` at once, and the probes
(/healthz, /metrics) have ``PROBE_WORKERS`` of their own, so a burst of slow /status
calls cannot starve the liveness probe. Bodies are read only up to their bound and only
with a ``Content-Length`` (411 without, 413 over, before a byte is read); the
/v1/requests body is validated strictly by ``requests_api.parse_spec`` after the token
is checked (401 before 422). Every refusal is JSON with a one-line ``error``.
``GET /openapi.json`` describes the API (``openapi.py``).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from autoscaler.service.http import openapi, ui
from autoscaler.service.http.handlers import ApiHandlers
from autoscaler.service.http.requests_api import MAX_BODY
from autoscaler.service.http.sessions import LoginThrottle, Sessions
from autoscaler.service.observe.metrics import CONTENT_TYPE

log = logging.getLogger(__name__)
WORKERS = 8
PROBE_WORKERS = 2
T = TypeVar("T")


class Refused(Exception):
    """Answer ``code`` with ``{"error": reason}`` (and ``headers``)."""

    def __init__(self, code: int, reason: str, headers: dict[str, str] | None = None):
        super().__init__(reason)
        self.code, self.reason, self.headers = code, reason, headers or {}


def answer(code: int, data: Any, headers: dict[str, str] | None = None) -> Response:
    # Not indented: with an indent Python's json takes its pure-Python encoder, 5x slower
    # (36 ms of a 1,000-node /status, benchmarks/bench_surfaces.py); `gpu-autoscaler
    # status` or `jq` show it to people.
    return Response(json.dumps(data, default=str).encode(), code,
                    {"Cache-Control": "no-store", **(headers or {})}, "application/json")


def page(result: ui.Page) -> Response:
    return Response(result.body, result.code, {"Cache-Control": "no-store", **result.headers},
                    result.ctype)


async def in_thread(request: Request, fn: Callable[..., T], *args: Any, probe: bool = False) -> T:
    """``fn(*args)`` on a bounded worker thread; a failure is a 500, logged with its
    traceback (a bug of ours, unlike every client error)."""
    limiter = request.app.state.probes if probe else request.app.state.workers
    try:
        return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)
    except Exception:
        log.exception("http %s %s failed", request.method, request.url.path)
        raise Refused(500, "internal error (see the service log)") from None


async def read_body(request: Request, limit: int) -> bytes:
    """At most ``limit`` bytes, announced by Content-Length (h11 has checked its syntax;
    uvicorn answered 400 to a malformed one). A body refused unread also ends the
    connection: the unread rest must not be taken for the next request."""
    close = {"Connection": "close"}
    text = request.headers.get("content-length")
    if text is None:
        raise Refused(411, f"a body of at most {limit} bytes with a Content-Length is "
                      "required", close)
    if not (text.isascii() and text.isdigit()):
        raise Refused(400, "Content-Length is not a number", close)
    if int(text) > limit:
        raise Refused(413, f"the body is larger than {limit} bytes", close)
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:  # h11 frames by Content-Length: cannot happen, but cheap
                raise Refused(413, f"the body is larger than {limit} bytes", close)
    except ClientDisconnect:
        log.debug("http client %s left before its body was sent", request.client)
        raise Refused(400, "the client went away", close) from None
    return bytes(body)


def _probes(api: ApiHandlers) -> APIRouter:
    router = APIRouter(tags=["probes"])

    @router.get("/healthz", summary="Liveness: 200 while the loop ticks, else 503 with why.",
                responses={503: {"description": "The loop has not ticked in time."}})
    async def healthz(request: Request) -> Response:
        health = await in_thread(request, api.health, probe=True)
        return answer(200 if health.ok else 503,
                      {"status": "ok" if health.ok else "unhealthy", "reason": health.reason})

    @router.get("/metrics", summary="Prometheus exposition of the service's metrics.")
    async def metrics(request: Request) -> Response:
        body = await in_thread(request, api.metrics, probe=True)
        return Response(body, 200, {"Cache-Control": "no-store"}, CONTENT_TYPE)

    return router


def _operator(api: ApiHandlers, token: str | None, sessions: Sessions,
              throttle: LoginThrottle) -> APIRouter:
    router = APIRouter(tags=["operator"])

    def authorized(request: Request) -> None:
        if token is None:
            return
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and value and hmac.compare_digest(value.encode(),
                                                                         token.encode()):
            return
        raise Refused(401, "a bearer token is required",
                      {"WWW-Authenticate": 'Bearer realm="gpu-autoscaler"'})

    @router.get("/status", summary="Fleet, last plan with reasons, policy errors, leader.")
    async def status(request: Request) -> Response:
        authorized(request)
        return answer(200, await in_thread(request, api.status))

    @router.get("/plan", summary="The last plan only.")
    async def plan(request: Request) -> Response:
        authorized(request)
        return answer(200, await in_thread(request, api.plan))

    @router.get("/ui", summary="The status page (bearer token or a signed-in session).")
    async def status_page(request: Request) -> Response:
        return page(await in_thread(request, ui.get, request.headers, token, sessions,
                                    api.status, api.links))

    @router.post("/ui/login", summary="Sign in with the API token (form field `token`).")
    async def login(request: Request) -> Response:
        form = await read_body(request, ui.MAX_FORM)
        client = request.client.host if request.client else "?"
        return page(ui.login(form, request.headers, client, token, sessions, throttle))

    @router.post("/ui/logout", summary="End the session.")
    async def logout(request: Request) -> Response:
        return page(ui.logout(request.headers, sessions))

    return router


def _requests(api: ApiHandlers) -> APIRouter:
    router = APIRouter(prefix="/v1/requests", tags=["capacity requests"])

    async def serve(request: Request, body: bytes = b"") -> Response:
        if api.requests is None:
            raise Refused(404, "capacity requests are not enabled (http.team_tokens)")
        code, data = await in_thread(request, api.requests, request.method, request.url.path,
                                     request.headers.get("authorization", ""), body)
        return answer(code, data)

    @router.post("", summary="Ask for capacity.", **openapi.CREATE)
    async def create(request: Request) -> Response:
        return await serve(request, await read_body(request, MAX_BODY))

    @router.get("", summary="The caller's team's requests.", **openapi.LIST)
    async def listing(request: Request) -> Response:
        return await serve(request)

    @router.get("/{request_id}", summary="One request with its condition and reason.",
                **openapi.ONE)
    async def one(request: Request, request_id: str) -> Response:
        return await serve(request)

    @router.delete("/{request_id}", summary="Release it (its nodes then drain).", **openapi.ONE)
    async def release(request: Request, request_id: str) -> Response:
        return await serve(request)

    return router


def _refusals(app: FastAPI) -> None:
    async def refused(request: Request, exc: Exception) -> Response:
        why = cast(Refused, exc)
        return answer(why.code, {"error": why.reason}, why.headers)

    async def routing(request: Request, exc: Exception) -> Response:
        http = cast(HTTPException, exc)  # 404 and 405 from the router
        return answer(http.status_code, {"error": str(http.detail).lower()},
                      dict(http.headers or {}))

    async def invalid(request: Request, exc: Exception) -> Response:
        return answer(422, {"error": "invalid request"})

    app.add_exception_handler(Refused, refused)
    app.add_exception_handler(HTTPException, routing)
    app.add_exception_handler(RequestValidationError, invalid)


def build_app(api: ApiHandlers, token: str | None, sessions: Sessions,
              throttle: LoginThrottle) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Limiters belong to the running event loop: made here, not at import.
        app.state.workers = anyio.CapacityLimiter(WORKERS)
        app.state.probes = anyio.CapacityLimiter(PROBE_WORKERS)
        yield

    app = FastAPI(title="gpu-autoscaler", version=openapi.VERSION, description=openapi.ABOUT,
                  docs_url=None, redoc_url=None, lifespan=lifespan)
    for router in (_probes(api), _operator(api, token, sessions, throttle), _requests(api)):
        app.include_router(router)
    _refusals(app)
    openapi.install(app)
    return app


__all__ = ["PROBE_WORKERS", "WORKERS", "build_app"]
