"""``/v1/requests``: capacity requests over HTTP, one bearer token per team.

* ``POST /v1/requests``        create (idempotent with ``idempotency_key``): 201, or 200 with
  the first request when the key was used before with the same body; 409 if the body differs.
* ``GET /v1/requests``         the caller's team's requests (the operator token sees all).
* ``GET /v1/requests/ID``      one request with its condition, reason, nodes and preview.
* ``DELETE /v1/requests/ID``   release it (its nodes then take the usual drain).

A team's token names the team: the body never does. Another team's request answers 403
for every verb, an unknown or missing token 401. Bodies are bounded (``MAX_BODY``) and
validated by :class:`~autoscaler.model.request_spec.RequestSpec` (strict: no coercion,
closed syntax, no extra keys): 400 for a body that is not JSON, 422 for one that is not a
request, each with a one-line ``error``; validation errors name the field, never echo the
input. A ``valid_until`` already past is refused by admission: kept as a Failed request, and
answered 422 (the body is at fault) where other refusals answer 201 Failed.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from autoscaler.catalog import Catalog
from autoscaler.engine.admission import Admission, admit, booked
from autoscaler.engine.settings import EngineSettings
from autoscaler.fleet.lease import Fenced
from autoscaler.fleet.requests import IdempotencyConflict, RequestBook
from autoscaler.model.request_spec import FINAL, Condition, RequestClass, RequestSpec, RequestView
from autoscaler.model.snapshot import ClusterQuota
from autoscaler.policy.models import TeamPolicy

MAX_BODY = 16 * 1024
PREFIX = "/v1/requests"
OPERATOR = "*operator*"  # the caller holding the service's own token: reads every team
Answer = tuple[int, Any]


class BadBody(ValueError):
    """A body refused before it reached the book: 400 (not JSON) or 422 (not a request)."""

    def __init__(self, code: int, answer: dict[str, Any]):
        super().__init__(answer["error"])
        self.code, self.answer = code, answer


def parse_spec(body: bytes) -> RequestSpec:
    """The strict spec from the raw body. pydantic's JSON parser bounds nesting, numbers
    and UTF-8 itself, so hostile JSON is a ValidationError here, never a RecursionError
    or a UnicodeDecodeError; its messages name the field and never echo the input."""
    try:
        return RequestSpec.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_input=False, include_url=False, include_context=False)
        syntax = [e for e in errors if e["type"] == "json_invalid"]
        if syntax:
            raise BadBody(400, {"error": f"the body is not JSON: {syntax[0]['msg']}"}) from None
        problems = [{"field": _field(e["loc"]), "problem": e["msg"]} for e in errors]
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise BadBody(422, {"error": f"invalid request: {first['field']}: {first['problem']}"
                                     f"{more}", "problems": problems}) from None


def _field(loc: tuple[int | str, ...]) -> str:
    """Where in the body, printable and bounded: an unknown key is the client's text (a key
    "\\n" made the one-line reason two lines)."""
    text = ".".join(map(str, loc)) or "(body)"
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= 64 else text[:61] + "..."


def view_json(view: RequestView) -> dict[str, Any]:
    return view.model_dump(mode="json", by_alias=True)


@dataclass
class RequestsApi:
    book: RequestBook
    tokens: Mapping[str, str]  # team -> token
    admit: Callable[[RequestView], Admission]
    clock: Callable[[], datetime]
    operator_token: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def caller(self, authorization: str) -> str | None:
        """The team whose token this is (or OPERATOR), compared in constant time."""
        scheme, _, value = authorization.partition(" ")
        value = value.strip()
        if scheme.lower() != "bearer" or not value:
            return None
        found = None
        for team, token in self.tokens.items():
            if hmac.compare_digest(value.encode(), token.encode()):
                found = team
        if self.operator_token and hmac.compare_digest(value.encode(), self.operator_token.encode()):
            found = OPERATOR
        return found

    def handle(self, method: str, path: str, authorization: str, body: bytes) -> Answer:
        team = self.caller(authorization)
        if team is None:
            return 401, {"error": "a team's bearer token is required"}
        rest = path[len(PREFIX):].strip("/")
        try:
            if method == "POST" and not rest:
                return self._create(team, body)
            if method == "GET" and not rest:
                views = self.book.list(None if team == OPERATOR else team)
                return 200, {"requests": [view_json(v) for v in views]}
            if method in ("GET", "DELETE") and rest and "/" not in rest:
                return self._one(method, team, rest)
        except Fenced:
            return 503, {"error": "this instance is not the leader: retry against the other"}
        if "/" in rest:
            return 404, {"error": "not found"}
        return 405, {"error": f"{method} is not supported here"}

    def _one(self, method: str, team: str, request_id: str) -> Answer:
        view = self.book.get(request_id)
        if view is None:
            return 404, {"error": f"no request {request_id}"}
        if team not in (view.team, OPERATOR):
            return 403, {"error": f"request {request_id} belongs to another team"}
        if method == "GET":
            return 200, view_json(view)
        if view.condition in FINAL:
            return 200, view_json(view)  # a retried release answers, it does not fail
        actor = "operator" if team == OPERATOR else f"team {team}"
        released = self.book.set_condition(
            request_id, Condition.RELEASED, self.clock(), f"{view.label()} released by "
            f"DELETE from {actor}" + ("; its nodes drain" if view.holds_nodes else ""),
            actor=actor)
        return 200, view_json(released)

    def _create(self, team: str, body: bytes) -> Answer:
        if team == OPERATOR:
            return 403, {"error": "requests are made with a team's token, not the operator's"}
        try:
            spec = parse_spec(body)
        except BadBody as exc:
            return exc.code, exc.answer
        with self._lock:  # one admission at a time, or two could spend the same quota
            try:
                made = self.book.create(team, spec, self.clock(), actor=f"team {team}")
            except IdempotencyConflict as exc:
                return 409, {"error": str(exc)}
            if not made.created:
                return 200, view_json(made.request)
            view, admission = self._decide(made.request)
            if admission.invalid:
                # Kept as a Failed request like any refusal, but the body is at fault.
                return 422, {"error": admission.reason, **view_json(view)}
            return 201, view_json(view)

    def _decide(self, view: RequestView) -> tuple[RequestView, Admission]:
        """Answer at once: refused (Failed), a check or dry run (answered and ended), or
        Accepted for the loop to provision."""
        admission = self.admit(view)
        now, preview = self.clock(), admission.preview()
        if not admission.ok:
            return self.book.set_condition(view.id, Condition.FAILED, now, admission.reason,
                                           preview=preview), admission
        view = self.book.set_condition(view.id, Condition.ACCEPTED, now, admission.reason,
                                       preview=preview)
        if view.spec.dry_run or view.spec.request_class is RequestClass.CHECK:
            kind = "dry run" if view.spec.dry_run else "check"
            view = self.book.set_condition(view.id, Condition.RELEASED, now,
                                           f"{kind}, nothing bought: {admission.reason}")
        return view, admission


def service_admitter(book: RequestBook, policies: Callable[[], Mapping[str, TeamPolicy]],
                     catalog: Catalog, settings: EngineSettings,
                     quotas: Callable[[], Mapping[str, ClusterQuota]]) -> Callable[[RequestView],
                                                                                     Admission]:
    """The engine's admission over the store's live fleet and the Accepted requests."""
    def admit_now(view: RequestView) -> Admission:
        live = policies()
        fleet = book.store.nodes()
        held = booked((r for r in book.list(include_final=False) if r.id != view.id), live,
                      catalog, fleet)
        return admit(view, live.get(view.team), catalog, fleet, settings, quotas(), held)
    return admit_now


__all__ = ["MAX_BODY", "PREFIX", "BadBody", "RequestsApi", "parse_spec", "service_admitter", "view_json"]
