"""The OpenAPI description served at ``GET /openapi.json``.

/v1/requests reads its body itself (the token is checked before the body is parsed, and
the body is parsed strictly from its bytes), so FastAPI cannot see the models in the
handlers' signatures: their JSON Schemas are put into ``components`` here, from the same
pydantic models that validate and serialise, and the operations refer to them.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field
from pydantic.json_schema import models_json_schema

from autoscaler.model.request_spec import RequestSpec, RequestView

VERSION = "1"
ABOUT = ("Keeps a cloud GPU fleet the right size. /status, /plan and /ui take the service's "
         "bearer token; /v1/requests a team's token (the operator's reads every team's).")


class Problem(BaseModel):
    field: str
    problem: str


class Refusal(BaseModel):
    """Every 4xx: a one-line ``error``; 422 lists each field's problem too."""

    error: str
    problems: list[Problem] = Field(default_factory=list)


class RequestList(BaseModel):
    requests: list[RequestView]


_REFS, _DEFS = models_json_schema(
    [(RequestSpec, "validation"), (RequestView, "serialization"), (RequestList, "serialization"),
     (Refusal, "serialization")], ref_template="#/components/schemas/{model}", by_alias=True)


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    mode: Literal["validation", "serialization"] = (
        "validation" if model is RequestSpec else "serialization")
    return {"description": description,
            "content": {"application/json": {"schema": _REFS[(model, mode)]}}}


_AUTH = {401: _json(Refusal, "No team's token."), 403: _json(Refusal, "Another team's request.")}
CREATE: dict[str, Any] = {
    "status_code": 201,
    "openapi_extra": {"requestBody": {"required": True, **_json(RequestSpec, "The request.")}},
    "responses": {
        200: _json(RequestView, "The first request made with this idempotency key."),
        201: _json(RequestView, "Made: Accepted, Failed (with the engine's reason) or, for a "
                                "check or dry run, Released."),
        400: _json(Refusal, "The body is not JSON."), **_AUTH,
        409: _json(Refusal, "The idempotency key was used with another body."),
        411: _json(Refusal, "No Content-Length."), 413: _json(Refusal, "The body is too large."),
        422: _json(Refusal, "The body is not a valid request (strict: no coercion)."),
    },
}
LIST: dict[str, Any] = {"responses": {200: _json(RequestList, "The requests."), **_AUTH}}
ONE: dict[str, Any] = {"responses": {200: _json(RequestView, "The request."), **_AUTH,
                                     404: _json(Refusal, "No such request.")}}


def install(app: FastAPI) -> None:
    """``app.openapi()`` with the request models in ``components.schemas``."""
    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(
                _DEFS.get("$defs", {}))
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = build  # type: ignore[method-assign]


__all__ = ["ABOUT", "CREATE", "LIST", "ONE", "VERSION", "install"]
