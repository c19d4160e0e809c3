"""``FakeKube``'s HTTP side: routes, lists, watch streams, eviction, discovery."""

from __future__ import annotations

import contextlib
import copy
import json
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

from autoscaler.sandbox.fakes.kube_exec import serve_exec
from autoscaler.sandbox.fakes.kube_objects import (
    apply_patch,
    matches_fields,
    matches_labels,
    status_object,
    timestamp,
)
from autoscaler.sandbox.fakes.kube_store import KINDS, NAMESPACED

if TYPE_CHECKING:
    from autoscaler.sandbox.fakes.kube import FakeKube

Reply = tuple[int, dict[str, Any]]
GROUPS = {"scheduling.k8s.io/v1": ["priorityclasses"], "batch/v1": ["jobs"],
          "rbac.authorization.k8s.io/v1": ["clusterroles", "clusterrolebindings"]}
CORE = ["nodes", "pods", "persistentvolumeclaims", "persistentvolumes", "resourcequotas",
        "namespaces", "serviceaccounts"]


def _resource_list(group_version: str, names: list[str]) -> dict[str, Any]:
    verbs = ["get", "list", "watch", "patch", "delete"] + (["create"] if group_version == "v1" else [])
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": [{"name": n, "singularName": KINDS[n].lower(), "kind": KINDS[n],
                           "namespaced": n in NAMESPACED, "verbs": verbs} for n in names]
            + ([{"name": "pods/eviction", "singularName": "", "kind": "Eviction",
                 "group": "policy", "version": "v1", "namespaced": True, "verbs": ["create"]},
                {"name": "pods/exec", "singularName": "", "kind": "PodExecOptions",
                 "namespaced": True, "verbs": ["create", "get"]}]
               if group_version == "v1" else [])}


def discovery(path: str) -> dict[str, Any] | None:
    if path == "/version":
        return {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake", "platform": "linux/amd64"}
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if path == "/apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": gv.split("/")[0], "versions": [{"groupVersion": gv, "version": "v1"}],
             "preferredVersion": {"groupVersion": gv, "version": "v1"}} for gv in GROUPS]}
    if path == "/api/v1":
        return _resource_list("v1", CORE)
    for gv, names in GROUPS.items():
        if path == f"/apis/{gv}":
            return _resource_list(gv, names)
    return None


class Request:
    """One request, parsed: which resource, namespace, name and subresource."""

    def __init__(self, method: str, path: str, query: dict[str, list[str]]):
        self.method, self.path = method, path
        self.q = {k: v[0] for k, v in query.items()}
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif parts[:1] == ["apis"] and "/".join(parts[1:3]) in GROUPS:
            rest = parts[3:]
        else:
            rest = ["?"]
        self.namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            self.namespace, rest = rest[1], rest[2:]
        self.resource = rest[0] if rest else ""
        self.name = rest[1] if len(rest) > 1 else None
        self.sub = rest[2] if len(rest) > 2 else None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else str(self.name)

    @property
    def watching(self) -> bool:
        return self.q.get("watch") in ("true", "1", "True")


class Api:
    def __init__(self, kube: FakeKube):
        self.kube = kube
        self.store = kube.store

    def handle(self, req: Request, body: Any, ctype: str) -> Reply:
        kube = self.kube
        with self.store.lock:
            kube.requests.append((req.method, req.path))
            kube.advance()
            found = discovery(req.path)
            if found is not None:
                return 200, found
            if req.resource not in KINDS:
                return 404, status_object(404, "NotFound", f"{req.path} is not served by FakeKube")
            if req.name is None and req.method == "GET":
                return 200, self.list(req)
            if req.name is None and req.method == "POST" and req.resource in ("nodes", "pods"):
                return self.create(req, body)
            objects = self.store.objects[req.resource]
            if req.key not in objects:
                return 404, status_object(404, "NotFound", f'{req.resource} "{req.name}" not found')
            if req.sub == "eviction" and req.method == "POST":
                return self.evict(req.key)
            if req.sub is not None:
                return 405, status_object(405, "MethodNotAllowed", f"{req.method} {req.sub}")
            if req.method == "GET":
                return 200, copy.deepcopy(objects[req.key])
            if req.method == "PATCH":
                return 200, copy.deepcopy(self.store.touch(
                    req.resource, req.key, lambda obj: apply_patch(obj, body, ctype)))
            if req.method == "DELETE":
                return 200, self.store.delete(req.resource, req.key) or {}
            return 405, status_object(405, "MethodNotAllowed", f"{req.method} on {req.resource}")

    def create(self, req: Request, body: Any) -> Reply:
        """POST a node (what kubelet does when ``kubeadm join`` starts it) or a pod; the
        server fills uid and creationTimestamp, keeps the status the client sent."""
        meta = body.get("metadata") if isinstance(body, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            return 400, status_object(400, "BadRequest", "metadata.name is required")
        key = f"{req.namespace}/{name}" if req.resource in NAMESPACED else name
        if key in self.store.objects[req.resource]:
            return 409, status_object(409, "AlreadyExists", f'{req.resource} "{name}" already exists')
        obj = copy.deepcopy(body)
        obj["metadata"].update(uid=f"uid-{key}", creationTimestamp=timestamp(self.kube.clock()))
        if req.resource in NAMESPACED:
            obj["metadata"]["namespace"] = req.namespace
        obj.setdefault("spec", {})
        obj.setdefault("status", {})
        return 201, copy.deepcopy(self.store.put(req.resource, key, obj))

    def _selected(self, req: Request, obj: dict[str, Any]) -> bool:
        return ((req.namespace is None or obj["metadata"].get("namespace") == req.namespace)
                and matches_fields(obj, req.q.get("fieldSelector", ""))
                and matches_labels(obj, req.q.get("labelSelector", "")))

    def list(self, req: Request) -> dict[str, Any]:
        items = [copy.deepcopy(o) for o in self.store.objects[req.resource].values()
                 if self._selected(req, o)]
        return {"apiVersion": "v1", "kind": KINDS[req.resource] + "List", "items": items,
                "metadata": {"resourceVersion": str(self.store.version)}}

    def evict(self, key: str) -> Reply:
        kube = self.kube
        refusals = kube.refusals.get(key, 0)
        blocking = [b for b in kube.pdbs if not b.allows(kube.pods[key], kube.pods.values())]
        if refusals > 0 or blocking:
            if refusals > 0:
                kube.refusals[key] = refusals - 1
            name = blocking[0].name if blocking else "fake-pdb"
            return 429, status_object(
                429, "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
                causes=[{"reason": "DisruptionBudget",
                         "message": f"The disruption budget {name} does not allow it"}])
        self.store.delete("pods", key)
        kube.evicted.append(key)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                     "code": 201}

    # -- watch ----------------------------------------------------------------------
    def watch(self, req: Request, write: Any) -> None:
        """Stream events until ``timeoutSeconds``, the client leaves or the server stops."""
        kube, store = self.kube, self.store
        with store.lock:
            kube.requests.append(("WATCH", req.path))
            rv = req.q.get("resourceVersion", "")
            if rv in ("", "0"):  # no version: the current objects first, as ADDED
                for obj in self.list(req)["items"]:
                    write({"type": "ADDED", "object": obj})
                rv = str(store.version)
        version = int(rv)
        timeout = float(req.q.get("timeoutSeconds") or 1800)
        bookmarks = req.q.get("allowWatchBookmarks") in ("true", "1", "True")
        deadline, next_mark = time.monotonic() + timeout, time.monotonic() + kube.bookmark_s
        while time.monotonic() < deadline and not kube.stopped.is_set():
            with store.changed:
                kube.advance()
                events = store.since(req.resource, version)
                if events is None:
                    write({"type": "ERROR", "object": status_object(
                        410, "Expired", f"too old resource version: {version} ({store.oldest})")})
                    return
                batch = list(events)
                seen = store.version  # every event up to here is in batch (before any wait)
                if not batch:
                    store.changed.wait(timeout=min(0.2, kube.bookmark_s))
            for event in batch:
                kind = event.type
                if not self._selected(req, event.obj):
                    if kind != "MODIFIED":
                        continue
                    kind = "DELETED"  # it left the selection: informers drop it
                write({"type": kind, "object": event.obj})
            version = max(version, batch[-1].version) if batch else version
            if bookmarks and time.monotonic() >= next_mark:
                version = max(version, seen)
                write({"type": "BOOKMARK", "object": {
                    "kind": KINDS[req.resource], "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(version)}}})
                next_mark = time.monotonic() + kube.bookmark_s


def handler_for(kube: FakeKube) -> type[BaseHTTPRequestHandler]:
    api = Api(kube)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, and chunked watch streams (Go needs 1.1)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            url = urlparse(self.path)
            req = Request(self.command, url.path, parse_qs(url.query))
            if req.sub == "exec" and self.headers.get("Upgrade", "").lower() == "websocket" \
                    and req.key in kube.pods:
                with kube.store.lock:
                    kube.requests.append((self.command, url.path))
                serve_exec(self, kube, req)
                return
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                self._reply(400, status_object(400, "BadRequest", "body is not JSON"))
                return
            if (kube.join_token and req.method == "POST" and req.resource == "nodes"
                    and self.headers.get("Authorization") != f"Bearer {kube.join_token}"):
                self._reply(401, status_object(401, "Unauthorized", "joining needs the bootstrap token"))
                return
            if req.watching and req.method == "GET" and req.resource in KINDS:
                self._stream(req)
                return
            code, payload = api.handle(req, body, self.headers.get("Content-Type", ""))
            self._reply(code, payload)

        def _stream(self, req: Request) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")  # one chunk per event, as kube does
            self.send_header("Connection", "close")
            self.end_headers()

            def write(event: dict[str, Any]) -> None:
                data = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                api.watch(req, write)
                self.wfile.write(b"0\r\n\r\n")

        def _reply(self, code: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)  # the client timed out and left

        do_GET = do_PATCH = do_POST = do_DELETE = do_PUT = _serve

    return Handler
