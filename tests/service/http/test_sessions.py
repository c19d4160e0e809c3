"""/ui sessions: random per login, kept server-side with an expiry, revoked by logout;
login and logout check Origin; failed logins are throttled. Clocks are injected: no test
sleeps."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.service.http.api import ApiHandlers, ApiServer, Health
from autoscaler.service.http.sessions import LoginThrottle, Sessions, same_origin
from autoscaler.service.http.ui import COOKIE
from autoscaler.service.http.ui import login as ui_login
from tests.service.http.test_ui import call

TOKEN = "s3cret-token-value-42"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the pieces ----------------------------------------------------------------------------
def test_every_login_is_a_new_random_session_that_expires_or_is_closed():
    clock = FakeClock()
    sessions = Sessions(ttl=60, clock=clock)
    first, second = sessions.open(), sessions.open()
    assert first != second and len(first) >= 40 and sessions.valid(first) and sessions.valid(second)
    assert first not in repr(sessions._expiry)  # only digests are kept
    sessions.close(first)
    assert not sessions.valid(first) and sessions.valid(second)
    clock.now += 60
    assert not sessions.valid(second) and len(sessions) == 0
    assert not sessions.valid("") and not sessions.valid("forged")


def test_a_login_flood_evicts_the_oldest_sessions_not_memory():
    sessions = Sessions(limit=3, clock=FakeClock())
    ids = [sessions.open() for _ in range(5)]
    assert [sessions.valid(i) for i in ids] == [False, False, True, True, True]


def test_failed_logins_wait_longer_and_longer_per_client():
    clock = FakeClock()
    throttle = LoginThrottle(free=3, first=1, most=8, clock=clock)
    waits = []
    for _ in range(8):
        throttle.failed("10.0.0.1")
        waits.append(throttle.wait("10.0.0.1"))
    assert waits == [0, 0, 0, 1, 2, 4, 8, 8]
    assert throttle.wait("10.0.0.2") == 0  # another client is not held up
    clock.now += 8
    assert throttle.wait("10.0.0.1") == 0
    throttle.succeeded("10.0.0.1")
    throttle.failed("10.0.0.1")
    assert throttle.wait("10.0.0.1") == 0  # a success starts the count again


def test_the_throttle_forgets_the_oldest_clients_not_memory():
    throttle = LoginThrottle(free=0, limit=2, clock=FakeClock())
    for client in ("a", "b", "c"):
        throttle.failed(client)
    assert [throttle.wait(c) > 0 for c in ("a", "b", "c")] == [False, True, True]


@pytest.mark.parametrize(("origin", "host", "same"), [
    ("http://127.0.0.1:9464", "127.0.0.1:9464", True),
    ("https://autoscaler.example", "autoscaler.example", True),
    ("HTTP://Autoscaler.Example", "autoscaler.example", True),
    ("http://evil.example", "127.0.0.1:9464", False),
    ("http://127.0.0.1:9465", "127.0.0.1:9464", False),
    ("null", "127.0.0.1:9464", False),
    (None, "127.0.0.1:9464", False),
    ("http://", "", False),
])
def test_same_origin(origin, host, same):
    headers = {"Host": host, **({"Origin": origin} if origin is not None else {})}
    assert same_origin(headers) is same


# -- over the real server ------------------------------------------------------------------
@pytest.fixture
def ui() -> Iterator[tuple[str, FakeClock, Sessions]]:
    clock = FakeClock()
    sessions = Sessions(ttl=3600, clock=clock)
    handlers = ApiHandlers(health=lambda: Health(True, "ok"), metrics=lambda: b"",
                           status=dict, plan=lambda: None)
    server = ApiServer(handlers, "127.0.0.1", 0, TOKEN, sessions=sessions,
                       throttle=LoginThrottle(clock=clock)).start()
    yield server.url, clock, sessions
    server.stop()


def login(url: str, token: str = TOKEN, origin: str | None = "") -> tuple[int, str | None]:
    """(code, cookie) of a login posted with the page's Origin (or ``origin``)."""
    headers = {} if origin is None else {"Origin": origin or url}
    code, answer, _ = call(f"{url}/ui/login", data=f"token={token}".encode(), headers=headers)
    cookie = answer.get("Set-Cookie")
    return code, cookie.split(";", 1)[0] if cookie else None


def page(url: str, cookie: str) -> int:
    return call(f"{url}/ui", headers={"Cookie": cookie})[0]


def test_each_login_gets_its_own_session_and_logout_revokes_it(ui):
    url, _, sessions = ui
    (code, first), (_, second) = login(url), login(url)
    assert code == 303 and first and second and first != second
    assert first.startswith(f"{COOKIE}=") and second.startswith(f"{COOKIE}=")
    assert page(url, first) == page(url, second) == 200
    code, answer, _ = call(f"{url}/ui/logout", data=b"", headers={"Origin": url, "Cookie": first})
    assert code == 303 and "Max-Age=0" in answer["Set-Cookie"]
    assert page(url, first) == 401  # the replayed cookie is refused: the session is gone
    assert page(url, second) == 200 and len(sessions) == 1


def test_the_login_page_lets_the_browser_send_its_origin(ui):
    """Under Referrer-Policy no-referrer a browser posts the form with ``Origin: null``,
    which the check refuses: the headless-Chromium test could not sign in."""
    url, _, _ = ui
    code, answer, _ = call(f"{url}/ui")
    assert code == 401 and answer["Referrer-Policy"] == "same-origin"


def test_a_session_expires(ui):
    url, clock, _ = ui
    _, cookie = login(url)
    assert cookie and page(url, cookie) == 200
    clock.now += 3600
    assert page(url, cookie) == 401


@pytest.mark.parametrize("origin", [None, "http://evil.example", "null"])
def test_login_and_logout_from_another_origin_are_refused(ui, origin):
    url, _, _ = ui
    assert login(url, origin=origin) == (403, None)
    _, cookie = login(url)
    headers = {"Cookie": cookie, **({"Origin": origin} if origin else {})}
    assert call(f"{url}/ui/logout", data=b"", headers=headers)[0] == 403
    assert page(url, cookie) == 200  # a cross-site form cannot sign the operator out


def test_repeated_failed_logins_are_slowed_down(ui):
    url, clock, _ = ui
    for _ in range(4):
        assert login(url, "wrong-token")[0] == 401
    code, answer, body = call(f"{url}/ui/login", data=f"token={TOKEN}".encode(),
                              headers={"Origin": url})
    assert code == 429 and answer["Retry-After"] == "1" and "Too many" in body
    clock.now += 1
    code, cookie = login(url)  # the right token after the wait: in, and the count restarts
    assert code == 303 and cookie and page(url, cookie) == 200
    assert login(url, "wrong-token")[0] == 401


def test_a_form_with_more_fields_than_a_sign_in_is_400_and_not_a_failed_attempt(ui):
    """parse_qs's field limit raised out of the route: a 500 and a traceback."""
    url, _, _ = ui
    form = "&".join(f"f{i}=x" for i in range(9)) + f"&token={TOKEN}"
    for _ in range(5):  # more than the throttle lets fail in a row
        code, _, body = call(f"{url}/ui/login", data=form.encode(), headers={"Origin": url})
        assert code == 400 and "too many form fields" in body
    assert login(url)[0] == 303


@settings(max_examples=80, deadline=None)
@given(form=st.binary(max_size=200) | st.lists(
    st.tuples(st.text(max_size=6), st.text(max_size=6)), max_size=16).map(
        lambda pairs: "&".join(f"{k}={v}" for k, v in pairs).encode()))
def test_any_form_from_the_page_is_a_sign_in_or_a_refusal(form: bytes) -> None:
    clock = FakeClock()
    answer = ui_login(form, {"Origin": "http://h", "Host": "h"}, "c", TOKEN,
                      Sessions(ttl=60, clock=clock), LoginThrottle(clock=clock))
    assert answer.code in (303, 400, 401), answer
