"""GET /openapi.json on the API as the service starts it: /v1/requests is described with
the strict request model that validates its bodies."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from tests.requests.conftest import OPERATOR, VISION
from tests.service.http.hostile import running_service


def resolve(doc: dict[str, Any], ref: dict[str, str]) -> dict[str, Any]:
    node: Any = doc
    for part in ref["$ref"].removeprefix("#/").split("/"):
        node = node[part]
    return dict(node)


def test_the_openapi_description_describes_v1_requests(tmp_path: Path):
    with running_service(tmp_path) as svc:
        assert svc.api is not None
        with urllib.request.urlopen(f"{svc.api.url}/openapi.json", timeout=5) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"] == "application/json"
            text = resp.read().decode()
    doc = json.loads(text)
    assert doc["openapi"].startswith("3.") and doc["info"]["title"] == "gpu-autoscaler"
    paths = doc["paths"]
    assert {"/healthz", "/metrics", "/status", "/plan", "/ui", "/ui/login", "/ui/logout",
            "/v1/requests", "/v1/requests/{request_id}"} <= set(paths)
    assert set(paths["/v1/requests/{request_id}"]) == {"get", "delete"}
    create = paths["/v1/requests"]["post"]
    assert {"200", "201", "400", "401", "409", "411", "413", "422"} <= set(create["responses"])
    spec = resolve(doc, create["requestBody"]["content"]["application/json"]["schema"])
    assert spec["additionalProperties"] is False and {"name", "node_sets"} <= set(spec["required"])
    assert {"class", "ttl", "dry_run", "idempotency_key"} <= set(spec["properties"])
    assert spec["properties"]["dry_run"]["type"] == "boolean"
    assert spec["properties"]["ttl"]["type"] == "string"
    node_set = resolve(doc, spec["properties"]["node_sets"]["items"])
    assert node_set["properties"]["gpus"] == {
        "type": "integer", "minimum": 1, "maximum": 16, "description": "GPUs per node.",
        "title": "Gpus"}
    view = resolve(doc, create["responses"]["201"]["content"]["application/json"]["schema"])
    assert {"id", "team", "condition", "reason", "spec"} <= set(view["properties"])
    for secret in (OPERATOR, VISION):
        assert secret not in text
