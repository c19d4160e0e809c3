"""/v1/requests on the real HTTP server of a built service: team tokens, 403 across teams,
idempotency, strict bounded bodies, previews, dry runs, refusals with the engine's numbers."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

from autoscaler.fleet.requests import RequestBook
from autoscaler.model.request_spec import Condition
from autoscaler.service.http.requests_api import MAX_BODY
from tests.requests.conftest import BODY, NLP, OPERATOR, VISION


def call(url: str, method: str = "GET", token: str | None = None, body: object = None,
         raw: bytes | None = None) -> tuple[int, dict]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_create_is_accepted_with_the_engines_reason_and_a_preview(service):
    url = service.api.url + "/v1/requests"
    code, made = call(url, "POST", VISION, BODY)
    assert code == 201 and made["team"] == "vision" and made["condition"] == "Accepted", made
    assert made["reason"] == ("request ci-4711 (team vision, atomic, 2 x 4 GPUs) accepted: "
                              "2 x p3.8xlarge in pool vision/train, +$24.48/h on-demand")
    code, got = call(f"{url}/{made['id']}", token=VISION)
    assert code == 200 and got["preview"]["hourly_usd_delta"] == 24.48
    assert [r["id"] for r in call(url, token=VISION)[1]["requests"]] == [made["id"]]
    assert call(url, token=NLP)[1]["requests"] == []  # nlp cannot see vision's
    assert [r["id"] for r in call(url, token=OPERATOR)[1]["requests"]] == [made["id"]]


def test_another_teams_token_is_refused_for_every_verb(service):
    url = service.api.url + "/v1/requests"
    rid = call(url, "POST", VISION, BODY)[1]["id"]
    assert call(f"{url}/{rid}", token=NLP)[0] == 403
    assert call(f"{url}/{rid}", "DELETE", NLP)[0] == 403
    assert call(url, "POST", NLP, {**BODY, "team": "vision"})[0] == 422  # the body names no team
    assert RequestBook(service.store).get(rid).condition is Condition.ACCEPTED
    for token in (None, "wrong-token-0123456789", VISION[:-1]):
        assert call(f"{url}/{rid}", token=token)[0] == 401
        assert call(f"{url}/{rid}", "DELETE", token)[0] == 401
        assert call(url, "POST", token, BODY)[0] == 401
        assert call(url, token=token)[0] == 401


def test_a_retried_create_with_the_same_idempotency_key_makes_one_request(service):
    url = service.api.url + "/v1/requests"
    body = {**BODY, "idempotency_key": "gha-run-881-attempt"}
    first, again = call(url, "POST", VISION, body), call(url, "POST", VISION, body)
    assert (first[0], again[0]) == (201, 200) and first[1]["id"] == again[1]["id"]
    assert call(url, "POST", VISION, {**body, "name": "ci-other"})[0] == 409
    assert len(RequestBook(service.store).list()) == 1


def test_delete_releases_once_and_is_audited(service):
    url = service.api.url + "/v1/requests"
    rid = call(url, "POST", VISION, BODY)[1]["id"]
    code, gone = call(f"{url}/{rid}", "DELETE", VISION)
    assert code == 200 and gone["condition"] == "Released"
    assert gone["reason"].endswith("released by DELETE from team vision")
    assert call(f"{url}/{rid}", "DELETE", VISION)[1]["condition"] == "Released"  # retry is fine
    audit = [(a.event, a.actor) for a in service.store.audit_log()]
    assert audit[-1] == ("request_released", "team vision")
    assert call(f"{url}/req-nothere", token=VISION)[0] == 404
    other = call(url, "POST", VISION, {**BODY, "name": "ci-4712"})[1]["id"]
    code, by_operator = call(f"{url}/{other}", "DELETE", OPERATOR)
    assert code == 200 and by_operator["reason"].endswith("released by DELETE from operator")


def test_quota_refusal_dry_run_and_check(service):
    url = service.api.url + "/v1/requests"
    code, big = call(url, "POST", VISION, {**BODY, "node_sets": [
        {"gpu_model": "V100", "gpus": 4, "nodes": 5}]})
    assert code == 201 and big["condition"] == "Failed"
    assert big["reason"].endswith("pool vision/train max_nodes 4 (holds 0, +5 would exceed)")
    code, dry = call(url, "POST", VISION, {**BODY, "dry_run": True})
    assert dry["condition"] == "Released" and dry["reason"].startswith("dry run, nothing bought")
    assert dry["preview"]["hourly_usd_delta"] == 24.48
    code, check = call(url, "POST", VISION, {**BODY, "name": "ci-check", "class": "check"})
    assert check["condition"] == "Released" and check["reason"].startswith("check, nothing bought")
    # An Accepted request books its nodes: a second one beyond max_nodes is refused.
    assert call(url, "POST", VISION, BODY)[1]["condition"] == "Accepted"
    second = call(url, "POST", VISION, {**BODY, "name": "ci-4712", "node_sets": [
        {"gpu_model": "V100", "gpus": 4, "nodes": 3}]})[1]
    assert second["condition"] == "Failed" and "(holds 2, +3 would exceed)" in second["reason"]


def test_a_valid_until_already_past_is_refused_with_422_and_nothing_is_booked(service):
    url = service.api.url + "/v1/requests"
    code, late = call(url, "POST", VISION, {**BODY, "valid_until": "1970-01-01T00:00:00Z"})
    assert code == 422 and late["condition"] == "Failed" and late["reason"] == late["error"]
    assert late["error"] == ("request ci-4711 (team vision, atomic, 2 x 4 GPUs) refused: "
                             "valid_until 1970-01-01T00:00:00+00:00 is not after now "
                             "(2026-11-30T12:00:00+00:00)")
    assert late["preview"]["add"] == []
    # Refused, it booked nothing: a request for the whole pool still fits.
    code, full = call(url, "POST", VISION, {**BODY, "name": "ci-4712", "node_sets": [
        {"gpu_model": "V100", "gpus": 4, "nodes": 4}], "valid_until": "2026-11-30T13:00:00Z"})
    assert code == 201 and full["condition"] == "Accepted"


def test_bodies_are_bounded_and_strict(service):
    url = service.api.url + "/v1/requests"
    assert call(url, "POST", VISION, raw=b"{not json")[0] == 400
    code, bad = call(url, "POST", VISION, {**BODY, "name": "$(reboot)", "extra": 1})
    assert code == 422 and {p["field"] for p in bad["problems"]} == {"name", "extra"}
    assert "$(reboot)" not in json.dumps(bad)  # errors never echo the input
    assert call(url, "POST", VISION, raw=b" " * (MAX_BODY + 1))[0] == 413
    assert call(url, "POST", OPERATOR, BODY)[0] == 403  # the operator is no team
    assert call(url + "/x/y", token=VISION)[0] == 404
    # A client that announces a huge body and sends none is answered at once, not read.
    host, port = service.api.address
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"POST /v1/requests HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     + VISION.encode() + b"\r\nContent-Length: 99999999\r\n\r\n")
        assert b" 413 " in sock.recv(200)
    assert RequestBook(service.store).list() == []


def test_status_lists_open_requests_without_secrets(service):
    url = service.api.url + "/v1/requests"
    body = {**BODY, "idempotency_key": "gha-run-990-attempt", "link": {"slurm_job": "4711"}}
    rid = call(url, "POST", VISION, body)[1]["id"]
    gone = call(url, "POST", VISION, {**BODY, "name": "ci-gone"})[1]["id"]
    call(f"{url}/{gone}", "DELETE", VISION)
    service.tick()
    service.tick()  # Provisioned
    assert call(service.api.url + "/status", token=VISION)[0] == 401  # operator's page only
    code, status = call(service.api.url + "/status", token=OPERATOR)
    assert code == 200
    (shown,) = status["requests"]  # the released one is not open
    view = RequestBook(service.store).get(rid)
    assert shown["id"] == rid and shown["condition"] == "Provisioned" and shown["tier"] == "high"
    assert shown["request"] == view.label() and shown["nodes"] == sorted(view.nodes)
    assert shown["release_at"] == (view.provisioned_at + view.spec.ttl).isoformat()
    text = json.dumps(status)
    for secret in (OPERATOR, VISION, NLP, "gha-run-990-attempt"):
        assert secret not in text
