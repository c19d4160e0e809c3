"""What RBAC permissions the project's Kubernetes code needs, found two ways.

* Statically: every ``kubernetes`` client method that code under ``autoscaler/`` (the
  sandbox aside: it never runs against a real cluster) names, as an attribute of any
  object (``api.list_node`` handed to an informer counts as much as a call), for the API
  classes it uses (``client.CoreV1Api``...). Each method's HTTP method and path come from
  the client itself: the generated code of the method holds them
  (``method='POST', resource_path='/api/v1/namespaces/{namespace}/pods/{name}/eviction'``).
  A list method handed to an ``Informer`` (or to a function of the module that builds one)
  is listed, then watched.
* Dynamically: the requests the project's fake API server recorded (``FakeKube.requests``).

Both turn a request into permissions with ``permissions``, the API server's own mapping:
GET of a collection is ``list`` (``watch`` with ``watch=true``), of one object ``get``;
POST ``create``; PATCH ``patch``; DELETE ``delete``.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from pathlib import Path

import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "kubernetes" / "rbac.yaml"
Permission = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)

# schedulers/kubernetes/watch.py: lists what it is given, then watches it from that version.
WATCHERS = frozenset({"Informer"})
# The exec WebSocket upgrade is a GET (authorized as get); since Kubernetes 1.35 the API
# server checks create on it too (AuthorizePodWebsocketUpgradeCreatePermission), as for
# the SPDY POST.
CONNECT = frozenset({"pods/exec", "pods/attach", "pods/portforward"})
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}
# In the generated _<method>_serialize: param_serialize(method='GET', resource_path='/api/v1/nodes'
REQUEST = re.compile(r"method='(\w+)',\s*resource_path='([^']+)'")


def permissions(method: str, path: str, watch: bool = False) -> set[Permission]:
    """What the API server authorizes a ``method`` request on ``path`` as."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"]:
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"{method} {path} is not a resource request")
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]  # namespaces/<ns>/pods/... is a pod request in <ns>
    resource = "/".join(rest[:1] + rest[2:3])
    named = len(rest) >= 2
    if method == "GET":
        verb = "watch" if watch else ("get" if named else "list")
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = VERBS[method]
    out = {(group, resource, verb)}
    if resource in CONNECT and verb == "get":
        out.add((group, resource, "create"))
    return out


def granted(manifest: Path = MANIFEST) -> set[Permission]:
    """Every (group, resource, verb) the manifest's ClusterRole grants."""
    out: set[Permission] = set()
    for doc in yaml.safe_load_all(manifest.read_text()):
        if doc["kind"] != "ClusterRole":
            continue
        for rule in doc["rules"]:
            out |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"]
                    for v in rule["verbs"]}
    return out


# -- the static side ------------------------------------------------------------------------
def project_sources() -> dict[Path, str]:
    return {path: path.read_text() for path in sorted((REPO / "autoscaler").rglob("*.py"))
            if "sandbox" not in path.relative_to(REPO).parts}


def api_classes(sources: dict[Path, str]) -> list[type]:
    """The client API classes the code names (``client.CoreV1Api``, ``BatchV1Api``...)."""
    names = {m for text in sources.values() for m in re.findall(r"\b[A-Z]\w*Api\b", text)}
    return sorted((c for name in names if isinstance(c := getattr(client, name, None), type)),
                  key=lambda c: c.__name__)


def api_methods(classes: list[type]) -> dict[str, list[type]]:
    """Request methods (those with a ``_with_http_info`` twin) -> the classes having them."""
    out: dict[str, list[type]] = {}
    for cls in classes:
        for name, _ in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_") and hasattr(cls, f"{name}_with_http_info"):
                out.setdefault(name, []).append(cls)
    return out


def _watchers(tree: ast.Module) -> set[str]:
    """``Informer`` and the functions of this module that build one with their argument."""
    found = set(WATCHERS)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(
                isinstance(call, ast.Call) and _callee(call) in WATCHERS for call in ast.walk(node)):
            found.add(node.name)
    return found


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


@functools.cache
def client_calls() -> dict[str, tuple[type, list[tuple[str, bool]]]]:
    """method -> (API class, its uses: (``file:line``, handed to a watcher?))."""
    sources = project_sources()
    methods = api_methods(api_classes(sources))
    out: dict[str, tuple[type, list[tuple[str, bool]]]] = {}
    for path, text in sources.items():
        if not methods.keys() & set(re.findall(r"\.(\w+)", text)):
            continue  # names no client method: not worth parsing
        tree = ast.parse(text, str(path))
        watched: set[int] = set()  # ids of the nodes inside what is handed to a watcher
        watchers = _watchers(tree)
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and _callee(call) in watchers:
                args = [*call.args, *(k.value for k in call.keywords)]
                watched |= {id(n) for arg in args for n in ast.walk(arg)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in methods:
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                if len(classes := methods[node.attr]) > 1:  # which group it calls is a guess
                    raise ValueError(f"{where}: {node.attr} is a method of "
                                     + " and ".join(c.__name__ for c in classes))
                out.setdefault(node.attr, (classes[0], []))[1].append((where, id(node) in watched))
    return out


def request_of(cls: type, method: str) -> tuple[str, str]:
    """(HTTP method, path template) of a client method, read from its generated code."""
    found = REQUEST.search(inspect.getsource(getattr(cls, f"_{method}_serialize")))
    if found is None:
        raise ValueError(f"{cls.__name__}._{method}_serialize: no HTTP method and path in it")
    return found.group(1), found.group(2)


@functools.cache
def needed_by_code() -> dict[Permission, list[str]]:
    """Every permission the code's client calls need -> the uses (``file:line (method)``)."""
    out: dict[Permission, list[str]] = {}
    for method, (cls, uses) in client_calls().items():
        http, path = request_of(cls, method)
        for where, watched in uses:
            perms = permissions(http, path) | (permissions(http, path, watch=True) if watched else set())
            for perm in perms:
                out.setdefault(perm, []).append(f"{where} ({method})")
    return out
