"""The commands that talk to the service's HTTP API (``request create|wait|release|list``,
``status``) against a real server on 127.0.0.1 that answers what it should not: every
answer that is not the document asked for, and every bad argument, is one ``error:`` line
and exit status 1, never a traceback; a bad argument is refused before anything is sent."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.cli.service_api import MAX_ANSWER
from tests.hostile_answers import (
    BAD_ARGUMENTS,
    BAD_URLS,
    COMMANDS,
    HOSTILE,
    REQUEST_ID,
    TOKEN,
    TOKEN_ENV,
    AnswerServer,
    Reply,
    one_line_refusal,
    with_server,
)

runner = CliRunner()
ENV = {TOKEN_ENV: TOKEN, "COLUMNS": "80"}
FUZZ = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def server() -> Iterator[AnswerServer]:
    srv = AnswerServer().start()
    yield srv
    srv.stop()


def run(server: AnswerServer, argv: list[str]):
    return runner.invoke(app, with_server(argv, server.url), env=ENV)


@pytest.mark.exhausts_stack
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("answer", HOSTILE)
def test_a_hostile_answer_is_one_line_and_exit_1(server, command, answer):
    server.reply = HOSTILE[answer]
    result = run(server, COMMANDS[command])
    assert one_line_refusal(result.exit_code, result.output), result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "\x1b" not in result.output and "\u202e" not in result.output


def test_the_reasons_are_named(server):
    server.reply = HOSTILE["html-200"]
    assert "not JSON" in run(server, COMMANDS["request-list"]).output
    server.reply = HOSTILE["json-huge"]
    assert f"larger than {MAX_ANSWER // 2**20} MiB" in run(server, COMMANDS["status"]).output
    server.reply = HOSTILE["json-wrong-shape"]
    assert "unexpected answer: id" in run(server, COMMANDS["request-wait"]).output
    server.reply = HOSTILE["redirect"]
    assert "HTTP 302" in run(server, COMMANDS["request-list"]).output  # the token stays here
    server.reply = HOSTILE["unauthorized"]
    assert "bearer token" in run(server, COMMANDS["status"]).output


json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["id", "condition", "reason", "nodes", "requests", "loop", "fleet",
                         "leader", "error", "problems", "x"]), inner, max_size=5),
    max_leaves=12)
replies = st.builds(
    Reply,
    status=st.sampled_from([200, 201, 204, 400, 401, 403, 404, 409, 422, 500, 502, 503]),
    body=st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())),
    content_type=st.sampled_from(["application/json", "text/html", "text/plain"]))


@FUZZ
@given(reply=replies, command=st.sampled_from(sorted(COMMANDS)))
@example(reply=Reply(status=200, body=b'{"requests": []}', content_type="application/json"),
         command="request-list")
def test_a_generated_answer_is_used_if_it_is_the_document_else_refused_in_one_line(server, reply, command):
    server.reply = reply
    result = run(server, COMMANDS[command])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 0:
        # A generated answer can be the document asked for (hypothesis found {"requests": []}
        # with 200 for request-list): then it is used, and said without control characters.
        assert reply.status < 300 and json.loads(reply.body) is not None, result.output
        assert "\x1b" not in result.output and "\u202e" not in result.output
        return
    assert one_line_refusal(result.exit_code, result.output), result.output


@pytest.mark.parametrize("case", BAD_ARGUMENTS)
def test_bad_arguments_are_refused_before_anything_is_sent(server, case):
    before = server.hits
    result = run(server, BAD_ARGUMENTS[case])
    assert one_line_refusal(result.exit_code, result.output), result.output
    assert server.hits == before


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_bad_url_is_refused(url):
    result = runner.invoke(app, ["request", "list", "--url", url, "--token-env", TOKEN_ENV], env=ENV)
    assert one_line_refusal(result.exit_code, result.output), result.output


def _in_range(text: str, low: float, high: float) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and low <= value <= high


@FUZZ
@given(timeout=st.one_of(st.floats().map(repr), st.text(max_size=12)),
       poll=st.one_of(st.floats().map(repr), st.text(max_size=12)))
def test_generated_wait_options_out_of_range_are_refused_at_once(server, timeout, poll):
    assume(not (_in_range(timeout, 0, 7 * 86400) and _in_range(poll, 0.1, 3600)))
    before = server.hits
    result = run(server, ["request", "wait", REQUEST_ID, f"--timeout={timeout}", f"--poll={poll}"])
    assert one_line_refusal(result.exit_code, result.output), result.output
    assert server.hits == before


@FUZZ
@given(request_id=st.text(min_size=1, max_size=30).filter(lambda s: not s.startswith("-")))
def test_generated_request_ids_are_checked_before_use(server, request_id):
    assume(request_id != REQUEST_ID)
    before = server.hits
    result = run(server, ["request", "release", request_id])
    assert one_line_refusal(result.exit_code, result.output), result.output
    assert server.hits == before  # only a well-formed id reaches the server


def test_a_bad_token_is_refused_without_echoing_it(server):
    result = runner.invoke(app, with_server(COMMANDS["request-list"], server.url),
                           env={TOKEN_ENV: "line\nbreak-secret"})
    assert one_line_refusal(result.exit_code, result.output), result.output
    assert "secret" not in result.output
