"""The ``pods/exec`` subresource of ``FakeKube``: enough WebSocket for the official client.

The client upgrades ``GET .../pods/NAME/exec?command=...&container=...`` to a WebSocket
with the ``v4.channel.k8s.io`` subprotocol; each binary frame's first byte is the
channel (1 stdout, 2 stderr, 3 the final status). The fake records the command in
``FakeKube.execs`` (it runs nothing), answers with the status (``exec_exit_codes`` makes
a pod's commands fail), and closes. A missing pod is a plain 404 before the upgrade.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import struct
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

if TYPE_CHECKING:
    from autoscaler.sandbox.fakes.kube import FakeKube
    from autoscaler.sandbox.fakes.kube_http import Request

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _frame(opcode: int, payload: bytes) -> bytes:
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack(">H", n)
    else:
        head += bytes([127]) + struct.pack(">Q", n)
    return head + payload


def serve_exec(handler: BaseHTTPRequestHandler, kube: FakeKube, req: Request) -> None:
    query = parse_qs(urlparse(handler.path).query)
    command, container = query.get("command", []), (query.get("container") or [""])[0]
    offered = [p.strip() for p in handler.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    protocol = next((p for p in offered if p == "v4.channel.k8s.io"), offered[0] if offered else "")
    accept = base64.b64encode(hashlib.sha1(
        (handler.headers.get("Sec-WebSocket-Key", "") + GUID).encode()).digest()).decode()
    handler.send_response(101, "Switching Protocols")
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", accept)
    if protocol:
        handler.send_header("Sec-WebSocket-Protocol", protocol)
    handler.end_headers()
    with kube.store.lock:
        kube.execs.append((req.key, container, command))
        code = kube.exec_exit_codes.get(req.key, 0)
    status: dict[str, Any] = {"metadata": {}, "status": "Success"}
    if code:
        status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                  "message": f"command terminated with non-zero exit code: {code}",
                  "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        handler.wfile.write(_frame(0x2, b"\x03" + json.dumps(status).encode()))
        handler.wfile.write(_frame(0x8, struct.pack(">H", 1000)))
        handler.wfile.flush()
    handler.close_connection = True
