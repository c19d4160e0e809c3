"""The command line's one door to the service's HTTP API (``request ...``, ``status``).

Whatever comes back that is not the JSON document asked for ends the command with one
``error:`` line and exit status 1: no connection, an HTTP error (its ``error`` and
``problems`` shown when the body has them), a body that is not JSON, one over
``MAX_ANSWER`` bytes or slower than the deadline, a redirect (it would carry the token
elsewhere), or a document of the wrong shape (``shaped``). Text from the server is cut to
one printable line before anyone sees it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import time
import urllib.error
import urllib.request
from typing import Annotated, Any, NoReturn, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from autoscaler.cli.common import fail

MAX_ANSWER = 8 * 1024 * 1024  # /status of a 1,000-node fleet is ~1 MB
DEADLINE_S = 30.0  # connect, send and read the whole answer
CHUNK = 64 * 1024
M = TypeVar("M", bound=BaseModel)


def one_line(text: str, limit: int = 300) -> str:
    """Server text as one printable line: no newline, escape or bidi control survives."""
    clean = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return clean if len(clean) <= limit else clean[:limit - 1] + "…"


Line = Annotated[str, AfterValidator(one_line)]


class Answer(BaseModel):
    """A document the service sends: the fields the CLI reads, typed; the rest ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class Problem(Answer):
    field: Line = ""
    problem: Line = ""


class ErrorAnswer(Answer):
    error: Line = ""
    problems: list[Problem] = Field(default_factory=list)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is raised as an HTTPError


_OPENER = urllib.request.build_opener(_NoRedirects)


def token_from(env: str) -> str:
    """The bearer token in environment variable ``env`` (never echoed)."""
    token = os.environ.get(env)
    if not token:
        fail(f"environment variable {env} is not set (the team's token)")
    if not all(c.isprintable() and not c.isspace() for c in token) or not token.isascii():
        fail(f"environment variable {env} does not hold a bearer token (printable ASCII, "
             "no spaces)")
    return token


def call(url: str, method: str, path: str, token: str | None = None,
         body: dict[str, Any] | None = None, deadline_s: float = DEADLINE_S) -> Any:
    """The JSON value the service answers ``method url+path`` with."""
    where = f"{method} {path}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    deadline = time.monotonic() + deadline_s
    try:
        with _OPENER.open(req, timeout=min(10.0, deadline_s)) as resp:
            raw = _read(resp, deadline, where)
            kind = resp.headers.get("Content-Type") or "no content type"
    except urllib.error.HTTPError as exc:
        _http_error(exc, deadline, where)
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc.__class__.__name__
        fail(f"{where}: cannot reach the service at {url}: {one_line(str(reason))}")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        fail(f"{where}: the answer is not JSON ({len(raw)} bytes, {one_line(kind, 60)})")


def shaped(model: type[M], answer: Any, where: str) -> M:
    """``answer`` as ``model``, or one line naming the first field that is wrong."""
    try:
        return model.model_validate(answer)
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False)[0]
        field = ".".join(map(str, first["loc"])) or "the document"
        fail(f"{where}: unexpected answer: {one_line(field, 80)}: {first['msg']}")


def _read(resp: Any, deadline: float, where: str) -> bytes:
    chunks, size = [], 0
    while chunk := resp.read1(CHUNK):
        size += len(chunk)
        if size > MAX_ANSWER:
            fail(f"{where}: the answer is larger than {MAX_ANSWER // 1024 // 1024} MiB")
        if time.monotonic() > deadline:
            fail(f"{where}: the answer took longer than {DEADLINE_S:g}s")
        chunks.append(chunk)
    return b"".join(chunks)


def _http_error(exc: urllib.error.HTTPError, deadline: float, where: str) -> NoReturn:
    detail = ErrorAnswer()
    # An error page that is not ours (a proxy's HTML): the status says enough.
    with contextlib.suppress(ValueError, RecursionError, OSError, http.client.HTTPException):
        detail = ErrorAnswer.model_validate(json.loads(_read(exc, deadline, where)))
    problems = "; ".join(f"{p.field}: {p.problem}" for p in detail.problems[:5])
    hint = " (the service wants a bearer token: --token-env NAME)" if exc.code == 401 else ""
    fail(one_line(f"{where}: HTTP {exc.code}: {detail.error} {problems}", 500) + hint)
