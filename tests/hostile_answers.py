"""A small real HTTP server on 127.0.0.1 that answers what a test tells it to (HTML, bytes
that are not text, a 500 page, JSON of the wrong shape, 9 MiB of JSON, a redirect), and
the command lines that talk to the service's API. Shared by tests/cli/test_service_answers.py
and benchmarks/hostile_cli.py."""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REQUEST_ID = "req-0123456789ab"
TOKEN_ENV = "GAS_HOSTILE_TOKEN"
TOKEN = "hostile-token-0123456789"


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


# Answers no command may take for a document: each must end it in one line, exit 1.
HOSTILE: dict[str, Reply] = {
    "html-200": Reply(200, b"<html><body>Welcome to nginx!</body></html>", "text/html"),
    "html-500": Reply(500, b"<html><body>500 Internal Server Error</body></html>", "text/html"),
    "garbage-bytes": Reply(200, bytes(range(256)) * 4, "application/octet-stream"),
    "empty-200": Reply(200, b""),
    "json-wrong-shape": Reply(200, json.dumps({"id": 5, "condition": [], "requests": "x"}).encode()),
    "json-list": Reply(200, b"[1, 2, 3]"),
    "json-nan": Reply(200, b'{"loop": {"ticks": NaN}, "fleet": {}, "leader": {}, "id": NaN}'),
    "json-deep": Reply(200, b"[" * 200_000 + b"]" * 200_000),
    "json-huge": Reply(200, b'{"requests": [' + b'"x",' * 2_500_000 + b'"x"]}'),
    "json-error-shape": Reply(422, b'{"error": ["not", "text"], "problems": 7}'),
    "escape-codes": Reply(503, json.dumps({"error": "\x1b[2J\x1b]0;pwned\x07\nline two\u202e"}).encode()),
    "redirect": Reply(302, b"", "text/plain", (("Location", "http://127.0.0.1:1/elsewhere"),)),
    "unauthorized": Reply(401, b'{"error": "a bearer token is required"}'),
}

COMMANDS: dict[str, list[str]] = {
    "request-list": ["request", "list"],
    "request-wait": ["request", "wait", REQUEST_ID, "--timeout", "5", "--poll", "0.1"],
    "request-release": ["request", "release", REQUEST_ID],
    "request-create": ["request", "create", "--name", "ci-1", "--gpus", "1", "--gpu-model", "V100"],
    "status": ["status"],
}


def with_server(argv: list[str], url: str) -> list[str]:
    token = ["--token-env", TOKEN_ENV]
    return [*argv, "--url", url, *token]


# Arguments refused before anything is sent.
BAD_ARGUMENTS: dict[str, list[str]] = {
    "wait-id-with-spaces": ["request", "wait", "a b c"],
    "wait-id-path": ["request", "wait", "../../status"],
    "release-id-query": ["request", "release", "req-0123456789ab?x=1"],
    "wait-poll-negative": ["request", "wait", REQUEST_ID, "--poll", "-1"],
    "wait-poll-zero": ["request", "wait", REQUEST_ID, "--poll", "0"],
    "wait-timeout-nan": ["request", "wait", REQUEST_ID, "--timeout", "nan"],
    "wait-timeout-inf": ["request", "wait", REQUEST_ID, "--timeout", "inf"],
    "wait-timeout-negative": ["request", "wait", REQUEST_ID, "--timeout", "-1"],
    "wait-timeout-text": ["request", "wait", REQUEST_ID, "--timeout", "soon"],
    "create-gpus-zero": ["request", "create", "--name", "ci-1", "--gpus", "0"],
    "create-nodes-huge": ["request", "create", "--name", "ci-1", "--gpus", "1", "--nodes", "1e9"],
}
BAD_URLS = ["file:///etc/passwd", "http://a b", "ftp://host", "http://127.0.0.1:99999", "127.0.0.1:9464",
            "http://"]


@dataclass
class AnswerServer:
    """Answers every request with ``reply``; counts the requests it got."""

    reply: Reply = field(default_factory=Reply)
    hits: int = 0
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> AnswerServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                owner.hits += 1
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(min(length, 1 << 20))
                r = owner.reply
                self.send_response(r.status)
                self.send_header("Content-Type", r.content_type)
                self.send_header("Content-Length", str(len(r.body)))
                for name, value in r.headers:
                    self.send_header(name, value)
                self.end_headers()
                # The client stops reading a body over its limit.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(r.body)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)


def one_line_refusal(exit_code: int | None, output: str) -> bool:
    """Exit status 1, one ``error:`` line, no traceback."""
    lines = [line for line in output.splitlines() if line.strip()]
    return (exit_code == 1 and len(lines) == 1 and lines[0].startswith("error:")
            and "Traceback" not in output)
