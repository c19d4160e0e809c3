"""Hostile HTTP clients against the API as the service starts it (issue 30, classes 1, 5, 6).

* class 1, slow clients: 300 half-open connections and 10 clients sending one header
  byte every 2 s while /healthz and /metrics are probed; handled when every probe answered
  within 1 s, threads stayed bounded and the request deadline closed every stalled client;
* class 5, malformed requests: the table of tests/service/http/hostile.py (nested JSON,
  invalid UTF-8, huge numbers, coerced fields, broken Content-Length ...) and
  hypothesis-generated bodies, coerced fields, headers and Content-Lengths (``EXAMPLES``
  each); handled when the answer is the expected 4xx with a one-line reason;
* class 6, /ui sessions: replay after logout, another Origin, no Origin, repeated failed
  logins, expiry (on a server with an injected clock).

A case has a traceback when a log record during it carries one. ``run()`` returns the
Outcomes; ``healthz_p99_under_slow_clients_ms()`` runs class 1 alone and returns the p99 of
/healthz over it.

    PYTHONPATH=$PWD python3 benchmarks/hostile_http.py

prints one line per case and last ``cases=<n> handled=<m> tracebacks=<t>``.
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from autoscaler.service.app import Service
from autoscaler.service.http.api import ApiHandlers, ApiServer, Health
from autoscaler.service.http.routes import PROBE_WORKERS, WORKERS
from autoscaler.service.http.sessions import LoginThrottle, Sessions
from benchmarks.hostile_outcome import Outcome
from tests.requests.conftest import BODY, OPERATOR
from tests.service.http import hostile
from tests.service.http.slow_clients import slow_clients

SURFACE = "http"
EXAMPLES = 40  # generated examples per strategy
Address = tuple[str, int]


class Records(logging.Handler):
    """Every log record while the benchmark runs, to tell which case logged a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def traceback_since(self, mark: int) -> bool:
        return any(r.exc_info or "Traceback" in r.getMessage() for r in self.records[mark:])


@contextmanager
def watching() -> Iterator[Records]:
    root, records = logging.getLogger(), Records()
    level = root.level
    root.addHandler(records)
    root.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        root.removeHandler(records)
        root.setLevel(level)


def case(records: Records, name: str, check: Callable[[], bool]) -> Outcome:
    mark, started = len(records.records), time.monotonic()
    try:
        handled = check()
    except (OSError, AssertionError, ValueError) as exc:  # the client saw it fail
        logging.getLogger(__name__).info("case %s: %s", name, exc)
        handled = False
    return Outcome(SURFACE, name, handled, records.traceback_since(mark),
                   time.monotonic() - started)


# -- class 1 ---------------------------------------------------------------------------------
def _slow_clients(service: Service) -> tuple[bool, list[float]]:
    api = service.api
    assert api is not None
    run = slow_clients(api, half_open=300, trickling=10, every=2.0)
    handled = (run.still_open == 0 and max(run.latencies) < 1.0
               and run.most_threads <= WORKERS + PROBE_WORKERS
               and run.most_open <= api.server.limits.max_connections + 1)
    return handled, run.healthz


def p99_ms(seconds: list[float]) -> float:
    if len(seconds) < 2:
        return max(seconds, default=float("nan")) * 1000
    return statistics.quantiles(seconds, n=100, method="inclusive")[98] * 1000


def healthz_p99_under_slow_clients_ms() -> float:
    """300 half-open + 10 trickling clients against the service's API: /healthz p99, ms."""
    with tempfile.TemporaryDirectory() as root, hostile.running_service(Path(root)) as service:
        return p99_ms(_slow_clients(service)[1])


# -- class 5 ---------------------------------------------------------------------------------
def generated(strategy: st.SearchStrategy[Any], check: Callable[[Any], bool], name: str,
              records: Records) -> list[Outcome]:
    outcomes: list[Outcome] = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def each(value: Any) -> None:
        outcomes.append(case(records, f"{name} #{len(outcomes) + 1}", lambda: check(value)))

    each()
    return outcomes


def malformed(address: Address, records: Records) -> list[Outcome]:
    def send(data: bytes) -> hostile.Answer:
        return hostile.exchange(address, data)

    def refused(data: bytes, *codes: int, says: str = "") -> bool:
        reason = hostile.one_line_reason(send(data), codes)
        return reason is not None and says in reason

    def framing(data: bytes) -> bool:
        answer = send(data)
        return answer.code < 500 and (answer.code not in hostile.MALFORMED or hostile
                                      .one_line_reason(answer, hostile.MALFORMED) is not None)

    def coerced(values: tuple[Any, Any]) -> bool:
        gpus, dry_run = values
        body = json.dumps({**BODY, "dry_run": dry_run}).encode()
        return (refused(hostile.post_spec(hostile.with_node_set(gpus=gpus)), 422, says="gpus")
                and refused(hostile.post_spec(body), 422, says="dry_run"))

    outcomes = [case(records, f"malformed {c.case}",
                     lambda c=c: refused(c.data, c.code, says=c.says)) for c in hostile.CASES]
    outcomes += generated(hostile.BODIES, lambda b: refused(hostile.post_spec(b), 400, 422),
                          "generated body", records)
    outcomes += generated(st.tuples(hostile.NOT_A_GPU_COUNT, hostile.NOT_A_BOOL), coerced,
                          "generated coercion", records)
    outcomes += generated(st.tuples(hostile.PATHS, hostile.HEADER_NAME, hostile.HEADER_VALUE),
                          lambda v: framing(hostile.with_header(*v)), "generated header", records)
    outcomes += generated(st.tuples(hostile.PATHS, hostile.LENGTH),
                          lambda v: framing(hostile.with_length(*v)),
                          "generated content-length", records)
    return outcomes


# -- class 6 ---------------------------------------------------------------------------------
class Browser:
    """Posts forms to /ui as a page of ``origin`` would; never follows redirects."""

    class _Stay(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kw: Any) -> None:
            return None

    def __init__(self, url: str):
        self.url, self.opener = url, urllib.request.build_opener(self._Stay)

    def call(self, path: str, data: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        req = urllib.request.Request(self.url + path, data=data, headers=headers or {})
        try:
            with self.opener.open(req, timeout=5) as resp:
                resp.read()
                return resp.status, resp.headers
        except urllib.error.HTTPError as exc:
            exc.read()
            return exc.code, exc.headers

    def login(self, token: str = OPERATOR, origin: str | None = "") -> tuple[int, str]:
        headers = {} if origin is None else {"Origin": origin or self.url}
        code, got = self.call("/ui/login", f"token={token}".encode(), headers)
        return code, (got.get("Set-Cookie") or "").split(";", 1)[0]

    def logout(self, cookie: str, origin: str | None = "") -> int:
        headers = {"Cookie": cookie, **({} if origin is None else {"Origin": origin or self.url})}
        return self.call("/ui/logout", b"", headers)[0]

    def page(self, cookie: str) -> int:
        return self.call("/ui", headers={"Cookie": cookie})[0]


def sessions(url: str, records: Records) -> list[Outcome]:
    ui = Browser(url)

    def replay_after_logout() -> bool:
        _, cookie = ui.login()
        return ui.page(cookie) == 200 and ui.logout(cookie) == 303 and ui.page(cookie) == 401

    def random_per_login() -> bool:
        (_, a), (_, b) = ui.login(), ui.login()
        return bool(a) and a != b and OPERATOR not in a

    def logout_from_elsewhere() -> bool:
        _, cookie = ui.login()
        return ui.logout(cookie, "http://evil.example") == 403 and ui.page(cookie) == 200

    def guessing() -> bool:  # last: it leaves this client waiting
        codes = [ui.login("wrong-token-guess")[0] for _ in range(5)]
        return codes[:4] == [401] * 4 and codes[4] == 429

    return [case(records, "session replay after logout", replay_after_logout),
            case(records, "session random per login", random_per_login),
            case(records, "login from another origin",
                 lambda: ui.login(origin="http://evil.example")[0] == 403),
            case(records, "login without origin", lambda: ui.login(origin=None)[0] == 403),
            case(records, "logout from another origin", logout_from_elsewhere),
            case(records, "repeated failed logins", guessing)]


def expiry(records: Records) -> Outcome:
    """On a server whose session clock the benchmark moves."""
    now = [0.0]
    handlers = ApiHandlers(health=lambda: Health(True, "ok"), metrics=lambda: b"",
                           status=dict, plan=lambda: None)
    server = ApiServer(handlers, "127.0.0.1", 0, OPERATOR, sessions=Sessions(
        ttl=60, clock=lambda: now[0]), throttle=LoginThrottle()).start()
    try:
        ui = Browser(server.url)

        def expires() -> bool:
            _, cookie = ui.login()
            alive = ui.page(cookie) == 200
            now[0] += 60
            return alive and ui.page(cookie) == 401

        return case(records, "session expiry", expires)
    finally:
        server.stop()


def run() -> list[Outcome]:
    with watching() as records, tempfile.TemporaryDirectory() as root, \
            hostile.running_service(Path(root)) as service:
        assert service.api is not None
        outcomes = [case(records, "slow clients: 300 half-open + 10 trickling",
                         lambda: _slow_clients(service)[0])]
        # Before the malformed logins below, which count as failed logins of this client.
        outcomes += sessions(service.api.url, records)
        outcomes.append(expiry(records))
        outcomes += malformed(service.api.address, records)
        return outcomes


def main() -> None:
    outcomes = run()
    for o in outcomes:
        print(f"{o.surface} {o.case}: handled={o.handled} traceback={o.traceback} "
              f"seconds={o.seconds:.3f}")
    handled = sum(o.handled for o in outcomes)
    tracebacks = sum(o.traceback for o in outcomes)
    print(f"cases={len(outcomes)} handled={handled} tracebacks={tracebacks}")


if __name__ == "__main__":
    main()
