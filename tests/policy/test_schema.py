from __future__ import annotations

import json

from autoscaler.policy import json_schema


def test_schema_describes_the_policy_file():
    schema = json_schema()
    json.dumps(schema)  # serializable for editors
    assert schema["title"] == "gpu-autoscaler team policy"
    assert set(schema["required"]) == {"team", "pools"}
    pool = schema["$defs"]["Pool"]
    assert pool["additionalProperties"] is False
    assert {"scale_up", "scale_down", "capacity", "schedule", "lifetime", "bootstrap", "cluster"} <= set(
        pool["properties"])
    window = schema["$defs"]["ScaleUp"]["properties"]["window"]
    assert window["type"] == "string" and "pattern" in window
