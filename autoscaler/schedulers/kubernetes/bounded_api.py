"""A Kubernetes API client whose every call ends within a limit (``autoscaler/bounded.py``).

The official client's ``_request_timeout`` bounds the connect and each socket read, not
the whole answer: an API server (or proxy) that sends its headers and then a byte a second
held the drainer's cordons and evictions (an executor worker, or the tick on the spot-notice
path) and the tick's request-link checks for ever. Here each call, its answer's body
included, runs within its limit, at most one call per client is left running past it, and
an overrun is a urllib3 ``HTTPError``: what every caller already handles as an unreachable
API server. Not for watches, whose streams are meant to stay open: the reader's informers
use a plain client (``client.api_client(cfg, bounded=False)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from kubernetes import client
from urllib3.exceptions import HTTPError
from urllib3.util.retry import Retry

from autoscaler.bounded import Bound, Overran

T = TypeVar("T")


class ApiCallOverran(Overran, HTTPError):
    """A call that did not end within its limit, or not sent because one that overran
    still runs: a urllib3 ``HTTPError``, so callers treat it as an unreachable API server."""


def attempts(retries: Any) -> int:
    """How many times urllib3 may send one request with ``Configuration.retries``: once for
    False or 0 (this project's host + token clients), 4 for None (kubeconfig clients:
    urllib3's default of 3 retries)."""
    if retries is None or retries is True:
        retries = Retry.DEFAULT
    total = retries.total if isinstance(retries, Retry) else retries
    if total is False:
        return 1
    if isinstance(total, int):
        return 1 + max(0, total)
    return 1 + (Retry.DEFAULT.total or 0)  # counted per kind of error: as many as the default


def call_limit(request_timeout: Any, default_s: float, retries: Any) -> float:
    """The longest one call may take before it is given up on, from the call's own
    ``_request_timeout`` (``default_s``, the configured ``timeout``, when it has none).
    Per attempt: a single number ``t`` bounds the connect and the wait for the headers
    (urllib3's total), and the body may take as long again, so ``2 t``; a ``(connect,
    read)`` pair gives ``connect + 2 read``. Times the attempts ``retries`` allows
    (urllib3 waits nothing between them unless a server asks, and that wait is what this
    limit is for). 20 s for the default 10 s timeout and no retries."""
    t: Any = request_timeout or default_s
    pair = isinstance(t, tuple) and len(t) == 2
    per_attempt = float(t[0]) + 2 * float(t[1]) if pair else 2 * float(t)
    return attempts(retries) * per_attempt


class BoundedApiClient(client.ApiClient):
    """``client.ApiClient`` whose ``call_api`` (every API method's one request) reads the
    whole answer within :func:`call_limit` on a thread of its own; a call that overran and
    still runs makes the next calls of this client fail at once (:class:`ApiCallOverran`)
    instead of piling up threads. ``_preload_content=False`` callers get the response with
    its body already read (``.data``)."""

    def __init__(self, configuration: client.Configuration, timeout_s: float) -> None:
        super().__init__(configuration)
        self.timeout_s = timeout_s
        self.bound = Bound("kubernetes-call")

    def call_api(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> Any:
        limit = call_limit(kwargs.get("_request_timeout"), self.timeout_s,
                           self.configuration.retries)
        send = super().call_api

        def whole() -> Any:
            answer = send(method, url, *args, **kwargs)
            # The body too, within the limit; the response keeps it for the caller.
            answer.read()  # type: ignore[no-untyped-call]
            return answer

        # The path only: the query may hold selectors, and a message needs none of it.
        return self.within(limit, whole, f"kubernetes {method} {urlsplit(str(url)).path}")

    def within(self, limit: float, fn: Callable[[], T], what: str) -> T:
        """``fn()`` within ``limit`` seconds, counted as one of this client's calls (one
        that overran and still runs stops the others): for what does not go through
        ``call_api``, such as an exec's WebSocket."""
        try:
            return self.bound.call(self.configuration.host, limit, fn, what)
        except Overran as exc:
            raise ApiCallOverran(str(exc), limit=exc.limit,
                                 still_running=exc.still_running) from None
