"""/ui over the real HTTP server: the token (bearer or login cookie), escaping, no secret."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from email.message import Message
from typing import Any

import pytest

from autoscaler.model.snapshot import PoolObservation, SpotScore
from autoscaler.service.http.api import ApiHandlers, ApiServer, Health
from autoscaler.service.http.status import build_status
from autoscaler.service.http.ui import COOKIE
from tests.builders import pending
from tests.service.service_fakes import make_loop

TOKEN = "s3cret-token-value-42"
EVIL = '<script>alert("x")</script>'


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kw: Any) -> None:
        return None


def call(url: str, data: bytes | None = None, headers: dict[str, str] | None = None):
    req = urllib.request.Request(url, data=data, headers=headers or {})
    opener = urllib.request.build_opener(NoRedirect)
    try:  # the headers as a Message: names are case-insensitive (the server sends lower case)
        with opener.open(req, timeout=10) as resp:
            return resp.status, resp.headers, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


@pytest.fixture
def server(tmp_path):
    kit = make_loop(tmp_path)
    kit.prices.scores = [SpotScore(cloud="aws", region="us-east-1", zone=zone, score=score,
                                   instance_types=["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"])
                         for zone, score in (("us-east-1a", 2), (f"us-east-1b{EVIL}", 9))]
    kit.signals.pools = {"vision/train": PoolObservation(pending=pending(1, 1))}
    kit.loop.tick()
    kit.signals.pools = {"vision/train": PoolObservation(metrics_missing=f"dcgm {EVIL} gone")}
    kit.loop.tick()

    from autoscaler.fleet.requests import RequestBook
    from autoscaler.model.request_spec import RequestSpec

    spec = RequestSpec.model_validate({"name": "ci-4711", "node_sets": [{"gpus": 1, "nodes": 2, "gpu_model": "V100"}]})
    RequestBook(kit.store).create("vision", spec, kit.clock())

    def status() -> dict[str, Any]:
        doc = build_status(kit.store, kit.loop.state, {"is_leader": True}, [], kit.loop.catalog,
                           kit.loop.last_snapshot, kit.clock())
        doc["policy_errors"] = [f"/policies/evil.yaml:1:1: team: bad name {EVIL}"]
        return doc

    handlers = ApiHandlers(health=lambda: Health(True, "ok"), metrics=lambda: b"", status=status,
                           plan=lambda: None, links=(("Fleet & money", "http://grafana:3000/d/x"),))
    api = ApiServer(handlers, "127.0.0.1", 0, token=TOKEN).start()
    yield api.url, kit
    api.stop()
    kit.store.close()


def test_without_the_token_the_page_is_a_login_form(server):
    url, _ = server
    code, headers, body = call(f"{url}/ui")
    assert code == 401 and 'action="/ui/login"' in body and 'type="password"' in body
    assert "vision-train" not in body
    assert "default-src 'none'" in headers["Content-Security-Policy"]


def test_the_bearer_token_shows_fleet_plan_reasons_holds_and_missing_data(server):
    url, kit = server
    code, headers, body = call(f"{url}/ui", headers={"Authorization": f"Bearer {TOKEN}"})
    assert code == 200 and headers["Content-Type"].startswith("text/html")
    assert "vision/train" in body and "vision-train-1" in body and "READY" in body
    plan_id, plan = kit.store.last_plan()
    assert f"Plan {plan_id}" in body
    for action in plan.actions:
        assert action.reason.replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;") in body
    assert "Holds" in body and "scale-down frozen" in body
    assert 'href="http://grafana:3000/d/x"' in body
    assert "request ci-4711 (team vision" in body and "Open capacity requests" in body
    # The last read's Spot placement scores, the low one with what it does.
    assert ("<td>aws us-east-1</td><td>us-east-1a</td><td>p3.16xlarge, p3.2xlarge, p3.8xlarge</td>"
            '<td class="num">2/10</td><td>low: tried after every other offer</td>') in body
    assert '<td class="num">9/10</td><td></td>' in body
    _, _, doc = call(f"{url}/status", headers={"Authorization": f"Bearer {TOKEN}"})
    assert [(r["zone"], r["score"], r["low"]) for r in json.loads(doc)["spot_scores"]] == [
        ("us-east-1a", 2, True), (f"us-east-1b{EVIL}", 9, False)]


def test_without_scores_the_page_says_why_none_are_shown(server):
    url, kit = server
    kit.prices.scores = []
    kit.loop.tick()
    _, _, body = call(f"{url}/ui", headers={"Authorization": f"Bearer {TOKEN}"})
    assert "None read (clouds.aws.spot_placement_scores is off" in body and "/10</td>" not in body


def login(url: str, token: str = TOKEN) -> tuple[int, Message]:
    """POST the form as the page's own browser would (same Origin)."""
    code, headers, _ = call(f"{url}/ui/login", data=f"token={token}".encode(),
                            headers={"Origin": url})
    return code, headers


def test_everything_shown_is_escaped_and_the_token_never_appears(server):
    url, _ = server
    _, _, body = call(f"{url}/ui", headers={"Authorization": f"Bearer {TOKEN}"})
    assert EVIL not in body and "<script" not in body
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in body
    cookie = login(url)[1]["Set-Cookie"].split(";", 1)[0]
    _, _, body = call(f"{url}/ui", headers={"Cookie": cookie})
    assert TOKEN not in body and cookie.split("=", 1)[1] not in body


def test_the_login_form_sets_a_cookie_that_is_not_the_token(server):
    # Changed on purpose (issue 30): the cookie is a random session of this login, no
    # longer an HMAC of the token; the form is posted with the page's Origin.
    url, _ = server
    code, _, body = call(f"{url}/ui/login", data=b"token=wrong", headers={"Origin": url})
    assert code == 401 and "not the one" in body
    code, headers = login(url)
    assert code == 303 and headers["Location"] == "/ui"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    value = cookie.split(";", 1)[0]
    assert value.startswith(f"{COOKIE}=") and len(value) > len(COOKIE) + 40
    code, _, body = call(f"{url}/ui", headers={"Cookie": value})
    assert code == 200 and "vision-train-1" in body
    code, _, _ = call(f"{url}/ui", headers={"Cookie": f"{COOKIE}=forged"})
    assert code == 401
    code, headers, _ = call(f"{url}/ui/logout", data=b"", headers={"Origin": url, "Cookie": value})
    assert code == 303 and "Max-Age=0" in headers["Set-Cookie"]


def test_a_huge_form_is_refused_unread(server):
    url, _ = server
    code, _, _ = call(f"{url}/ui/login", data=b"token=" + b"x" * 10_000)
    assert code == 413


def test_the_page_shows_what_status_carries_about_acting_each_empty_section_in_one_line():
    from autoscaler.service.http.ui import status_page

    quiet = status_page({"loop": {}}).body.decode()
    for line in ("No launch is backed off.", "No pool: missing instances are marked LOST.",
                 "None since the service started.", "Nothing to preview.",
                 "Every pending job has a pool whose nodes can run it."):
        assert line in quiet
    loop = {"launch_backoffs": [f"vision/train p3.2xlarge on-demand: InsufficientInstanceCapacity{EVIL}, "
                                "3 time(s) in a row; next try 12:40:00"],
            "step_errors": {"terraform": 2},
            "recent_errors": ["terraform apply vision/train: Error: UnauthorizedOperation"],
            "previews": ["preview vision/train: destroy 1; $/h 15.300 -> 12.240 (-3.060)"],
            "operations": ["apply vision/train since 12:01:02"],
            "reconcile_findings": ["unknown-instance i-0abc: tagged ours, not adopted"]}
    page = status_page({"loop": loop, "lost_frozen": {"vision/train": "4 of 6 instances missing"}}
                       ).body.decode()
    assert "3 time(s) in a row; next try 12:40:00" in page and EVIL not in page
    assert "terraform 2" in page and "UnauthorizedOperation" in page
    assert "<td>vision/train</td><td>4 of 6 instances missing</td>" in page
    assert "$/h 15.300 -&gt; 12.240 (-3.060)" in page
    assert "apply vision/train since 12:01:02" in page
    assert "unknown-instance i-0abc: tagged ours, not adopted" in page


def test_the_page_says_why_a_placement_was_chosen():
    from datetime import UTC, datetime

    from autoscaler.model.plan import PlacementChoice, Plan
    from autoscaler.service.http.ui import status_page

    why = "job j1: vision/east chosen: it fits on capacity already there or on its way"
    plan = Plan(decided_at=datetime(2026, 11, 30, tzinfo=UTC), placements=[PlacementChoice(
        job="j1", pool="vision/east", listed_under="vision/east",
        compared=["vision/east", "vision/west"], reason=why)])
    page = status_page({"last_plan": {"id": 1, "plan": plan.model_dump(mode="json")}}).body.decode()
    assert f"<td>vision/east<br>vision/west</td><td>{why}</td>" in page
