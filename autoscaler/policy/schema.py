"""JSON Schema of a team policy file, for editors (yaml-language-server) and CI linters."""

from __future__ import annotations

from typing import Any

from autoscaler.policy.models import TeamPolicy


def json_schema() -> dict[str, Any]:
    schema = TeamPolicy.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://gpu-autoscaler.dev/schema/team-policy-v1.json"
    schema["title"] = "gpu-autoscaler team policy"
    return schema
