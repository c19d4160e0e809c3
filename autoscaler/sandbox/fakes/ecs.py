"""A fake Alibaba Cloud ECS RPC endpoint on 127.0.0.1 that checks request signatures.

The point is that the real SDK path runs in tests: aliyun-python-sdk-core signs each
request (HMAC-SHA1 over the canonicalized parameters, key = secret + "&"), and this
server recomputes the signature independently, per the documented RPC signature
algorithm, and refuses a wrong key or signature with the error ECS itself sends
(``InvalidAccessKeyId.NotFound`` 404, ``SignatureDoesNotMatch`` 400). Answers come from
an :class:`EcsState` (see ``fake_ecs_state``).

Run alone for the sandbox: ``python -m autoscaler.sandbox.fakes.ecs --port P --state FILE``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import threading
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

from autoscaler.sandbox.fakes.ecs_state import ApiError, EcsState
from autoscaler.sandbox.fakes.threaded_http import ThreadedHttpServer

log = logging.getLogger(__name__)

HOST_ID = "ecs.aliyuncs.com"
MAX_CLOCK_SKEW = timedelta(minutes=15)
_SIGNING_PARAMS = ("AccessKeyId", "Signature", "SignatureMethod", "SignatureVersion",
                   "SignatureNonce", "Timestamp")


def percent_encode(value: str) -> str:
    """RFC 3986 encoding the RPC signature uses: only A-Z a-z 0-9 - _ . ~ stay as they are."""
    return quote(value, safe="~")


def string_to_sign(method: str, params: dict[str, str]) -> str:
    canonical = "&".join(f"{percent_encode(k)}={percent_encode(v)}"
                         for k, v in sorted(params.items()) if k != "Signature")
    return f"{method}&{percent_encode('/')}&{percent_encode(canonical)}"


def sign(method: str, params: dict[str, str], secret: str) -> str:
    digest = hmac.new(f"{secret}&".encode(), string_to_sign(method, params).encode(),
                      hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


class _Verifier:
    """Checks one request's signing parameters against the state's keys."""

    def __init__(self, state: EcsState):
        self.state = state
        self._nonces: set[str] = set()
        self._lock = threading.Lock()

    def check(self, method: str, params: dict[str, str]) -> None:
        for name in _SIGNING_PARAMS:
            if not params.get(name):
                raise ApiError(400, "IncompleteSignature",
                               f"The request signature does not conform to Aliyun standards: "
                               f"missing {name}.")
        if params["SignatureMethod"] != "HMAC-SHA1" or params["SignatureVersion"] != "1.0":
            raise ApiError(400, "InvalidParameter.SignatureMethod",
                           "This fake endpoint verifies HMAC-SHA1, version 1.0 only.")
        with self.state.lock:
            secret = self.state.access_keys.get(params["AccessKeyId"])
        if secret is None:
            raise ApiError(404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
        expected = sign(method, params, secret)
        if not hmac.compare_digest(expected, params["Signature"]):
            raise ApiError(400, "SignatureDoesNotMatch",
                           "Specified signature is not matched with our calculation. server "
                           f"string to sign is:{string_to_sign(method, params)}")
        self._check_freshness(params)

    def _check_freshness(self, params: dict[str, str]) -> None:
        try:
            at = datetime.strptime(params["Timestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise ApiError(400, "InvalidTimeStamp.Format",
                           "Specified time stamp or date value is not well formatted.") from None
        # Real time, not the state's clock: the SDK stamps requests with the real time.
        if abs(datetime.now(UTC) - at) > MAX_CLOCK_SKEW:
            raise ApiError(400, "InvalidTimeStamp.Expired",
                           "Specified time stamp or date value is expired.")
        with self._lock:
            if params["SignatureNonce"] in self._nonces:
                raise ApiError(400, "SignatureNonceUsed", "Specified signature nonce was used already.")
            self._nonces.add(params["SignatureNonce"])


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _params(self) -> dict[str, str]:
        params = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if body and "x-www-form-urlencoded" in self.headers.get("Content-Type", ""):
            params.update(parse_qsl(body.decode(), keep_blank_values=True))
        return params

    def _serve(self, method: str) -> None:
        request_id = str(uuid.uuid4()).upper()
        params = self._params()
        try:
            self.server.verifier.check(method, params)
            result = self.server.state.answer(params.get("Action", ""), params)
            self._send(200, {"RequestId": request_id, **result})
        except ApiError as exc:
            if exc.code in ("SignatureDoesNotMatch", "InvalidAccessKeyId.NotFound"):
                with self.server.state.lock:
                    self.server.state.rejections.append(exc.code)
            self._send(exc.status, {"RequestId": request_id, "HostId": HOST_ID, "Code": exc.code,
                                    "Message": exc.message,
                                    "Recommend": f"https://api.aliyun.com/troubleshoot?q={exc.code}"})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        # The query string carries AccessKeyId: log the action and outcome only.
        action = dict(parse_qsl(urlsplit(self.path).query)).get("Action", "?")
        log.debug("fake-ecs %s %s: %s", self.command, action, args[1] if len(args) > 1 else "")


class _Server(ThreadingHTTPServer):
    def __init__(self, address: tuple[str, int], state: EcsState):
        super().__init__(address, _Handler)
        self.state = state
        self.verifier = _Verifier(state)


class FakeEcsServer(ThreadedHttpServer):
    """Serves ``state`` on 127.0.0.1 from a thread; use as a context manager."""

    def __init__(self, state: EcsState, host: str = "127.0.0.1", port: int = 0):
        if not host.startswith("127."):
            raise ValueError("the fake ECS endpoint only listens on loopback")
        self.state = state
        super().__init__(_Server((host, port), state), "fake-ecs", poll_interval=0.1)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake Alibaba Cloud ECS endpoint (sandbox)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True, help="JSON state file")
    args = parser.parse_args(argv)
    server = FakeEcsServer(EcsState.from_file(args.state), port=args.port)
    print(f"fake ECS listening on {server.endpoint}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
