"""A small fake Kubernetes API server for tests: nodes, pods, cordon, eviction with PDBs.

The official ``kubernetes`` client works against it unchanged::

    with FakeKube() as kube:
        kube.add_node("gpu-1", gpus=4)
        kube.add_pod("train-0", "vision", node="gpu-1", gpus=2)
        kube.add_pod("train-1", "vision", gpus=4, unschedulable=True)
        kube.refuse_evictions("vision/train-0", times=2)   # 429 twice, then evicted
        api = kube.core_v1()                                # kubernetes.client.CoreV1Api

Served: ``GET /api/v1/nodes[/NAME]``, ``PATCH /api/v1/nodes/NAME`` (merge, strategic-merge
or JSON patch: ``spec.unschedulable``, labels), ``GET /api/v1/pods`` and
``/api/v1/namespaces/NS/pods[/NAME]`` (``fieldSelector`` on ``spec.nodeName``,
``status.phase``, ``metadata.namespace`` with ``=``/``!=``; equality ``labelSelector``),
``DELETE`` a pod, and ``POST .../pods/NAME/eviction``, which answers 429
``TooManyRequests`` while a refusal count or a PodDisruptionBudget (``add_pdb``) forbids
it. List/watch streaming is not implemented. Every request is recorded in ``requests``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from autoscaler.sandbox.fake_kube_objects import (
    Pdb,
    apply_patch,
    matches_fields,
    matches_labels,
    node_object,
    pod_object,
    status_object,
    timestamp,
)


class FakeKube:
    """State plus HTTP server (127.0.0.1, free port, own thread); a context manager."""

    def __init__(self, port: int = 0):
        self._lock = threading.RLock()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # "ns/name" -> pod
        self.pdbs: list[Pdb] = []
        self.refusals: dict[str, int] = {}
        self.evicted: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self._version = 1
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    # ------------------------------------------------------------ Python API

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def add_node(self, name: str, gpus: int = 4, labels: dict[str, str] | None = None,
                 ready: bool = True, unschedulable: bool = False) -> dict[str, Any]:
        with self._lock:
            self.nodes[name] = node_object(name, gpus, labels or {}, ready, unschedulable,
                                           self._next_version())
            return copy.deepcopy(self.nodes[name])

    def set_node_ready(self, name: str, ready: bool) -> None:
        with self._lock:
            for cond in self.nodes[name]["status"]["conditions"]:
                if cond["type"] == "Ready":
                    cond["status"] = "True" if ready else "False"

    def remove_node(self, name: str) -> None:
        with self._lock:
            self.nodes.pop(name, None)

    def add_pod(self, name: str, namespace: str = "default", node: str | None = None,
                gpus: float = 1, phase: str | None = None, unschedulable: bool | None = None,
                labels: dict[str, str] | None = None, node_selector: dict[str, str] | None = None,
                affinity: dict[str, Any] | None = None,
                created_at: datetime | None = None) -> dict[str, Any]:
        """A pod; bound to ``node`` (Running) or Pending, Unschedulable unless told not."""
        if unschedulable is None:
            unschedulable = node is None
        with self._lock:
            pod = pod_object(name, namespace, node, gpus, phase, unschedulable, labels or {},
                             node_selector or {}, affinity, created_at or datetime.now(UTC),
                             self._next_version())
            self.pods[f"{namespace}/{name}"] = pod
            return copy.deepcopy(pod)

    def bind_pod(self, key: str, node: str) -> None:
        """The scheduler placed a pending pod: it runs on ``node``."""
        with self._lock:
            pod = self.pods[key]
            pod["spec"]["nodeName"] = node
            pod["status"] = {"phase": "Running", "startTime": timestamp(),
                             "conditions": [{"type": "PodScheduled", "status": "True"}]}

    def refuse_evictions(self, key: str, times: int) -> None:
        """Answer the next ``times`` evictions of pod ``namespace/name`` with 429."""
        with self._lock:
            self.refusals[key] = times

    def add_pdb(self, name: str, namespace: str, match_labels: dict[str, str],
                min_available: int = 1) -> None:
        """A PodDisruptionBudget: evictions that would leave fewer matching Running pods
        than ``min_available`` are refused with 429."""
        with self._lock:
            self.pdbs.append(Pdb(name, namespace, match_labels, min_available))

    def cordoned(self, name: str) -> bool:
        with self._lock:
            return bool(self.nodes[name]["spec"].get("unschedulable", False))

    def core_v1(self) -> Any:
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return client.CoreV1Api(client.ApiClient(cfg))

    def start(self) -> FakeKube:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --------------------------------------------------------------- handlers

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _list(self, kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": kind, "items": items,
                "metadata": {"resourceVersion": str(self._version)}}

    def handle(self, method: str, path: str, query: dict[str, list[str]],
               body: Any, ctype: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append((method, path))
            parts = [p for p in path.split("/") if p][2:]  # drop "api", "v1"
            fields = query.get("fieldSelector", [""])[0]
            labels = query.get("labelSelector", [""])[0]
            if parts[:1] == ["nodes"]:
                return self._nodes(method, parts[1:], body, ctype, labels)
            if parts[:1] == ["pods"] and method == "GET":
                return 200, self._list("PodList", self._pods(None, fields, labels))
            if len(parts) >= 3 and parts[0] == "namespaces" and parts[2] == "pods":
                return self._namespaced_pods(method, parts[1], parts[3:], fields, labels)
            return 404, status_object(404, "NotFound", f"{path} is not served by FakeKube")

    def _nodes(self, method: str, rest: list[str], body: Any, ctype: str,
               labels: str) -> tuple[int, dict[str, Any]]:
        if not rest and method == "GET":
            items = [n for n in self.nodes.values() if matches_labels(n, labels)]
            return 200, self._list("NodeList", copy.deepcopy(items))
        name = rest[0] if rest else ""
        if name not in self.nodes:
            return 404, status_object(404, "NotFound", f'nodes "{name}" not found')
        if method == "GET":
            return 200, copy.deepcopy(self.nodes[name])
        if method == "PATCH":
            apply_patch(self.nodes[name], body, ctype)
            self.nodes[name]["metadata"]["resourceVersion"] = self._next_version()
            return 200, copy.deepcopy(self.nodes[name])
        return 405, status_object(405, "MethodNotAllowed", f"{method} on a node")

    def _pods(self, namespace: str | None, fields: str, labels: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(p) for p in self.pods.values()
                if (namespace is None or p["metadata"]["namespace"] == namespace)
                and matches_fields(p, fields) and matches_labels(p, labels)]

    def _namespaced_pods(self, method: str, ns: str, rest: list[str], fields: str,
                         labels: str) -> tuple[int, dict[str, Any]]:
        if not rest and method == "GET":
            return 200, self._list("PodList", self._pods(ns, fields, labels))
        key = f"{ns}/{rest[0]}" if rest else ""
        if key not in self.pods:
            return 404, status_object(404, "NotFound", f'pods "{rest[0] if rest else ""}" not found')
        if rest[1:] == ["eviction"] and method == "POST":
            return self._evict(key)
        if len(rest) == 1 and method == "GET":
            return 200, copy.deepcopy(self.pods[key])
        if len(rest) == 1 and method == "DELETE":
            return 200, self.pods.pop(key)
        return 405, status_object(405, "MethodNotAllowed", f"{method} on a pod")

    def _evict(self, key: str) -> tuple[int, dict[str, Any]]:
        refusals = self.refusals.get(key, 0)
        blocking = [b for b in self.pdbs if not b.allows(self.pods[key], self.pods.values())]
        if refusals > 0 or blocking:
            if refusals > 0:
                self.refusals[key] = refusals - 1
            name = blocking[0].name if blocking else "fake-pdb"
            return 429, status_object(
                429, "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
                causes=[{"reason": "DisruptionBudget",
                         "message": f"The disruption budget {name} does not allow it"}])
        self.pods.pop(key)
        self.evicted.append(key)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                     "code": 201}


def _handler(kube: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                self._reply(400, status_object(400, "BadRequest", "body is not JSON"))
                return
            ctype = self.headers.get("Content-Type", "")
            code, payload = kube.handle(self.command, url.path, parse_qs(url.query), body, ctype)
            self._reply(code, payload)

        def _reply(self, code: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)  # the client timed out and left

        do_GET = do_PATCH = do_POST = do_DELETE = _serve

    return Handler
